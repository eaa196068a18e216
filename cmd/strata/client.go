package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stratadb/strata/internal/auth"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// clientFlags adds the flags every client command has.
func clientFlags(cmd *cobra.Command) {
	cmd.PersistentFlags().String("server", "localhost:8087", "the datanode's gRPC address")
	cmd.PersistentFlags().String("auth-token-file", "", "file holding the auth token to send (default: $STRATA_AUTH_TOKEN)")
	cmd.PersistentFlags().Duration("timeout", 30*time.Second, "bound on the whole command (0: none)")
}

// dial connects to the server named by --server and returns a context
// bounded by --timeout.
func dial(cmd *cobra.Command) (pb.DatanodeClient, context.Context, func(), error) {
	addr, _ := cmd.Flags().GetString("server")
	timeout, _ := cmd.Flags().GetDuration("timeout")
	opts, err := clientAuth(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))...)
	if err != nil {
		return nil, nil, nil, usagef("--server %q: %v", addr, err)
	}
	ctx, cancel := cmd.Context(), context.CancelFunc(func() {})
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	return pb.NewDatanodeClient(conn), ctx, func() { cancel(); conn.Close() }, nil
}

// clientAuth are the dial options that send the token, if any.
func clientAuth(cmd *cobra.Command) ([]grpc.DialOption, error) {
	path, _ := cmd.Flags().GetString("auth-token-file")
	tok, err := auth.Load(path)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return tok.DialOptions(), nil
}

// withClient runs f with a client of --server and a context bounded by
// --timeout.
func withClient(cmd *cobra.Command, f func(ctx context.Context, c pb.DatanodeClient) error) error {
	c, ctx, done, err := dial(cmd)
	if err != nil {
		return err
	}
	defer done()
	return f(ctx, c)
}

// output renders rows as an aligned table, CSV or JSON (an array of
// objects keyed by header).
func output(w io.Writer, format string, header []string, rows [][]string) error {
	switch format {
	case "table", "":
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(header, "\t"))
		for _, r := range rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		return tw.Flush()
	case "csv":
		cw := csv.NewWriter(w)
		cw.Write(header)
		cw.WriteAll(rows)
		return cw.Error()
	case "json":
		out := make([]map[string]string, len(rows))
		for i, r := range rows {
			m := map[string]string{}
			for j, h := range header {
				if j < len(r) && r[j] != "" {
					m[h] = r[j]
				}
			}
			out[i] = m
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return usagef("unknown output format %q (want table, csv or json)", format)
}

func outputFlag(cmd *cobra.Command) {
	cmd.Flags().StringP("output", "o", "table", "output format: table, csv or json")
}
