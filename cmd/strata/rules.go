package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"

	pb "github.com/stratadb/strata/proto/strata/v1"
)

// rpcError shows a call's failure by its message alone, keeping its
// status (and so the exit code).
type rpcError struct {
	what string
	st   *status.Status
}

func (e rpcError) Error() string              { return e.what + ": " + e.st.Message() }
func (e rpcError) GRPCStatus() *status.Status { return e.st }

func callErr(what string, err error) error {
	if st, ok := status.FromError(err); ok {
		return rpcError{what, st}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// namespaceOf is a rule file's default namespace: its base name without
// extension.
func namespaceOf(path string) string {
	base := filepath.Base(path)
	if ns := strings.TrimSuffix(base, filepath.Ext(base)); ns != "" {
		return ns
	}
	return base
}

func newRules() *cobra.Command {
	cmd := &cobra.Command{Use: "rules", Short: "Manage the recording and alerting rules a cluster evaluates (docs/rules.md)",
		Long: `Rule groups, in Prometheus' rule-file format, are stored in the cluster's
etcd by namespace and evaluated each by one datanode at a time (a
standalone evaluates them all). Loading a file replaces its namespace.
A namespace is a tenant's (--tenant): each tenant has its own.`}
	cmd.PersistentFlags().String("metasrv", "localhost:8088", "a metasrv replica's admin gRPC address (a standalone's gRPC address)")
	cmd.PersistentFlags().Duration("timeout", 30*time.Second, "bound on the whole command (0: none)")
	cmd.PersistentFlags().String("auth-token-file", "", "file holding the auth token to send (default: $STRATA_AUTH_TOKEN)")
	cmd.PersistentFlags().String("tenant", "", "the tenant whose rule namespaces the command names; its rules read and write its series (sent as x-scope-orgid; default: the default tenant; docs/tenants.md)")

	load := &cobra.Command{
		Use:   "load FILE...",
		Short: "Load rule files, each replacing its namespace (default: the file's base name without extension)",
		Long: `Loads Prometheus rule files. Each file replaces the namespace it names
(--namespace, or the file's base name without extension): groups of the
namespace not in the file are removed. Every file is validated with
Prometheus' rulefmt first; a bad file is refused with its name, line and
reason, and nothing of any file is applied.`,
		Args: argRange(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, _ := cmd.Flags().GetString("namespace")
			if ns != "" && len(args) > 1 {
				return usagef("--namespace names one file's namespace; %d files given", len(args))
			}
			req := &pb.LoadRulesRequest{}
			for _, path := range args {
				b, err := os.ReadFile(path)
				if err != nil {
					return usagef("%v", err)
				}
				f := &pb.RuleFile{Namespace: ns, Name: path, Content: b}
				if f.Namespace == "" {
					f.Namespace = namespaceOf(path)
				}
				req.Files = append(req.Files, f)
			}
			return withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
				resp, err := c.LoadRules(ctx, req)
				if err != nil {
					return callErr("load rules", err)
				}
				w := cmd.OutOrStdout()
				for _, g := range resp.Groups {
					fmt.Fprintf(w, "loaded %s/%s: %d recording, %d alerting rules\n", g.Namespace, g.Name, g.RecordingRules, g.AlertingRules)
				}
				for _, r := range resp.Removed {
					fmt.Fprintf(w, "removed %s\n", r)
				}
				return nil
			})
		},
	}
	load.Flags().String("namespace", "", "namespace of the (one) file (default: its base name without extension)")

	list := &cobra.Command{
		Use: "list [NAMESPACE]", Short: "The stored rule groups and the datanode evaluating each", Args: argRange(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, _ := cmd.Flags().GetString("output")
			req := &pb.ListRulesRequest{}
			if len(args) == 1 {
				req.Namespace = args[0]
			}
			return withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
				resp, err := c.ListRules(ctx, req)
				if err != nil {
					return callErr("list rules", err)
				}
				if format == "yaml" {
					for _, g := range resp.Groups {
						fmt.Fprintf(cmd.OutOrStdout(), "# namespace %s, evaluated by %s\n%s", g.Namespace, orNone(g.Owner), g.Content)
					}
					return nil
				}
				var rows [][]string
				for _, g := range resp.Groups {
					itv := "default"
					if g.IntervalSeconds > 0 {
						itv = (time.Duration(g.IntervalSeconds) * time.Second).String()
					}
					rows = append(rows, []string{g.Namespace, g.Name, itv, strconv.Itoa(int(g.RecordingRules)), strconv.Itoa(int(g.AlertingRules)), orNone(g.Owner)})
				}
				return output(cmd.OutOrStdout(), format, []string{"namespace", "group", "interval", "recording", "alerting", "evaluated_by"}, rows)
			})
		},
	}
	list.Flags().StringP("output", "o", "table", "output format: table, csv, json, or yaml (the groups' rules)")

	del := &cobra.Command{
		Use: "delete NAMESPACE [GROUP]", Short: "Delete a namespace's rule groups, or one of them", Args: argRange(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &pb.DeleteRulesRequest{Namespace: args[0]}
			if len(args) == 2 {
				req.Group = args[1]
			}
			return withMeta(cmd, func(ctx context.Context, c pb.MetaAdminClient) error {
				resp, err := c.DeleteRules(ctx, req)
				if err != nil {
					return callErr("delete rules", err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted %d group(s)\n", resp.Deleted)
				return nil
			})
		},
	}
	cmd.AddCommand(load, list, del)
	return cmd
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// argRange accepts min to max arguments (max < 0: any number), a usage
// error otherwise.
func argRange(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || hi >= 0 && len(args) > hi {
			return usagef("%s: wrong number of arguments, %d (see --help)", cmd.CommandPath(), len(args))
		}
		return nil
	}
}
