package main

import (
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
			c, ctx, done, err := dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			table := ""
			if len(args) == 1 {
				table = args[0]
			}
			if _, err := c.Flush(ctx, &pb.FlushRequest{Table: table}); err != nil {
				return fmt.Errorf("flush: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "flushed")
			return nil
		},
	}
	cmd.AddCommand(flush)
	return cmd
}
