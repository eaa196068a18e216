package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratadb/strata/internal/auth"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/procflags"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/rules"
	"github.com/stratadb/strata/internal/server"
)

func newStandalone() *cobra.Command {
	var cfg server.Config
	var gc *procflags.GC
	cmd := &cobra.Command{
		Use:   "standalone",
		Short: "Run a datanode and a local store in one process",
		Long: `Run Strata in one process: the datanode (gRPC and HTTP), with its object
store in a local directory (or --store s3://... for S3/MinIO).

SIGINT or SIGTERM shuts down gracefully: requests in flight finish, every
region is flushed to SSTs and closed. A kill -9 loses nothing acknowledged:
the next start replays the write-ahead log.

With --rule-file it evaluates Prometheus recording and alerting rules and
sends alerts to --alertmanager-url; SIGHUP (or POST /-/reload) loads the
rule files again, and a bad file changes nothing (docs/rules.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			logger, err := newLogger(cmd)
			if err != nil {
				return err
			}
			cfg.Logger = logger
			cfg.Standalone = true
			tokenFile, _ := cmd.Flags().GetString("auth-token-file")
			if cfg.Auth, err = auth.Load(tokenFile); err != nil {
				return usagef("%v", err)
			}
			tokensFile, _ := cmd.Flags().GetString("auth-tokens-file")
			if cfg.Auth, err = cfg.Auth.WithTenants(tokensFile); err != nil {
				return usagef("%v", err)
			}
			cfg.TLS = clientTLS(cmd)
			cfg.TLS.ClientCAFile, _ = cmd.Flags().GetString("tls-client-ca-file")
			if err := cfg.TLS.CheckNode(); err != nil {
				return usagef("%v", err)
			}
			if err := gc.Set(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			s, err := server.Start(ctx, cfg)
			if err != nil {
				return err
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
		wait:
			for {
				select {
				case <-ctx.Done():
					break wait
				case err = <-s.Err():
					break wait
				case <-hup:
					if rerr := s.ReloadRules(); rerr != nil {
						logger.Error("SIGHUP: rules not reloaded", "err", rerr)
					} else {
						logger.Info("SIGHUP: rules reloaded")
					}
				}
			}
			stop()
			if serr := s.Shutdown(context.Background()); err == nil {
				err = serr
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "strata-data", "directory for the local store")
	f.StringVar(&cfg.Store, "store", "", "object store URL (default file://{data-dir}/store; s3://bucket?endpoint=...)")
	f.StringVar(&cfg.HTTPAddr, "http-addr", ":8086", "HTTP listen address (line protocol, /metrics, /health)")
	f.StringVar(&cfg.GRPCAddr, "grpc-addr", ":8087", "gRPC listen address")
	f.Int64Var(&cfg.FlushBytes, "flush-bytes", region.DefaultFlushBytes, "memtable size that triggers a flush")
	f.DurationVar(&cfg.WALWindow, "wal-window", 10*time.Millisecond, "WAL group-commit window: the node writes at most one WAL object per window; fewer object-store PUTs, up to this much more acknowledgement latency (docs/cost.md)")
	f.Int64Var(&cfg.MemoryLimit, "memory-limit", 1<<30, "bound on all memtables together, in bytes (0: none)")
	f.Int64Var(&cfg.CacheBytes, "cache-bytes", datanode.DefaultCacheBytes, "bound on the SST cache (open files, and blocks of large files that queries read), in bytes")
	f.Int64Var(&cfg.SeriesCacheBytes, "series-cache-bytes", region.DefaultSeriesCacheBytes, "bound on each region's decoded SST series indexes (what label and series look-ups and filtered scans read), in bytes")
	f.Uint32Var(&cfg.DefaultRegions, "default-regions", 1, "regions of tables created without a region count (0: one per live datanode, which in a standalone is one)")
	f.Uint32Var(&cfg.MetricsRegions, "metrics-regions", 0, "regions of the table that holds every remote-written metric, when a write creates it (0: --default-regions)")
	f.Uint32Var(&cfg.LinesRegions, "lines-regions", 0, "regions of the table that holds the rows of every measurement a write creates, when the first is created (0: --default-regions)")
	f.BoolVar(&cfg.PhysicalTables, "physical-tables", false, "give each measurement a write creates regions of its own, as versions before logical tables did (during a rolling upgrade from one)")
	f.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", 64<<20, "largest line-protocol request body, after decompression")
	gc = procflags.GCFlags(f)
	f.String("log-level", "info", "log level: debug, info, warn or error")
	f.String("log-format", "text", "log format: text or json")
	f.IntVar(&cfg.Query.MaxSamples, "query-max-samples", 50_000_000, "most samples one PromQL query may read or hold")
	f.DurationVar(&cfg.Query.Timeout, "query-timeout", 2*time.Minute, "bound on one PromQL query")
	f.IntVar(&cfg.Query.Concurrency, "query-concurrency", 8, "PromQL queries evaluated at once; more wait for a slot")
	f.BoolVar(&cfg.Pprof, "pprof", false, "serve Go profiles under /debug/pprof/ on the HTTP address")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 0, "bound on graceful shutdown (default 1m)")
	f.String("tls-client-ca-file", "", "mutual TLS: require every client to present a certificate this PEM CA signed (TLS itself: --tls-cert-file, --tls-key-file and --tls-ca-file)")
	f.String("auth-token-file", "", "require this shared token (file) on every request but health checks (default: $STRATA_AUTH_TOKEN; neither: no auth)")
	f.String("auth-tokens-file", "", "file of tenants' tokens, a line each: TOKEN TENANT[,TENANT...] [federate] (docs/tenants.md; needs the shared token too)")
	f.DurationVar(&cfg.GCInterval, "gc-interval", 5*time.Minute, "how often fast GC runs on every region (0: never)")
	f.DurationVar(&cfg.FullGCInterval, "full-gc-interval", 24*time.Hour, "how often full-listing GC runs on every region (0: never)")
	f.StringArrayVar(&cfg.Rules.Files, "rule-file", nil, "Prometheus rule file to evaluate, a path or a glob (repeatable; reloaded on SIGHUP and POST /-/reload)")
	f.DurationVar(&cfg.Rules.Interval, "rule-evaluation-interval", rules.DefaultInterval, "evaluation interval of rule groups that set none")
	f.StringArrayVar(&cfg.Rules.AlertmanagerURLs, "alertmanager-url", nil, "Alertmanager to send alerts to, e.g. http://localhost:9093 (repeatable; API v2)")
	cfg.Rules.Alertmanager.AddFlags(f)
	cfg.OTLP.AddFlags(f)
	cfg.HA.AddFlags(f)
	f.DurationVar(&cfg.ActiveSeriesWindow, "active-series-window", time.Hour, "how long a series counts as active after its last sample, for the tenants' active-series limits (docs/limits.md)")
	return cmd
}

func newLogger(cmd *cobra.Command) (*slog.Logger, error) {
	levelName, _ := cmd.Flags().GetString("log-level")
	format, _ := cmd.Flags().GetString("log-format")
	var level slog.Level
	if err := level.UnmarshalText([]byte(levelName)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", levelName)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), opts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", format)
}
