package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	pb "github.com/stratadb/strata/proto/strata/v1"
)

// withMeta runs f with a client of --metasrv, bounded by --timeout.
func withMeta(cmd *cobra.Command, f func(ctx context.Context, c pb.MetaAdminClient) error) error {
	addr, _ := cmd.Flags().GetString("metasrv")
	timeout, _ := cmd.Flags().GetDuration("timeout")
	opts, err := clientAuth(cmd)
	if err != nil {
		return err
	}
	tr, err := transport(cmd)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(addr, append(opts, tr)...)
	if err != nil {
		return usagef("--metasrv %q: %v", addr, err)
	}
	defer conn.Close()
	ctx, err := withTenant(cmd, cmd.Context())
	if err != nil {
		return err
	}
	cancel := context.CancelFunc(func() {})
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	return hintTLS(cmd, addr, f(ctx, pb.NewMetaAdminClient(conn)))
}

func unixOrEmpty(s int64) string {
	if s == 0 {
		return ""
	}
	return time.Unix(s, 0).UTC().Format(time.RFC3339)
}

func newCluster() *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Manage a cluster through metasrv's admin API"}
	cmd.PersistentFlags().String("metasrv", "localhost:8088", "a metasrv replica's admin gRPC address (followers forward to the leader)")
	cmd.PersistentFlags().Duration("timeout", 30*time.Second, "bound on the whole command (0: none)")
	cmd.PersistentFlags().String("auth-token-file", "", "file holding the auth token to send (default: $STRATA_AUTH_TOKEN)")
	tenantFlag(cmd.PersistentFlags())
	n := func(v int64) string { return strconv.FormatInt(v, 10) }

	status := &cobra.Command{
		Use: "status", Short: "The leader, the live datanodes and every region's owner", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
				st, err := c.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
				if err != nil {
					return fmt.Errorf("cluster status: %w", err)
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "leader %s\n\n", st.Leader)
				var rows [][]string
				for _, m := range st.Metasrvs {
					role := "follower"
					if m.Leader {
						role = "leader"
					}
					rows = append(rows, []string{m.Addr, role, m.Version, m.Revision, unixOrEmpty(m.StartedUnix)})
				}
				if err := output(w, "table", []string{"metasrv", "role", "version", "revision", "started"}, rows); err != nil {
					return err
				}
				fmt.Fprintln(w)
				rows = nil
				builds := map[string]bool{}
				for _, m := range st.Metasrvs {
					builds[m.Version+" "+m.Revision] = true
				}
				for _, d := range st.Datanodes {
					rows = append(rows, []string{d.Id, d.GrpcAddr, d.HttpAddr, n(d.Regions), d.Version, d.Revision, unixOrEmpty(d.StartedUnix)})
					builds[d.Version+" "+d.Revision] = true
				}
				if err := output(w, "table", []string{"datanode", "grpc", "http", "regions", "version", "revision", "started"}, rows); err != nil {
					return err
				}
				if len(builds) > 1 {
					fmt.Fprintf(w, "\nmixed versions: %d different builds are running\n", len(builds))
				}
				fmt.Fprintln(w)
				rows = nil
				for _, r := range st.Regions {
					live := "live"
					if !r.OwnerLive {
						live = "NOT LIVE"
					}
					rows = append(rows, []string{r.Region, r.Table, r.Owner, strconv.FormatUint(r.Gen, 10), live})
				}
				return output(w, "table", []string{"region", "table", "owner", "gen", "owner_state"}, rows)
			})
		},
	}
	regions := &cobra.Command{
		Use: "regions", Short: "Regions with owner, epoch, files, bytes and pending markers", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			table, _ := cmd.Flags().GetString("table")
			format, _ := cmd.Flags().GetString("output")
			return withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
				resp, err := c.ListRegions(ctx, &pb.ListRegionsRequest{Table: table})
				if err != nil {
					return fmt.Errorf("list regions: %w", err)
				}
				var rows [][]string
				for _, r := range resp.Regions {
					p, s := r.Placement, r.Stats
					if s == nil {
						s = &pb.RegionStat{}
					}
					rows = append(rows, []string{p.Region, p.Table, p.Owner, strconv.FormatUint(s.Epoch, 10), n(s.Files), n(s.Rows), n(s.Bytes),
						n(s.PendingJobs), n(s.RemovedFiles), strconv.FormatUint(s.ManifestVersion, 10), r.Error})
				}
				return output(cmd.OutOrStdout(), format, []string{"region", "table", "owner", "epoch", "files", "rows", "bytes", "pending", "removed", "manifest", "error"}, rows)
			})
		},
	}
	regions.Flags().String("table", "", "only this table's regions")
	outputFlag(regions)
	move := &cobra.Command{
		Use: "move REGION DATANODE", Short: "Move a region (table_id/region) to a live datanode", Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
				resp, err := c.MoveRegion(ctx, &pb.MoveRegionRequest{Region: args[0], To: args[1]})
				if err != nil {
					return fmt.Errorf("move %s: %w", args[0], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "region %s assigned to %s (gen %d)\n", resp.Placement.Region, resp.Placement.Owner, resp.Placement.Gen)
				return nil
			})
		},
	}
	create := &cobra.Command{
		Use: "create-table NAME", Short: "Create a table; metasrv places its regions", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			regions, _ := cmd.Flags().GetUint32("regions")
			ttl, _ := cmd.Flags().GetDuration("ttl")
			partition, _ := cmd.Flags().GetString("partition-by")
			return withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
				resp, err := c.CreateTable(ctx, &pb.CreateTableRequest{Name: args[0], Regions: regions, TtlSeconds: int64(ttl / time.Second), PartitionBy: partition})
				if err != nil {
					return fmt.Errorf("create table %s: %w", args[0], err)
				}
				return created(cmd, partition, resp.Table)
			})
		},
	}
	create.Flags().Uint32("regions", 0, "number of regions (0: metasrv's --default-regions, by default one per live datanode)")
	create.Flags().Duration("ttl", 0, "drop rows older than this (0: keep forever)")
	partitionFlag(create)
	describe := &cobra.Command{
		Use: "describe-table NAME", Short: "A table's columns and its regions' statistics", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
				resp, err := c.DescribeTable(ctx, &pb.DescribeTableRequest{Name: args[0]})
				if err != nil {
					return fmt.Errorf("describe table %s: %w", args[0], err)
				}
				w := cmd.OutOrStdout()
				if resp.Table.Logical {
					fmt.Fprintf(w, "table %s (id %d, logical: its rows are in __lines)\n", resp.Table.Name, resp.Table.Id)
				} else {
					fmt.Fprintf(w, "table %s (id %d, %d regions)\n", resp.Table.Name, resp.Table.Id, resp.Table.Regions)
				}
				var rows [][]string
				for _, col := range resp.Table.Columns {
					rows = append(rows, []string{col.Name, col.Role, col.Type})
				}
				if err := output(w, "table", []string{"column", "role", "type"}, rows); err != nil {
					return err
				}
				rows = nil
				for _, r := range resp.Regions {
					rows = append(rows, []string{fmt.Sprintf("%d/%d", r.TableId, r.Region), n(r.Files), n(r.Rows), n(r.Bytes), n(r.PendingJobs), strconv.FormatUint(r.Epoch, 10)})
				}
				fmt.Fprintln(w)
				return output(w, "table", []string{"region", "files", "rows", "bytes", "pending", "epoch"}, rows)
			})
		},
	}
	drop := &cobra.Command{
		Use: "drop-table NAME", Short: "Drop a table: close its regions everywhere, delete its objects", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
				if _, err := c.DropTable(ctx, &pb.DropTableRequest{Name: args[0]}); err != nil {
					return fmt.Errorf("drop table %s: %w", args[0], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "dropped table %s\n", args[0])
				return nil
			})
		},
	}
	compactCmd := &cobra.Command{
		Use: "compact TABLE", Short: "Compact a table's regions on their owners and wait", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			all, _ := cmd.Flags().GetBool("all")
			return withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
				resp, err := c.Compact(ctx, &pb.CompactRequest{Table: args[0], All: all})
				if err != nil {
					return fmt.Errorf("compact %s: %w", args[0], err)
				}
				for _, j := range resp.Jobs {
					fmt.Fprintf(cmd.OutOrStdout(), "compacted %d files (%d bytes) into %d (%d bytes) in %d ms\n", j.Inputs, j.BytesIn, j.Outputs, j.BytesOut, j.DurationMs)
				}
				if len(resp.Jobs) == 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "nothing to compact")
				}
				return nil
			})
		},
	}
	compactCmd.Flags().Bool("all", false, "compact every file, not just the window TWCS picks")
	cancel := &cobra.Command{
		Use: "cancel-compaction TABLE", Short: "Cancel a table's compactions on every owner and wait", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
				resp, err := c.CancelCompaction(ctx, &pb.CancelCompactionRequest{Table: args[0]})
				if err != nil {
					return fmt.Errorf("cancel compaction of %s: %w", args[0], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "cancelled %d, too late to cancel %d (committed)\n", resp.Cancelled, resp.TooLate)
				return nil
			})
		},
	}

	gcCmd := &cobra.Command{Use: "gc", Short: "Cluster GC: run now, scheduler status and options"}
	gcCmd.AddCommand(newGCRun(func(cmd *cobra.Command, req *pb.GcRegionRequest) (*pb.GcRegionResponse, error) {
		var resp *pb.GcRegionResponse
		err := withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
			var err error
			resp, err = c.GcRun(ctx, req)
			return err
		})
		return resp, err
	}))
	gcStatus := &cobra.Command{
		Use: "status", Short: "The scheduler's state of every region", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, _ := cmd.Flags().GetString("output")
			return withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
				resp, err := c.GcStatus(ctx, &pb.GcStatusRequest{})
				if err != nil {
					return fmt.Errorf("gc status: %w", err)
				}
				var rows [][]string
				for _, r := range resp.Regions {
					rows = append(rows, []string{r.Region, r.Tenant, unixOrEmpty(r.LastFastUnix), unixOrEmpty(r.LastFullUnix), unixOrEmpty(r.NextFastUnix), unixOrEmpty(r.NextFullUnix),
						r.LastResult, n(r.Runs), n(r.Failures), n(r.Deleted), n(r.Orphans), r.LastError})
				}
				return output(cmd.OutOrStdout(), format, []string{"region", "tenant", "last_fast", "last_full", "next_fast", "next_full", "result", "runs", "failures", "deleted", "orphans", "error"}, rows)
			})
		},
	}
	outputFlag(gcStatus)
	gcOptions := &cobra.Command{
		Use:   "options",
		Short: "Show the scheduler's options, or change some of them",
		Long: `Show the GC scheduler's options (stored in etcd), or change the ones given:
  strata cluster gc options --fast-interval 10m --full-interval 48h --enabled=false`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			return withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
				o, err := c.GetGcOptions(ctx, &pb.GetGcOptionsRequest{})
				if err != nil {
					return fmt.Errorf("gc options: %w", err)
				}
				changed := false
				dur := func(name string, dst *int64) {
					if f.Changed(name) {
						d, _ := f.GetDuration(name)
						*dst, changed = int64(d/time.Second), true
					}
				}
				if f.Changed("enabled") {
					o.Enabled, _ = f.GetBool("enabled")
					changed = true
				}
				dur("fast-interval", &o.FastIntervalSeconds)
				dur("full-interval", &o.FullIntervalSeconds)
				dur("lingering", &o.LingeringSeconds)
				dur("min-age", &o.MinAgeSeconds)
				dur("run-timeout", &o.RunTimeoutSeconds)
				if f.Changed("concurrency") {
					v, _ := f.GetInt32("concurrency")
					o.Concurrency, changed = v, true
				}
				if changed {
					if o, err = c.SetGcOptions(ctx, o); err != nil {
						return fmt.Errorf("set gc options: %w", err)
					}
				}
				sec := func(v int64) string { return (time.Duration(v) * time.Second).String() }
				return output(cmd.OutOrStdout(), "table", []string{"enabled", "fast_interval", "full_interval", "lingering", "min_age", "concurrency", "run_timeout"},
					[][]string{{strconv.FormatBool(o.Enabled), sec(o.FastIntervalSeconds), sec(o.FullIntervalSeconds), sec(o.LingeringSeconds), sec(o.MinAgeSeconds),
						strconv.Itoa(int(o.Concurrency)), sec(o.RunTimeoutSeconds)}})
			})
		},
	}
	gcOptions.Flags().Bool("enabled", true, "run scheduled GC")
	gcOptions.Flags().Duration("fast-interval", 0, "fast GC interval per region")
	gcOptions.Flags().Duration("full-interval", 0, "full-listing GC interval per region")
	gcOptions.Flags().Duration("lingering", 0, "removed files' lingering time")
	gcOptions.Flags().Duration("min-age", 0, "unowned objects' minimum age for full-listing GC")
	gcOptions.Flags().Duration("run-timeout", 0, "bound on one region's run")
	gcOptions.Flags().Int32("concurrency", 0, "regions collected at once")
	gcCmd.AddCommand(gcStatus, gcOptions)
	cmd.AddCommand(status, regions, move, create, describe, drop, compactCmd, cancel, gcCmd)
	return cmd
}
