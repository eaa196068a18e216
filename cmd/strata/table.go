package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	pb "github.com/stratadb/strata/proto/strata/v1"
)

func newTable() *cobra.Command {
	cmd := &cobra.Command{Use: "table", Short: "Create, list, describe, truncate and drop tables"}
	clientFlags(cmd)

	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a table",
		Long:  "Create a table. Writes create tables too (with default options); create one first to choose its regions, timestamp column or TTL.",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c pb.DatanodeClient) error {
				regions, _ := cmd.Flags().GetUint32("regions")
				ts, _ := cmd.Flags().GetString("timestamp")
				ttl, _ := cmd.Flags().GetDuration("ttl")
				window, _ := cmd.Flags().GetDuration("compaction-window")
				partition, _ := cmd.Flags().GetString("partition-by")
				resp, err := c.CreateTable(ctx, &pb.CreateTableRequest{Name: args[0], Regions: regions, TimestampColumn: ts, TtlSeconds: int64(ttl / time.Second),
					CompactionWindowSeconds: int64(window / time.Second), PartitionBy: partition})
				if err != nil {
					return fmt.Errorf("create table %s: %w", args[0], err)
				}
				return created(cmd, partition, resp.Table)
			})
		},
	}
	create.Flags().Uint32("regions", 0, "number of regions, the table split by a hash of the series (0: the datanode's --default-regions, by default one per live datanode)")
	partitionFlag(create)
	create.Flags().String("timestamp", "time", "name of the timestamp column")
	create.Flags().Duration("ttl", 0, "drop rows older than this (0: keep forever)")
	create.Flags().Duration("compaction-window", 0, "TWCS time window (0: inferred from the data)")

	list := &cobra.Command{
		Use:   "list",
		Short: "List tables",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c pb.DatanodeClient) error {
				resp, err := c.ListTables(ctx, &pb.ListTablesRequest{})
				if err != nil {
					return fmt.Errorf("list tables: %w", err)
				}
				var rows [][]string
				for _, t := range resp.Tables {
					ttl := ""
					if t.TtlSeconds > 0 {
						ttl = (time.Duration(t.TtlSeconds) * time.Second).String()
					}
					rows = append(rows, []string{t.Name, strconv.Itoa(int(t.Id)), strconv.Itoa(int(t.Regions)), t.PartitionBy, strconv.Itoa(len(t.Columns)), ttl,
						time.Unix(t.CreatedAtUnix, 0).UTC().Format(time.RFC3339)})
				}
				format, _ := cmd.Flags().GetString("output")
				return output(cmd.OutOrStdout(), format, []string{"name", "id", "regions", "partition_by", "columns", "ttl", "created"}, rows)
			})
		},
	}
	outputFlag(list)

	describe := &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a table's columns and regions",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c pb.DatanodeClient) error {
				resp, err := c.DescribeTable(ctx, &pb.DescribeTableRequest{Name: args[0]})
				if err != nil {
					return fmt.Errorf("describe table %s: %w", args[0], err)
				}
				format, _ := cmd.Flags().GetString("output")
				w := cmd.OutOrStdout()
				var cols [][]string
				for _, col := range resp.Table.Columns {
					cols = append(cols, []string{col.Name, col.Role, col.Type})
				}
				if err := output(w, format, []string{"column", "role", "type"}, cols); err != nil {
					return err
				}
				if format == "table" {
					fmt.Fprintln(w)
				}
				var regs [][]string
				for _, r := range resp.Regions {
					regs = append(regs, []string{fmt.Sprintf("%d/%d", r.TableId, r.Region), strconv.FormatInt(r.Files, 10), strconv.FormatInt(r.Rows, 10),
						strconv.FormatInt(r.Bytes, 10), strconv.FormatInt(r.MemtableBytes, 10), strconv.FormatUint(r.FlushedSeq, 10),
						strconv.FormatUint(r.ManifestVersion, 10), strconv.FormatInt(r.PendingJobs, 10)})
				}
				return output(w, format, []string{"region", "files", "rows", "bytes", "memtable_bytes", "flushed_seq", "manifest_version", "pending_jobs"}, regs)
			})
		},
	}
	outputFlag(describe)

	drop := &cobra.Command{
		Use:   "drop NAME",
		Short: "Drop a table and delete its data",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c pb.DatanodeClient) error {
				if _, err := c.DropTable(ctx, &pb.DropTableRequest{Name: args[0]}); err != nil {
					return fmt.Errorf("drop table %s: %w", args[0], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "dropped table %s\n", args[0])
				return nil
			})
		},
	}
	truncate := &cobra.Command{
		Use:   "truncate NAME",
		Short: "Remove every row of a table, keeping the table",
		Long: `Remove every row written to the table before the command, keeping the table,
its schema and its regions. Running compactions are cancelled first. The
files are deleted by GC after the lingering time, so queries already
running finish.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c pb.DatanodeClient) error {
				if _, err := c.TruncateTable(ctx, &pb.TruncateTableRequest{Name: args[0]}); err != nil {
					return fmt.Errorf("truncate table %s: %w", args[0], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "truncated table %s\n", args[0])
				return nil
			})
		},
	}
	cmd.AddCommand(create, list, describe, drop, truncate)
	return cmd
}

// exactArgs is cobra.ExactArgs with a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %d argument(s), got %d (see --help)", cmd.CommandPath(), n, len(args))
		}
		return nil
	}
}

// partitionFlag is table creation's --partition-by.
func partitionFlag(cmd *cobra.Command) {
	cmd.Flags().String("partition-by", "", "route series to regions by this tag's value alone, so a query naming values of the tag reads only their regions (default: by the whole series)")
}

// created prints a table just created, asked to be partitioned by
// partition ("": not).
func created(cmd *cobra.Command, partition string, t *pb.Table) error {
	by := ""
	if p := t.GetPartitionBy(); p != "" {
		by = ", partitioned by " + p
	} else if partition != "" {
		// A server older than partitioning ignores the field.
		return fmt.Errorf("create table %s: the server created it routed by whole series, not by %s (a build older than --partition-by): drop it and upgrade the server", t.GetName(), partition)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "created table %s (id %d, %d regions%s)\n", t.GetName(), t.GetId(), t.GetRegions(), by)
	return nil
}
