// Command datanode is a Strata datanode of a cluster: it registers with
// etcd under a lease, hosts the regions metasrv assigns it (WAL, memtables,
// SSTs and manifest in the object store), and serves the data gRPC service
// and the HTTP line-protocol API. Settings: flags, then STRATA_<FLAG>,
// then the --config YAML file (docs/configuration.md).
package main

import (
	"context"
	"errors"
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

func main() {
	os.Exit(procflags.Exit("datanode", command().Execute()))
}

func command() *cobra.Command {
	var cfg server.Config
	var etcd, tokenFile, tokensFile, level, format string
	var gc *procflags.GC
	c := procflags.Command("datanode", "A Strata datanode of a cluster", `Hosts the regions metasrv assigns it (WAL, memtables, SSTs and manifest in
the object store), and serves the data gRPC service and the HTTP
line-protocol API.`, func(cmd *cobra.Command) error {
		log, err := procflags.Logger(level, format)
		if err != nil {
			return procflags.UsageError{Err: err}
		}
		cfg.Logger = log
		if cfg.Auth, err = auth.Load(tokenFile); err != nil {
			return procflags.UsageError{Err: err}
		}
		if cfg.Auth, err = cfg.Auth.WithTenants(tokensFile); err != nil {
			return procflags.UsageError{Err: err}
		}
		cfg.Etcd = procflags.Split(etcd)
		if len(cfg.Etcd) == 0 || cfg.Store == "" {
			return procflags.UsageError{Err: errors.New("--etcd-endpoints and --store are required (use `strata standalone` for one process)")}
		}
		if err := gc.Set(); err != nil {
			return err
		}
		return serve(cfg)
	})
	fs := c.Flags()
	gc = procflags.GCFlags(fs)
	host, _ := os.Hostname()
	fs.StringVar(&cfg.NodeID, "id", host, "datanode id, unique in the cluster")
	fs.StringVar(&etcd, "etcd-endpoints", "", "etcd endpoints, comma-separated (metasrv's embedded etcd, or an external cluster)")
	fs.StringVar(&cfg.Store, "store", "", "object store URL shared by the cluster (file:///shared/dir, s3://bucket?endpoint=...)")
	fs.StringVar(&cfg.DataDir, "data-dir", "strata-datanode", "local directory (scratch only: every durable byte is in the store)")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", ":8086", "HTTP listen address (line protocol, /metrics, /health)")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", ":8087", "gRPC listen address")
	fs.StringVar(&cfg.AdvertiseGRPC, "advertise-grpc", "", "gRPC address other datanodes use (default: the bound address)")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", 3*time.Second, "lease renewal interval")
	fs.DurationVar(&cfg.Lease, "lease", 10*time.Second, "lease TTL: regions close when it cannot be renewed in time")
	fs.Uint32Var(&cfg.DefaultRegions, "default-regions", 0, "regions of tables created without a region count, by a write or strata table create (0: one per datanode live at the table's creation; give metasrv the same)")
	fs.Uint32Var(&cfg.MetricsRegions, "metrics-regions", 0, "regions of the table that holds every remote-written metric, when a write creates it (0: --default-regions; both 0: one per live datanode)")
	fs.Uint32Var(&cfg.LinesRegions, "lines-regions", 0, "regions of the table that holds the rows of every measurement a write creates, when the first is created (0: --default-regions; both 0: one per live datanode)")
	fs.BoolVar(&cfg.PhysicalTables, "physical-tables", false, "give each measurement a write creates regions of its own, as versions before logical tables did (during a rolling upgrade from one)")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "serve Go profiles under /debug/pprof/ on the HTTP address")
	fs.Int64Var(&cfg.FlushBytes, "flush-bytes", region.DefaultFlushBytes, "memtable size that triggers a flush")
	fs.DurationVar(&cfg.WALWindow, "wal-window", 10*time.Millisecond, "WAL group-commit window: the node writes at most one WAL object per window; fewer object-store PUTs, up to this much more acknowledgement latency (docs/cost.md)")
	fs.Int64Var(&cfg.MemoryLimit, "memory-limit", 1<<30, "bound on all memtables together, in bytes (0: none)")
	fs.Int64Var(&cfg.CacheBytes, "cache-bytes", datanode.DefaultCacheBytes, "bound on the SST cache (open files, and blocks of large files that queries read), in bytes")
	fs.Int64Var(&cfg.SeriesCacheBytes, "series-cache-bytes", region.DefaultSeriesCacheBytes, "bound on each region's decoded SST series indexes (what label and series look-ups and filtered scans read), in bytes")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", 64<<20, "largest line-protocol request body, after decompression")
	fs.DurationVar(&cfg.GCInterval, "gc-interval", 0, "local fast GC of the regions hosted here (0: never; metasrv's scheduler runs GC)")
	fs.DurationVar(&cfg.FullGCInterval, "full-gc-interval", 0, "local full-listing GC of the regions hosted here (0: never)")
	fs.IntVar(&cfg.Query.MaxSamples, "query-max-samples", 50_000_000, "most samples one PromQL query may read or hold")
	fs.DurationVar(&cfg.Query.Timeout, "query-timeout", 2*time.Minute, "bound on one PromQL query")
	fs.IntVar(&cfg.Query.Concurrency, "query-concurrency", 8, "PromQL queries evaluated at once; more wait for a slot")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 0, "bound on graceful shutdown (default 1m)")
	fs.StringArrayVar(&cfg.Rules.AlertmanagerURLs, "alertmanager-url", nil, "Alertmanager to send the alerts of the rule groups evaluated here to, e.g. http://localhost:9093 (repeatable; API v2; docs/rules.md)")
	cfg.Rules.Alertmanager.AddFlags(fs)
	cfg.OTLP.AddFlags(fs)
	cfg.HA.AddFlags(fs)
	fs.DurationVar(&cfg.ActiveSeriesWindow, "active-series-window", time.Hour, "how long a series counts as active after its last sample, for the tenants' active-series limits (docs/limits.md)")
	fs.DurationVar(&cfg.Rules.Interval, "rule-evaluation-interval", rules.DefaultInterval, "evaluation interval of rule groups that set none")
	fs.DurationVar(&cfg.Rules.Lease, "rule-lease", 0, "TTL of the lease under which this datanode evaluates its rule groups: a dead or frozen evaluator's groups move after at most this long (default: --lease)")
	procflags.TLSFlags(fs, &cfg.TLS)
	fs.StringVar(&tokenFile, "auth-token-file", "", "file holding the shared auth token (default: $STRATA_AUTH_TOKEN; neither: no auth)")
	fs.StringVar(&tokensFile, "auth-tokens-file", "", "file of tenants' tokens, a line each: TOKEN TENANT[,TENANT...] [federate] (docs/tenants.md; needs the shared token too)")
	fs.StringVar(&level, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&format, "log-format", "text", "log format: text or json")
	return c
}

// serve runs the datanode until SIGINT or SIGTERM, then shuts it down.
func serve(cfg server.Config) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	s, err := server.Start(ctx, cfg)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err = <-s.Err():
	}
	stop()
	if serr := s.Shutdown(context.Background()); err == nil {
		err = serr
	}
	return err
}
