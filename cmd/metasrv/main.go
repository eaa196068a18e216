// Command metasrv is Strata's coordinator: etcd (embedded by default, data
// under --data-dir; external with --etcd-endpoints), leader election among
// replicas, region placement and failover, the admin gRPC service, and
// /metrics and /health over HTTP.
// Settings: flags, then STRATA_<FLAG>, then the --config YAML file
// (docs/configuration.md).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/stratadb/strata/internal/auth"
	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/metasrv"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/procflags"
	"github.com/stratadb/strata/internal/tlsutil"
	"github.com/stratadb/strata/internal/version"
)

func main() {
	os.Exit(procflags.Exit("metasrv", command().Execute()))
}

func command() *cobra.Command {
	var dataDir string
	var endpoints string
	var etcdAddr string
	var grpcAddr string
	var httpAddr string
	var advertise string
	var regions uint
	var storeURL string
	var finalSweep time.Duration
	var tokenFile string
	var level string
	var format string
	var tlsCfg tlsutil.Config
	c := procflags.Command("metasrv", "Strata's coordinator", `etcd (embedded by default, data under --data-dir; external with
--etcd-endpoints), leader election among replicas, region placement and
failover, the GC scheduler, the admin gRPC service, and /metrics and
/health over HTTP.`, func(cmd *cobra.Command) error {
		log, err := procflags.Logger(level, format)
		if err != nil {
			return procflags.UsageError{Err: err}
		}
		token, err := auth.Load(tokenFile)
		if err != nil {
			return procflags.UsageError{Err: err}
		}
		if err := tlsCfg.CheckNode(); err != nil {
			return procflags.UsageError{Err: err}
		}
		fail := func(err error) error {
			log.Error("metasrv failed", "err", err)
			return err
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), version.NewCollector(version.Get()))
		eps := procflags.Split(endpoints)
		if len(eps) == 0 {
			e, err := cluster.StartEtcd(filepath.Join(dataDir, "etcd"), etcdAddr, tlsCfg, log)
			if err != nil {
				return fail(err)
			}
			defer e.Close()
			eps = e.Endpoints
		}
		etcdTLS, err := tlsCfg.ForEndpoints(eps)
		if err != nil {
			return fail(err)
		}
		cli, err := cluster.ConnectTLS(eps, etcdTLS, cluster.NewEtcdMetrics(reg).DialOptions()...)
		if err != nil {
			return fail(err)
		}
		defer cli.Close()
		var store objstore.Bucket
		if storeURL != "" {
			st, err := objstore.Open(context.Background(), storeURL, objstore.Options{})
			if err != nil {
				return fail(fmt.Errorf("open store %s: %w", storeURL, err))
			}
			defer st.Close()
			if err := objstore.CheckConditionalCreate(context.Background(), st, storeURL); err != nil {
				return fail(err)
			}
			store = st
		}
		ln, err := net.Listen("tcp", grpcAddr)
		if err != nil {
			return fail(fmt.Errorf("listen %s: %w", grpcAddr, err))
		}
		defer ln.Close()
		httpLn, err := net.Listen("tcp", httpAddr)
		if err != nil {
			return fail(fmt.Errorf("listen %s: %w", httpAddr, err))
		}
		defer httpLn.Close()
		addr := advertise
		if addr == "" {
			addr = ln.Addr().String()
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		srv, err := metasrv.Start(ctx, metasrv.Options{Client: cli, Addr: addr, DefaultRegions: uint32(regions), Logger: log, Auth: token, TLS: tlsCfg, Store: store, FinalSweepAfter: finalSweep,
			Metrics: metasrv.NewMetrics(reg)})
		if err != nil {
			return fail(err)
		}
		tlsOpts, err := tlsCfg.ServerOptions()
		if err != nil {
			return fail(err)
		}
		g := grpc.NewServer(append(tlsOpts, token.ServerOptions()...)...)
		srv.Register(g)
		hs := health.NewServer()
		healthpb.RegisterHealthServer(g, hs)
		reflection.Register(g)
		if tlsCfg.Server() {
			tc, err := tlsCfg.ServerTLS()
			if err != nil {
				return fail(err)
			}
			httpLn = tls.NewListener(httpLn, tc)
		}
		hsrv := &http.Server{Handler: token.HTTP(srv.Handler(reg)), ReadHeaderTimeout: 10 * time.Second}
		errc := make(chan error, 2)
		go func() { errc <- g.Serve(ln) }()
		go func() {
			if err := hsrv.Serve(httpLn); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("http: %w", err)
			}
		}()
		log.Info("serving", "grpc", ln.Addr().String(), "http", httpLn.Addr().String(), "etcd", eps, "auth", token.Enabled(), "tls", tlsCfg.Server())
		select {
		case <-ctx.Done():
		case err = <-errc:
		}
		hs.Shutdown()
		srv.Close()
		g.GracefulStop()
		_ = hsrv.Close() // shutting down: a listener's close error changes nothing
		if err != nil {
			return fail(err)
		}
		log.Info("shut down cleanly")
		return nil
	})
	fs := c.Flags()
	fs.StringVar(&dataDir, "data-dir", "strata-metasrv", "directory of the embedded etcd's data")
	fs.StringVar(&endpoints, "etcd-endpoints", "", "external etcd endpoints, comma-separated (default: run an embedded etcd)")
	fs.StringVar(&etcdAddr, "etcd-client-addr", "127.0.0.1:2379", "embedded etcd: client listen address (datanodes connect here; https:// with --tls-cert-file)")
	fs.StringVar(&grpcAddr, "grpc-addr", ":8088", "admin gRPC listen address")
	fs.StringVar(&httpAddr, "http-addr", ":8089", "HTTP listen address: Prometheus /metrics, /health and the web UI's cluster and tables pages")
	fs.StringVar(&advertise, "advertise-addr", "", "admin address other replicas forward to (default: the bound address)")
	fs.UintVar(&regions, "default-regions", 0, "regions of tables strata cluster create-table creates without a region count (0: one per datanode live at the table's creation)")
	fs.StringVar(&storeURL, "store", "", "the cluster's object store URL (dropping a table deletes its objects through it; without it, drops are refused)")
	fs.DurationVar(&finalSweep, "final-sweep-after", 0, "how long after dropping a table its prefix is swept again, for late writes of a paused former owner (default: the upload window plus clock skew, 1h1m)")
	procflags.TLSFlags(fs, &tlsCfg)
	fs.StringVar(&tokenFile, "auth-token-file", "", "file holding the shared auth token (default: $STRATA_AUTH_TOKEN; neither: no auth)")
	fs.StringVar(&level, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&format, "log-format", "text", "log format: text or json")
	return c
}
