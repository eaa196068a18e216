package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/stratadb/strata/internal/objstore"
)

func newStore() *cobra.Command {
	cmd := &cobra.Command{Use: "store", Short: "Object-store set-up"}
	init := &cobra.Command{
		Use:   "init",
		Short: "Create the store's bucket if missing and check it honours conditional create",
		Long: `Create the bucket (s3://) or directory (file://) the store URL names, if it
does not exist yet, then prove the store refuses a second create of one
object (every fence Strata has relies on it). Waits up to --wait for the
store to answer, so it can run as a deployment's first step next to a
starting MinIO. Exit code 0 when the store is ready.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			url, _ := cmd.Flags().GetString("store")
			wait, _ := cmd.Flags().GetDuration("wait")
			if url == "" {
				return usagef("--store is required (e.g. s3://strata?endpoint=http://minio:9000&use_path_style=true&region=us-east-1)")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			err := retry(ctx, func() error {
				if err := objstore.CreateBucket(ctx, url); err != nil {
					return err
				}
				store, err := objstore.Open(ctx, url, objstore.Options{})
				if err != nil {
					return err
				}
				defer store.Close()
				return objstore.CheckConditionalCreate(ctx, store, url)
			})
			if err != nil {
				return fmt.Errorf("store %s not ready after %v: %w", url, wait, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "store ready: %s\n", url)
			return nil
		},
	}
	init.Flags().String("store", "", "the store URL")
	init.Flags().Duration("wait", time.Minute, "how long to wait for the store to answer")
	cmd.AddCommand(init)
	return cmd
}

// retry runs f until it succeeds or ctx ends, backing off up to 2 s; the
// error is f's last.
func retry(ctx context.Context, f func() error) error {
	backoff := 100 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func newHealth() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Exit 0 if a Strata server's gRPC health check reports SERVING",
		Long: `Ask a datanode's or metasrv's gRPC health service (no auth token needed)
whether it serves. For container health checks: the image needs no other
tool. With --wait, asks again until it serves or the wait ends. Exit code
0 when serving, 1 otherwise.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			addr, _ := cmd.Flags().GetString("server")
			timeout, _ := cmd.Flags().GetDuration("timeout")
			wait, _ := cmd.Flags().GetDuration("wait")
			tr, err := transport(cmd)
			if err != nil {
				return err
			}
			conn, err := grpc.NewClient(addr, tr)
			if err != nil {
				return usagef("--server %q: %v", addr, err)
			}
			defer conn.Close()
			wctx, cancel := context.WithTimeout(cmd.Context(), max(wait, timeout))
			defer cancel()
			check := func() error {
				ctx, cancel := context.WithTimeout(wctx, timeout)
				defer cancel()
				resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
				if err != nil {
					return fmt.Errorf("%s: %w", addr, err)
				}
				if resp.Status != healthpb.HealthCheckResponse_SERVING {
					return fmt.Errorf("%s: %s", addr, resp.Status)
				}
				return nil
			}
			if wait > 0 {
				err = retry(wctx, check)
			} else {
				err = check()
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: serving\n", addr)
			return nil
		},
	}
	cmd.Flags().String("server", "localhost:8087", "the server's gRPC address")
	cmd.Flags().Duration("timeout", 3*time.Second, "bound on one check")
	cmd.Flags().Duration("wait", 0, "keep asking until serving, for up to this long (0: ask once)")
	return cmd
}
