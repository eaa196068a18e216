// Package server runs a datanode's network interfaces (gRPC with health
// and reflection, HTTP with line protocol and metrics) over an engine, and
// the single-process `strata standalone` on top of them.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/stratadb/strata/internal/auth"
	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/catalog/storecat"
	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/datanode/agent"
	"github.com/stratadb/strata/internal/gc"
	"github.com/stratadb/strata/internal/gcsched"
	"github.com/stratadb/strata/internal/grpcapi"
	"github.com/stratadb/strata/internal/hatracker"
	"github.com/stratadb/strata/internal/httpapi"
	"github.com/stratadb/strata/internal/limits"
	"github.com/stratadb/strata/internal/metasrv"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/peerwire"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/rules"
	"github.com/stratadb/strata/internal/sst"
	"github.com/stratadb/strata/internal/tlsutil"
	"github.com/stratadb/strata/internal/ui"
	"github.com/stratadb/strata/internal/version"
	"github.com/stratadb/strata/internal/wal"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// A standalone's lease timing (Config.Heartbeat, Config.Lease): its lease
// guards against nothing but a second process on the same store, so it
// rides out minutes-long stalls of its own etcd rather than seconds.
const (
	StandaloneHeartbeat = 5 * time.Second
	StandaloneLease     = 60 * time.Second
)

// Config configures a standalone server.
type Config struct {
	// DataDir holds the local store (default ./strata-data).
	DataDir string
	// Store is the object store URL (default file://{DataDir}/store).
	Store string
	// Bucket, if set, is an open store used instead of Store; the caller
	// closes it after Shutdown (tests and embedders: a store with fault
	// injection, or one kept across restarts).
	Bucket objstore.Bucket
	// Tune, if set, adjusts the engine's options before it opens (tests:
	// compaction triggers and stage hooks).
	Tune func(*datanode.Options)
	// HTTPAddr and GRPCAddr are the listen addresses.
	HTTPAddr string
	GRPCAddr string
	// FlushBytes, MemoryLimit: memtable sizing (0: defaults; MemoryLimit
	// bounds every region's memtables together).
	FlushBytes  int64
	MemoryLimit int64
	// CacheBytes bounds the SST cache: open files, and the blocks scans
	// read of files read in ranges (0: datanode.DefaultCacheBytes;
	// negative: nothing is kept, every read reaches the store).
	CacheBytes int64
	// SeriesCacheBytes bounds each region's decoded series indexes (0:
	// region.DefaultSeriesCacheBytes).
	SeriesCacheBytes int64
	// WALWindow is the WAL group-commit window: how long the first write
	// of a group waits for others (0: no wait, the lowest latency;
	// docs/cost.md).
	WALWindow time.Duration
	// DefaultRegions is the region count of tables created without one
	// (0: one per live datanode when the table is created, in a cluster;
	// one in a standalone).
	DefaultRegions uint32
	// MetricsRegions is the region count of the table remote write
	// creates for every metric (0: DefaultRegions).
	MetricsRegions uint32
	// LinesRegions is the region count of the table that holds the rows
	// of every measurement a write creates (0: DefaultRegions).
	LinesRegions uint32
	// PhysicalTables gives the tables a write creates regions of their
	// own, as before logical tables (datanode.Options.PhysicalTables): for
	// a rolling upgrade, until every datanode knows logical tables.
	PhysicalTables bool
	// MaxBodyBytes bounds a line-protocol request.
	MaxBodyBytes int64
	// ShutdownTimeout bounds the graceful shutdown (default 1 min).
	ShutdownTimeout time.Duration
	// GCInterval and FullGCInterval run fast and full-listing GC on
	// every region that often (0: never).
	GCInterval, FullGCInterval time.Duration
	// Etcd makes this process one datanode of a cluster: the catalog is in
	// etcd, and it hosts the regions metasrv assigns it.
	Etcd []string
	// Standalone, instead of Etcd, runs an embedded etcd (under
	// DataDir/etcd) and a metasrv in this process, with this process as
	// the cluster's one datanode; the admin service is served on the gRPC
	// address too. Every datanode runs as part of a cluster: one of Etcd
	// and Standalone is required.
	Standalone bool
	// NodeID names the datanode (cluster); AdvertiseGRPC is the address
	// other datanodes reach it at (default: the bound gRPC address).
	NodeID, AdvertiseGRPC string
	// Heartbeat and Lease time the datanode's lease (default: the
	// cluster's, cluster.DefaultHeartbeat and cluster.DefaultLease; a
	// standalone's, StandaloneHeartbeat and StandaloneLease, which also
	// time its metasrv's leadership).
	Heartbeat, Lease time.Duration
	// Auth, if set, is required on every gRPC call and HTTP request (but
	// health checks), and sent on calls to other datanodes.
	Auth auth.Token
	// TLS, if set, serves HTTP and gRPC over TLS and dials other datanodes
	// (and an https:// etcd) with it (docs/configuration.md, "TLS").
	TLS tlsutil.Config
	// Pprof serves net/http/pprof on the HTTP address.
	Pprof bool
	// Query bounds PromQL queries: samples, timeout, concurrency.
	Query prom.Limits
	// OTLP configures OTLP metrics ingest: the resource attributes
	// promoted to labels and the translation strategy.
	OTLP prom.OTLPOptions
	// HA deduplicates HA Prometheus pairs' writes (off without a cluster
	// label): one replica a cluster is stored, elected in etcd
	// (internal/hatracker, docs/ha-pairs.md).
	HA hatracker.Config
	// ActiveSeriesWindow is how long a series stays active, for the
	// tenants' active-series limits, after its last sample (0:
	// limits.DefaultActiveSeriesWindow; docs/limits.md).
	ActiveSeriesWindow time.Duration
	// Rules are the rule files a standalone evaluates (a datanode of a
	// cluster takes none) and the Alertmanagers alerts go to
	// (docs/rules.md). Every node also evaluates the rule groups stored
	// in etcd that it owns (Rules.Cluster is set here; its lease is
	// Rules.Lease, or else the datanode's). Its Registerer, Logger and
	// ExternalURL are the server's.
	Rules  rules.Options
	Logger *slog.Logger
	// Build is the node's build, in /health, /metrics (strata_build_info)
	// and its datanode registration (default version.Get()).
	Build version.Info
}

// Server is a running standalone server.
type Server struct {
	cfg      Config
	log      *slog.Logger
	store    objstore.Bucket
	ownStore bool // opened here (not Config.Bucket): closed on shutdown
	eng      *datanode.Engine
	stream   *wal.Stream // the node's WAL, shared by its regions
	httpSrv  *http.Server
	grpcSrv  *grpc.Server
	peer     *peerwire.Server // on the gRPC listener
	// peerClient carries this node's remote column scans.
	peerClient *peerwire.Client
	health     *health.Server
	httpLn     net.Listener
	grpcLn     net.Listener
	errc       chan error
	Registry   *prometheus.Registry
	etcd       *clientv3.Client
	agent      *agent.Agent
	embedded   *cluster.Etcd
	meta       *metasrv.Server
	rules      *rules.Manager
	limits     *limits.Watcher
}

// Start opens the store and the engine (replaying WALs) and starts
// listening.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		cfg.DataDir = "strata-data"
	}
	if cfg.Build == (version.Info{}) {
		cfg.Build = version.Get()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = time.Minute
	}
	if err := cfg.OTLP.Check(); err != nil {
		return nil, err
	}
	if err := cfg.HA.Check(); err != nil {
		return nil, err
	}
	if len(cfg.Etcd) == 0 && !cfg.Standalone {
		return nil, errors.New("a datanode needs etcd endpoints (or run strata standalone)")
	}
	if cfg.Store == "" && cfg.Bucket == nil {
		dir, err := filepath.Abs(filepath.Join(cfg.DataDir, "store"))
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		cfg.Store = "file://" + dir
	}
	s := &Server{cfg: cfg, log: cfg.Logger, errc: make(chan error, 2), Registry: prometheus.NewRegistry()}
	s.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), version.NewCollector(cfg.Build))
	if err := s.start(ctx); err != nil {
		s.abort()
		return nil, err
	}
	s.log.Info("serving", "http", s.httpLn.Addr().String(), "grpc", s.grpcLn.Addr().String(), "auth", s.cfg.Auth.Enabled(), "tls", s.cfg.TLS.Server())
	return s, nil
}

// start brings the server up step by step; abort undoes what a failed
// start left running.
func (s *Server) start(ctx context.Context) error {
	cfg := &s.cfg
	s.store = cfg.Bucket
	if s.store == nil {
		store, err := objstore.Open(ctx, cfg.Store, objstore.Options{Registerer: s.Registry})
		if err != nil {
			return fmt.Errorf("open store %s: %w", cfg.Store, err)
		}
		s.store, s.ownStore = store, true
	}
	if err := objstore.CheckConditionalCreate(ctx, s.store, cfg.Store); err != nil {
		return err
	}
	gcInterval, fullGCInterval := cfg.GCInterval, cfg.FullGCInterval
	if cfg.Standalone {
		e, err := cluster.StartEtcd(filepath.Join(cfg.DataDir, "etcd"), "", tlsutil.Config{}, cfg.Logger)
		if err != nil {
			return err
		}
		s.embedded = e
		cfg.Etcd, cfg.NodeID = e.Endpoints, "standalone"
		// One process is the whole cluster: no other node can take a
		// region over, so a lease that lapses while the process's own
		// etcd is slow (a flush's fsyncs on a busy disk, a loaded
		// machine) only closes and reopens every region. Seen at a
		// million series on a loaded 2-core machine with the cluster
		// defaults: the lease lost every minute or so.
		cfg.Lease = cmp.Or(cfg.Lease, StandaloneLease)
		cfg.Heartbeat = cmp.Or(cfg.Heartbeat, StandaloneHeartbeat)
	}
	if cfg.NodeID == "" {
		return fmt.Errorf("a datanode of a cluster needs an id")
	}
	if err := cfg.TLS.CheckNode(); err != nil {
		return err
	}
	etcdTLS, err := cfg.TLS.ForEndpoints(cfg.Etcd)
	if err != nil {
		return err
	}
	cli, err := cluster.ConnectTLS(cfg.Etcd, etcdTLS, cluster.NewEtcdMetrics(s.Registry).DialOptions()...)
	if err != nil {
		return err
	}
	s.etcd = cli // the datanode and (standalone) metasrv share it
	if cfg.Standalone {
		if err := importCatalog(ctx, s.store, cli, cfg.Logger); err != nil {
			return err
		}
		if err := initGCOptions(ctx, cli, cfg.GCInterval, cfg.FullGCInterval); err != nil {
			return err
		}
		gcInterval, fullGCInterval = 0, 0 // metasrv's scheduler runs GC, not a local loop
	}

	// Tenants' limits, followed in etcd: a change applies to the next
	// request (docs/limits.md).
	if s.limits, err = limits.Watch(ctx, cli, cfg.Logger); err != nil {
		return err
	}
	ingest := limits.NewIngest(s.limits, cfg.ActiveSeriesWindow)
	s.Registry.MustRegister(ingest.Collectors()...)

	began := time.Now()
	ropts := region.Options{FlushBytes: cfg.FlushBytes, Metrics: region.NewMetrics(s.Registry), Logger: cfg.Logger}
	// One WAL stream for every region of the node; each start (and each
	// stream sealed by a region's new owner) gets a new name.
	s.stream = wal.NewStream(s.store, wal.StreamOptions{Window: cfg.WALWindow, OnPut: ropts.Metrics.ObserveWALPut, Logger: cfg.Logger,
		NewID: func() string { return cfg.NodeID + "/" + ulid.Make().String() }})
	ropts.Stream = s.stream
	s.Registry.MustRegister(newStreamCollector(s.stream))
	if cfg.MemoryLimit > 0 {
		ropts.Budget = region.NewMemoryBudget(cfg.MemoryLimit)
	}
	ropts.Cache = sst.NewCache(cmp.Or(cfg.CacheBytes, datanode.DefaultCacheBytes))
	ropts.SeriesCacheBytes = cfg.SeriesCacheBytes
	s.Registry.MustRegister(newCacheCollector(ropts.Cache))
	transport, err := cfg.TLS.DialOption()
	if err != nil {
		return err
	}
	var clientTLS *tls.Config
	if cfg.TLS.Client() {
		if clientTLS, err = cfg.TLS.ClientTLS(); err != nil {
			return err
		}
	}
	peerBytes := newPeerBytes(s.Registry)
	s.peerClient = peerwire.NewClient(peerwire.ClientOptions{TLS: clientTLS, Token: cfg.Auth, Count: peerBytes.peerwire})
	s.agent = agent.New(agent.Options{Client: cli, Node: cluster.NodeInfo{ID: cfg.NodeID, Version: cfg.Build.Version, Revision: cfg.Build.Revision}, Heartbeat: cfg.Heartbeat, Lease: cfg.Lease, Logger: cfg.Logger,
		DialOptions: append([]grpc.DialOption{transport, grpc.WithStatsHandler(peerBytes)}, cfg.Auth.DialOptions()...), Peer: s.peerClient, Registerer: s.Registry})
	// A table created without a region count gets one region per live
	// datanode, counted at its creation; a standalone is one datanode.
	defaultRegions := cfg.DefaultRegions
	var live func(context.Context) (int, error)
	var partitioning func(context.Context) error
	if cfg.Standalone {
		defaultRegions = cmp.Or(defaultRegions, 1)
	} else {
		live = func(ctx context.Context) (int, error) { return cluster.LiveDatanodes(ctx, cli) }
		partitioning = func(ctx context.Context) error {
			err := cluster.CheckPartitioning(ctx, cli)
			if errors.Is(err, cluster.ErrNoPartitioning) {
				return fmt.Errorf("%w: %w", catalog.ErrInvalidTable, err)
			}
			return err
		}
	}
	dopts := datanode.Options{Region: ropts, DefaultRegions: defaultRegions, MetricsRegions: cfg.MetricsRegions, LinesRegions: cfg.LinesRegions, LiveDatanodes: live,
		CheckPartitioning: partitioning,
		PhysicalTables:    cfg.PhysicalTables, Logger: cfg.Logger,
		Compaction: compact.SchedulerOptions{Metrics: compact.NewMetrics(s.Registry)},
		GCInterval: gcInterval, FullGCInterval: fullGCInterval, GCMetrics: gc.NewMetrics(s.Registry),
		Catalog: catalog.NewEtcdBackend(cli), Remote: s.agent, Lease: s.agent.BindLease, Limits: ingest}
	if cfg.Tune != nil {
		cfg.Tune(&dopts)
	}
	if s.eng, err = datanode.Open(ctx, s.store, dopts); err != nil {
		return fmt.Errorf("open engine: %w", err)
	}
	s.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "strata_regions", Help: "Regions open on this datanode."},
		func() float64 { return float64(len(s.eng.Hosted())) }))
	s.log.Info("engine open", "store", cfg.Store, "tables", len(s.eng.Tables()), "took", time.Since(began).Round(time.Millisecond))

	if s.httpLn, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return fmt.Errorf("listen http %s: %w", cfg.HTTPAddr, err)
	}
	if s.grpcLn, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return fmt.Errorf("listen grpc %s: %w", cfg.GRPCAddr, err)
	}
	adv := cfg.AdvertiseGRPC
	if adv == "" {
		adv = s.grpcLn.Addr().String()
	}
	api := prom.NewAPI(s.eng, cfg.Query, cfg.Build, cfg.Logger)
	api.SetLimits(s.limits)
	{
		// A standalone evaluates its rule files and every group stored in
		// its etcd; a datanode of a cluster, the stored groups it owns
		// (docs/rules.md).
		ropts := cfg.Rules
		if !cfg.Standalone && len(ropts.Files) > 0 {
			return errors.New("a datanode of a cluster evaluates the rule groups loaded with `strata rules load`, not rule files")
		}
		ropts.Registerer, ropts.Logger = s.Registry, cfg.Logger
		ropts.Cluster = &rules.ClusterOptions{Client: cli, NodeID: cfg.NodeID, Lease: cmp.Or(cfg.Rules.Lease, cfg.Lease, cluster.DefaultLease),
			Peer: func(ctx context.Context, addr string) ([]byte, error) {
				c, err := s.agent.Peer(addr)
				if err != nil {
					return nil, err
				}
				resp, err := c.RuleGroups(ctx, &pb.RuleGroupsRequest{}, grpc.MaxCallRecvMsgSize(64<<20)) // many groups' alerts
				if err != nil {
					return nil, err
				}
				return resp.GroupsJson, nil
			}}
		scheme := "http://"
		if cfg.TLS.Server() {
			scheme = "https://"
		}
		ropts.ExternalURL = scheme + advertiseHTTP(adv, s.httpLn.Addr())
		if s.rules, err = rules.New(ropts, api, prom.NewAppendable(s.eng)); err != nil {
			return err
		}
	}
	var ha *hatracker.Tracker
	if cfg.HA.Enabled() {
		if ha, err = hatracker.New(s.etcd, cfg.HA); err != nil {
			return err
		}
	}
	h := httpapi.New(s.eng, httpapi.Options{MaxBodyBytes: cfg.MaxBodyBytes, Gatherer: s.Registry, Registerer: s.Registry, Logger: cfg.Logger, Build: cfg.Build, Pprof: cfg.Pprof,
		API: api, Rules: s.rules, OTLP: cfg.OTLP, HA: ha, UI: ui.Options{Admin: s.agent.Meta}})
	// A browser holding the token (the web UI asks for it) must not be made
	// to write from another site's page: cross-origin requests that change
	// state are refused (403); API clients send no Origin and pass.
	s.httpSrv = &http.Server{Handler: http.NewCrossOriginProtection().Handler(cfg.Auth.HTTP(h)), ReadHeaderTimeout: 10 * time.Second}
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20), grpc.KeepaliveEnforcementPolicy(agent.KeepalivePolicy), grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0)))}
	var serverTLS *tls.Config
	if cfg.TLS.Server() {
		// One configuration (and one certificate reloader) for the three
		// servers.
		if serverTLS, err = cfg.TLS.ServerTLS(); err != nil {
			return err
		}
		s.httpLn = tls.NewListener(s.httpLn, serverTLS)
		opts = append(opts, grpc.Creds(credentials.NewTLS(serverTLS)))
	}
	s.grpcSrv = grpc.NewServer(append(opts, cfg.Auth.ServerOptions()...)...)
	dn := grpcapi.New(s.eng).WithRules(s.rules.LocalRuleGroups)
	dn.Register(s.grpcSrv)
	// Other datanodes' remote column scans come on the gRPC port too, in
	// peerwire (internal/peerwire): the listener hands gRPC the rest.
	s.peer = peerwire.NewServer(peerwire.ServerOptions{TLS: serverTLS, Token: cfg.Auth, Handlers: dn.PeerHandlers(), Logger: cfg.Logger})
	s.grpcLn = s.peer.Listener(s.grpcLn)
	if cfg.Standalone {
		if s.meta, err = metasrv.Start(ctx, metasrv.Options{Client: cli, Addr: s.grpcLn.Addr().String(), Logger: cfg.Logger, Auth: cfg.Auth, TLS: cfg.TLS, ElectionTTL: cfg.Lease,
			DefaultRegions: defaultRegions, Store: s.store, Metrics: metasrv.NewMetrics(s.Registry)}); err != nil {
			return err
		}
		s.meta.Register(s.grpcSrv)
	}
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpcSrv, s.health)
	reflection.Register(s.grpcSrv)
	httpSrv, httpLn, grpcSrv, grpcLn := s.httpSrv, s.httpLn, s.grpcSrv, s.grpcLn
	go func() {
		if err := httpSrv.Serve(httpLn); !errors.Is(err, http.ErrServerClosed) {
			s.errc <- fmt.Errorf("http: %w", err)
		}
	}()
	go func() {
		if err := grpcSrv.Serve(grpcLn); err != nil {
			s.errc <- fmt.Errorf("grpc: %w", err)
		}
	}()
	s.agent.SetAddrs(adv, advertiseHTTP(adv, s.httpLn.Addr()))
	if err := s.agent.Start(ctx, s.eng); err != nil {
		return err
	}
	if cfg.Standalone {
		s.rules.Start(s.metricsHosted)
	} else {
		// Queries and writes of a datanode reach every region wherever it
		// is hosted: nothing to wait for.
		s.rules.Start(func(context.Context) error { return nil })
	}
	return nil
}

// metricsHosted waits until every region of every tenant's metrics table,
// which rules read and write, is open here (the agent opens them in the
// background after a start), so that the first evaluations, and the
// restoring of alerts' `for` state after them, see every series. A
// metrics table not created yet is ready: there is nothing to read.
func (s *Server) metricsHosted(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		open := map[uint32]int{}
		for _, id := range s.eng.Hosted() {
			open[id.Table]++
		}
		ready := true
		for _, t := range s.eng.Tables() {
			if catalog.IsMetrics(t.Name) && open[t.ID] < int(t.Regions) {
				ready = false
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C: // the agent opens regions with no signal to wait on
		}
	}
}

// Rules is the node's rule evaluation.
func (s *Server) Rules() *rules.Manager { return s.rules }

// ReloadRules loads the rule files again (SIGHUP, as POST /-/reload
// does); a bad file changes nothing (rules.ErrBadRuleFiles).
func (s *Server) ReloadRules() error {
	if s.rules == nil {
		return errors.New("this node evaluates no rules")
	}
	return s.rules.Reload()
}

// advertiseHTTP is the HTTP address others are told: the bound one, but
// on the advertised gRPC host when bound to every interface (":8086" is
// "[::]:8086", which no one can reach).
func advertiseHTTP(grpcAdv string, bound net.Addr) string {
	tcp, ok := bound.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return bound.String()
	}
	host, _, err := net.SplitHostPort(grpcAdv)
	if err != nil {
		return bound.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(tcp.Port))
}

// abort closes what a failed start opened, newest first.
func (s *Server) abort() {
	if s.rules != nil {
		s.rules.Close(context.Background())
	}
	if s.grpcSrv != nil {
		s.grpcSrv.Stop()
	}
	if s.peer != nil {
		s.peer.Close()
	}
	if s.httpSrv != nil {
		_ = s.httpSrv.Close()
	}
	for _, ln := range []net.Listener{s.httpLn, s.grpcLn} {
		if ln != nil {
			ln.Close()
		}
	}
	if s.meta != nil {
		s.meta.Close()
	}
	if s.agent != nil {
		s.agent.Close(context.Background())
	}
	if s.peerClient != nil {
		s.peerClient.Close()
	}
	if s.eng != nil {
		_ = s.eng.Close(context.Background(), false)
	}
	if s.stream != nil {
		_ = s.stream.Close()
	}
	if s.limits != nil {
		s.limits.Close()
	}
	if s.etcd != nil {
		s.etcd.Close()
	}
	s.closeEmbedded()
	_ = s.closeStore()
}

func (s *Server) closeEmbedded() {
	if s.embedded != nil {
		s.embedded.Close()
		s.embedded = nil
	}
}

// closeStore closes the store if the server opened it.
func (s *Server) closeStore() error {
	if s.store == nil || !s.ownStore {
		return nil
	}
	return s.store.Close()
}

// HTTPAddr and GRPCAddr are the bound addresses.
func (s *Server) HTTPAddr() string { return s.httpLn.Addr().String() }
func (s *Server) GRPCAddr() string { return s.grpcLn.Addr().String() }

// Limits are the tenants' limits as this node follows them.
func (s *Server) Limits() *limits.Watcher { return s.limits }

// Engine is the server's engine.
func (s *Server) Engine() *datanode.Engine { return s.eng }

// Err reports a listener failure.
func (s *Server) Err() <-chan error { return s.errc }

// Shutdown stops accepting requests, lets those in flight finish, flushes
// and closes every region, and closes the store.
func (s *Server) Shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ShutdownTimeout)
	defer cancel()
	s.log.Info("shutting down: draining requests")
	s.health.Shutdown()
	var errs []error
	errs = append(errs, s.httpSrv.Shutdown(ctx))
	done := make(chan struct{})
	go func() { s.grpcSrv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpcSrv.Stop()
	}
	s.peer.Shutdown(ctx)
	if s.rules != nil {
		// Before the engine closes: evaluations write to it.
		s.log.Info("shutting down: stopping rule evaluation")
		s.rules.Close(ctx)
	}
	if s.meta != nil {
		s.meta.Close()
	}
	// Keep the lease while flushing; revoke it after, so metasrv moves the
	// regions at once.
	s.agent.Stop()
	s.log.Info("shutting down: flushing regions")
	errs = append(errs, s.eng.Close(ctx, true))
	errs = append(errs, s.stream.Close()) // after every region detached
	s.agent.Revoke(ctx)
	s.peerClient.Close()
	s.limits.Close()
	s.etcd.Close()
	errs = append(errs, s.closeStore())
	s.closeEmbedded()
	err := errors.Join(errs...)
	if err == nil {
		s.log.Info("shut down cleanly")
	}
	return err
}

// importCatalog moves a standalone store's catalog (from before standalone
// ran metasrv) into etcd, once: if etcd has no catalog and the store has
// one, the store's newest version is written to etcd and the store's
// catalog objects are deleted, so no stale copy remains.
func importCatalog(ctx context.Context, store objstore.Bucket, cli *clientv3.Client, log *slog.Logger) error {
	imported, err := storecat.Import(ctx, cli, store)
	if err != nil {
		return fmt.Errorf("import the store's catalog into etcd: %w", err)
	}
	if !imported {
		return nil
	}
	if _, err := objstore.DeletePrefix(ctx, store, storecat.Prefix); err != nil {
		return err
	}
	log.Info("catalog moved from the store into etcd")
	return nil
}

// initGCOptions stores the scheduler's options on first start, with the
// given intervals (0: the defaults).
func initGCOptions(ctx context.Context, cli *clientv3.Client, fast, full time.Duration) error {
	resp, err := cli.Get(ctx, cluster.GCOptionsKey)
	if err != nil || len(resp.Kvs) > 0 {
		return err
	}
	o := gcsched.DefaultOptions()
	if fast > 0 {
		o.FastInterval = fast
	} else {
		o.Enabled = false // --gc-interval 0: no scheduled GC
	}
	if full > 0 {
		o.FullInterval = full
	}
	return gcsched.SaveOptions(ctx, cli, o)
}
