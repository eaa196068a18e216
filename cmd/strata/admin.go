package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	pb "github.com/stratadb/strata/proto/strata/v1"
)

func newAdmin() *cobra.Command {
	cmd := &cobra.Command{Use: "admin", Short: "Operator commands"}
	clientFlags(cmd)
	flush := &cobra.Command{
		Use:   "flush [TABLE]",
		Short: "Flush memtables to SSTs (one table, or all)",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("admin flush takes at most one table")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c pb.DatanodeClient) error {
				table := ""
				if len(args) == 1 {
					table = args[0]
				}
				if _, err := c.Flush(ctx, &pb.FlushRequest{Table: table}); err != nil {
					return fmt.Errorf("flush: %w", err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), "flushed")
				return nil
			})
		},
	}
	compactCmd := &cobra.Command{
		Use:   "compact TABLE",
		Short: "Compact a table's regions now and wait",
		Long: `Compact each region of a table: the time window that TWCS picks (one with at
least 4 files), or with --all every file of the region. Prints each job's
inputs, outputs and bytes.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c pb.DatanodeClient) error {
				all, _ := cmd.Flags().GetBool("all")
				resp, err := c.Compact(ctx, &pb.CompactRequest{Table: args[0], All: all})
				if err != nil {
					return fmt.Errorf("compact %s: %w", args[0], err)
				}
				w := cmd.OutOrStdout()
				if len(resp.Jobs) == 0 {
					fmt.Fprintln(w, "nothing to compact")
				}
				for _, j := range resp.Jobs {
					fmt.Fprintf(w, "compacted %d files (%d bytes, %d rows) into %d (%d bytes, %d rows) in %d ms\n",
						j.Inputs, j.BytesIn, j.RowsIn, j.Outputs, j.BytesOut, j.RowsOut, j.DurationMs)
				}
				return nil
			})
		},
	}
	compactCmd.Flags().Bool("all", false, "compact every file, not just the window TWCS picks")
	cancelCmd := &cobra.Command{
		Use:   "cancel-compaction TABLE",
		Short: "Cancel a table's running compactions and wait for the acknowledgement",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c pb.DatanodeClient) error {
				resp, err := c.CancelCompaction(ctx, &pb.CancelCompactionRequest{Table: args[0]})
				if err != nil {
					return fmt.Errorf("cancel compaction of %s: %w", args[0], err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "cancelled %d, too late to cancel %d (committed)\n", resp.Cancelled, resp.TooLate)
				return nil
			})
		},
	}
	cmd.AddCommand(flush, compactCmd, cancelCmd, newGC())
	return cmd
}
