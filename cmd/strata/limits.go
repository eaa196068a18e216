package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratadb/strata/internal/limits"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

func newLimits() *cobra.Command {
	var keys strings.Builder
	for _, k := range limits.Keys {
		fmt.Fprintf(&keys, "  %-28s %s\n", k.Name, k.Help)
	}
	cmd := &cobra.Command{Use: "limits", Short: "Show or change a tenant's limits (docs/limits.md)",
		Long: `A tenant's limits are kept in the cluster's etcd and changed at run time:
every datanode applies a change to its next requests, without a restart.
0 (or "unlimited") is no limit, the default of every key. The keys:

` + keys.String()}
	cmd.PersistentFlags().String("metasrv", "localhost:8088", "a metasrv replica's admin gRPC address (a standalone's gRPC address)")
	cmd.PersistentFlags().Duration("timeout", 30*time.Second, "bound on the whole command (0: none)")
	cmd.PersistentFlags().String("auth-token-file", "", "file holding the auth token to send (default: $STRATA_AUTH_TOKEN)")
	cmd.PersistentFlags().String("tenant", limits.DefaultTenant, "the tenant whose limits are shown or changed (docs/tenants.md)")

	show := func(cmd *cobra.Command, resp *pb.LimitsResponse) error {
		format, _ := cmd.Flags().GetString("output")
		rows := make([][]string, 0, len(resp.Limits))
		for _, l := range resp.Limits {
			v := l.Value
			if v == "0" && format != "json" && format != "csv" {
				v = "unlimited"
			}
			rows = append(rows, []string{l.Key, v, l.Help})
		}
		return output(cmd.OutOrStdout(), format, []string{"key", "value", "meaning"}, rows)
	}
	get := &cobra.Command{
		Use: "get", Short: "Every limit of the tenant, with its value and meaning", Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant, _ := cmd.Flags().GetString("tenant")
			return withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
				resp, err := c.GetLimits(ctx, &pb.GetLimitsRequest{Tenant: tenant})
				if err != nil {
					return callErr("get limits", err)
				}
				return show(cmd, resp)
			})
		},
	}
	outputFlag(get)
	set := &cobra.Command{
		Use:   "set KEY=VALUE...",
		Short: "Change limits of the tenant (0 or unlimited: no limit); the others stay",
		Args:  argRange(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := new(limits.Limits).Set(args...); err != nil {
				return usagef("%v", err)
			}
			tenant, _ := cmd.Flags().GetString("tenant")
			return withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
				resp, err := c.SetLimits(ctx, &pb.SetLimitsRequest{Tenant: tenant, Set: args})
				if err != nil {
					return callErr("set limits", err)
				}
				return show(cmd, resp)
			})
		},
	}
	outputFlag(set)
	cmd.AddCommand(get, set)
	return cmd
}
