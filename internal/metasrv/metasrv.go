// Package metasrv is the coordinator: it elects a leader among its
// replicas through etcd, and the leader places every table's regions on
// live datanodes, moving the regions of a datanode whose lease expired. Its
// admin gRPC service reports the cluster and changes placement; followers
// forward calls to the leader.
package metasrv

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/auth"
	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/gcsched"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/tenant"
	"github.com/stratadb/strata/internal/tlsutil"
	"github.com/stratadb/strata/internal/version"
	"github.com/stratadb/strata/internal/wire"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// Options configure a metasrv replica.
type Options struct {
	Client *clientv3.Client
	// Addr is this replica's admin gRPC address, published when it leads.
	Addr string
	// ElectionTTL bounds how long a dead leader keeps leadership
	// (default 5 s).
	ElectionTTL time.Duration
	// PlacementInterval is how often the leader reconciles placement
	// besides reacting to changes (default 1 s).
	PlacementInterval time.Duration
	// DefaultRegions is the region count of a table created without one
	// (0: one per live datanode at its creation; catalog.DefaultRegionCount).
	DefaultRegions uint32
	Logger         *slog.Logger
	// Auth is sent on calls to datanodes and to the leader.
	Auth auth.Token
	// TLS secures those calls (the datanodes' and replicas' CA, and this
	// replica's certificate under mutual TLS).
	TLS tlsutil.Config
	// Store is the cluster's object store: dropping a table deletes its
	// objects through it. Without it, DropTable is refused.
	Store objstore.Bucket
	// FinalSweepAfter is how long after dropping a table its prefix is
	// swept once more, for late writes of a paused former owner (default
	// manifest.UploadWindow + manifest.MaxClockSkew).
	FinalSweepAfter time.Duration
	// Build is this replica's build, shown by ClusterStatus and /health
	// (default version.Get()).
	Build version.Info
	// Metrics are kept up to date (default: NewMetrics(nil), registered
	// nowhere).
	Metrics *Metrics
}

// Server is a metasrv replica.
type Server struct {
	pb.UnimplementedMetaAdminServer
	opts    Options
	log     *slog.Logger
	cat     *catalog.Catalog
	metrics *Metrics

	mu      sync.Mutex
	leading bool
	conns   map[string]*grpc.ClientConn // to datanodes and the leader, by address

	stop    context.CancelFunc
	wg      sync.WaitGroup
	started time.Time
}

// Start joins the election and, when leading, runs placement.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.ElectionTTL <= 0 {
		opts.ElectionTTL = 5 * time.Second
	}
	if opts.PlacementInterval <= 0 {
		opts.PlacementInterval = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Build == (version.Info{}) {
		opts.Build = version.Get()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	// CreateTable resolves a region count before the catalog's default
	// would apply.
	cat, err := catalog.Open(ctx, catalog.NewEtcdBackend(opts.Client), max(1, opts.DefaultRegions))
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, log: opts.Logger.With("metasrv", opts.Addr), cat: cat, metrics: opts.Metrics, started: time.Now().UTC()}
	bg, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.wg.Add(1)
	go s.campaign(bg)
	return s, nil
}

// conn returns the connection to addr, dialing it once (a gRPC client
// connection reconnects by itself).
func (s *Server) conn(addr string) (*grpc.ClientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.conns[addr]; c != nil {
		return c, nil
	}
	transport, err := s.opts.TLS.DialOption()
	if err != nil {
		return nil, err
	}
	opts := append([]grpc.DialOption{transport}, s.opts.Auth.DialOptions()...)
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	if s.conns == nil {
		s.conns = map[string]*grpc.ClientConn{}
	}
	s.conns[addr] = c
	return c, nil
}

// Register adds the admin service to g.
func (s *Server) Register(g *grpc.Server) { pb.RegisterMetaAdminServer(g, s) }

// Leading reports whether this replica is the leader.
func (s *Server) Leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leading
}

// Close leaves the election (resigning if leading) and stops.
func (s *Server) Close() {
	s.stop()
	s.wg.Wait()
	s.cat.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
}

// campaign runs for leadership until stopped; each term runs the leader's
// loops until its session ends.
func (s *Server) campaign(ctx context.Context) {
	defer s.wg.Done()
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(s.opts.Client, concurrency.WithTTL(int(s.opts.ElectionTTL/time.Second)), concurrency.WithContext(ctx))
		if err != nil {
			s.log.Warn("election session failed", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		if err := s.announce(ctx, sess.Lease()); err != nil {
			s.log.Warn("announcing this replica failed", "err", err)
		}
		el := concurrency.NewElection(sess, cluster.ElectionPrefix)
		if err := el.Campaign(ctx, s.opts.Addr); err != nil {
			_ = sess.Close() // revokes the lease; failing that, it expires
			continue
		}
		s.log.Info("elected leader")
		term, endTerm := context.WithCancel(ctx)
		s.mu.Lock()
		s.leading = true
		s.mu.Unlock()
		s.metrics.Leader.Set(1)
		s.metrics.ElectionsWon.Inc()
		var lw sync.WaitGroup
		lw.Add(4)
		go func() { defer lw.Done(); s.placement(term) }()
		go func() { defer lw.Done(); s.drops(term) }()
		go func() { defer lw.Done(); s.watchLeases(term) }()
		go func() {
			defer lw.Done()
			gcsched.New(s.opts.Client, gcRunner{s}, s.allRegions, s.log, s.metrics.GC).Run(term)
		}()
		select {
		case <-ctx.Done():
		case <-sess.Done():
			s.log.Warn("leadership lost: the election session ended")
			s.metrics.ElectionsLost.Inc()
		}
		endTerm()
		lw.Wait()
		s.mu.Lock()
		s.leading = false
		s.mu.Unlock()
		s.metrics.Leader.Set(0)
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = el.Resign(rctx) // failing that, the key goes with the session's lease
		cancel()
		_ = sess.Close()
	}
}

// state is a snapshot of what placement needs.
type state struct {
	rev     int64
	nodes   map[string]cluster.NodeInfo
	regions map[layout.RegionID]regionKV
}

type regionKV struct {
	as     cluster.Assignment
	modRev int64
}

func (s *Server) read(ctx context.Context) (*state, error) {
	kvs, rev, err := cluster.ReadPlacement(ctx, s.opts.Client)
	if err != nil {
		return nil, err
	}
	st := &state{rev: rev, nodes: map[string]cluster.NodeInfo{}, regions: map[layout.RegionID]regionKV{}}
	for _, kv := range kvs {
		k := string(kv.Key)
		if id, ok := cluster.ParseRegionKey(cluster.RegionsPrefix, k); ok {
			var as cluster.Assignment
			if json.Unmarshal(kv.Value, &as) == nil {
				st.regions[id] = regionKV{as: as, modRev: kv.ModRevision}
			}
		} else if strings.HasPrefix(k, cluster.DatanodesPrefix) {
			var n cluster.NodeInfo
			if json.Unmarshal(kv.Value, &n) == nil {
				st.nodes[n.ID] = n
			}
		}
	}
	return st, nil
}

// placement reconciles on every change and every PlacementInterval.
func (s *Server) placement(ctx context.Context) {
	wc := s.opts.Client.Watch(clientv3.WithRequireLeader(ctx), cluster.Prefix, clientv3.WithPrefix())
	t := time.NewTicker(s.opts.PlacementInterval)
	defer t.Stop()
	for ctx.Err() == nil {
		if err := s.place(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("placement failed", "err", err)
		}
		// Wait for the tick or a change placement cares about (GC state
		// writes, for one, are not).
		for again := true; again; {
			again = false
			select {
			case <-ctx.Done():
			case <-t.C:
			case resp, ok := <-wc:
				if !ok {
					wc = s.opts.Client.Watch(clientv3.WithRequireLeader(ctx), cluster.Prefix, clientv3.WithPrefix())
				} else {
					again = !placementChange(resp)
				}
			}
		}
	}
}

// placementChange reports whether a watch response touches what placement
// reads: the set of tables, datanodes or assignments.
func placementChange(resp clientv3.WatchResponse) bool {
	for _, ev := range resp.Events {
		k := string(ev.Kv.Key)
		if catalog.TablesChanged(ev) || strings.HasPrefix(k, cluster.DatanodesPrefix) || strings.HasPrefix(k, cluster.RegionsPrefix) {
			return true
		}
	}
	return len(resp.Events) == 0 // a progress or error notice: re-check
}

// place assigns every region of every table that has no live owner to the
// live datanode with the fewest regions of that table, then with the
// fewest regions (leastLoaded): a table with as many regions as there are
// live datanodes gets one on each, even where some host more of the
// others' than the rest. Regions already placed stay where they are. Each assignment is a transaction
// comparing the region key's mod revision with the one read, so two
// leaders (an old one not yet aware it lost) cannot both assign it.
func (s *Server) place(ctx context.Context) error {
	tables, err := s.cat.Tables(ctx)
	if err != nil {
		return err
	}
	st, err := s.read(ctx)
	if err != nil {
		return err
	}

	load := map[string]int{}
	for id := range st.nodes {
		load[id] = 0
	}
	for _, r := range st.regions {
		if _, live := st.nodes[r.as.Owner]; live {
			load[r.as.Owner]++
		}
	}
	var errs []error
	// Assignments of regions no table has any more (dropped) go, so their
	// owners close them.
	valid := map[layout.RegionID]bool{}
	for _, t := range tables {
		for i := range t.Regions {
			valid[layout.RegionID{Table: t.ID, Region: i}] = true
		}
	}
	for id, r := range st.regions {
		if valid[id] {
			continue
		}
		key := cluster.RegionKey(id)
		if _, err := s.opts.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", r.modRev)).Then(clientv3.OpDelete(key)).Commit(); err != nil {
			errs = append(errs, err)
		} else {
			s.log.Info("assignment of a dropped table's region removed", "region", id.String())
		}
	}
	for _, t := range tables {
		// The table's regions each live datanode hosts: a region goes
		// where the table has the fewest, so that a table of one region
		// per datanode gets one on each, whatever else they host.
		mine := map[string]int{}
		for i := range t.Regions {
			if cur, exists := st.regions[layout.RegionID{Table: t.ID, Region: i}]; exists {
				if _, live := st.nodes[cur.as.Owner]; live {
					mine[cur.as.Owner]++
				}
			}
		}
		cand := hosts(t, st.nodes, load)
		for i := range t.Regions {
			id := layout.RegionID{Table: t.ID, Region: i}
			cur, exists := st.regions[id]
			if _, live := st.nodes[cur.as.Owner]; exists && live {
				continue
			}
			if len(cand) == 0 {
				continue // no live datanode (that may host it) yet
			}
			to := leastLoaded(mine, cand)
			if err := s.assign(ctx, id, cur, exists, to); err != nil {
				errs = append(errs, err)
				continue
			}
			load[to]++
			if t.Partition != "" {
				cand[to]++ // a copy of load's
			}
			mine[to]++
			reason := movePlaced
			if exists {
				reason = moveFailover
			}
			s.metrics.Moves.WithLabelValues(reason).Inc()
			if exists {
				s.log.Info("region moved off a dead datanode", "region", id.String(), "from", cur.as.Owner, "to", to)
			} else {
				s.log.Info("region placed", "region", id.String(), "on", to)
			}
		}
	}
	return errors.Join(errs...)
}

// hosts is the live datanodes that may host t's regions, with their
// load: every one (load itself), or for a table partitioned by a tag those
// that route by one (cluster.NodeInfo.Partition), in a copy: an older
// build would write rows of its own region without checking their keys.
func hosts(t catalog.Table, nodes map[string]cluster.NodeInfo, load map[string]int) map[string]int {
	if t.Partition == "" {
		return load
	}
	cand := map[string]int{}
	for id, n := range load {
		if nodes[id].Partition {
			cand[id] = n
		}
	}
	return cand
}

// leastLoaded is the live datanode (a key of load) hosting the fewest
// regions of the table being placed (table), then the fewest regions in
// all (load), then the first by id.
func leastLoaded(table, load map[string]int) string {
	ids := make([]string, 0, len(load))
	for id := range load {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	best := ids[0]
	for _, id := range ids[1:] {
		if table[id] < table[best] || table[id] == table[best] && load[id] < load[best] {
			best = id
		}
	}
	return best
}

func (s *Server) assign(ctx context.Context, id layout.RegionID, cur regionKV, exists bool, to string) error {
	as := cluster.Assignment{Owner: to, Gen: cur.as.Gen + 1, At: time.Now().UTC()}
	data, _ := json.Marshal(as)
	key := cluster.RegionKey(id)
	cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	if exists {
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", cur.modRev)
	}
	resp, err := s.opts.Client.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, string(data))).Commit()
	if err != nil {
		return fmt.Errorf("assign region %s: %w", id, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("assign region %s: changed concurrently", id)
	}
	return nil
}

func (s *Server) allRegions(ctx context.Context) ([]layout.RegionID, error) {
	tables, err := s.cat.Tables(ctx)
	if err != nil {
		return nil, err
	}
	var out []layout.RegionID
	for _, t := range tables {
		for i := range t.Regions {
			out = append(out, layout.RegionID{Table: t.ID, Region: i})
		}
	}
	return out, nil
}

// gcRunner runs a region's GC on its owner.
type gcRunner struct{ s *Server }

func (g gcRunner) RunGC(ctx context.Context, id layout.RegionID, full bool, o gcsched.Options) (gcsched.Result, error) {
	st, err := g.s.read(ctx)
	if err != nil {
		return gcsched.Result{}, err
	}
	owner, ok := st.nodes[st.regions[id].as.Owner]
	if !ok {
		return gcsched.Result{}, fmt.Errorf("region %s has no live owner", id)
	}
	conn, err := g.s.conn(owner.GRPCAddr)
	if err != nil {
		return gcsched.Result{}, err
	}
	secs := func(d time.Duration) int64 {
		if d <= 0 {
			return -1 // no wait
		}
		return int64(d / time.Second)
	}
	resp, err := pb.NewDatanodeClient(conn).GcRegion(ctx, &pb.GcRegionRequest{Region: id.String(), Full: full,
		LingeringSeconds: secs(o.Lingering), MinAgeSeconds: secs(o.MinAge)})
	if err != nil {
		return gcsched.Result{}, err
	}
	var res gcsched.Result
	for _, r := range resp.Regions {
		if r.Error != "" {
			return res, errors.New(r.Error)
		}
		res.Deleted += r.RemovedFiles + r.PendingFiles + r.WalSegments + r.Deleted
		res.Orphans += int64(len(r.Orphans))
	}
	return res, nil
}

// leaderClient returns a client of the leader when this replica does not
// lead (nil when it does).
func (s *Server) leaderClient(ctx context.Context) (pb.MetaAdminClient, error) {
	if s.Leading() {
		return nil, nil
	}
	resp, err := s.opts.Client.Get(ctx, cluster.ElectionPrefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if len(resp.Kvs) == 0 {
		return nil, status.Error(codes.Unavailable, "no metasrv leader elected yet")
	}
	addr := string(resp.Kvs[0].Value)
	if addr == s.opts.Addr {
		return nil, status.Error(codes.Unavailable, "leadership is changing; retry")
	}
	conn, err := s.conn(addr)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return pb.NewMetaAdminClient(conn), nil
}

// ClusterStatus reports the leader, datanodes and placement.
func (s *Server) ClusterStatus(ctx context.Context, req *pb.ClusterStatusRequest) (*pb.ClusterStatusResponse, error) {
	if c, err := s.leaderClient(ctx); err != nil {
		return nil, err
	} else if c != nil {
		return c.ClusterStatus(ctx, req)
	}
	tables, err := s.cat.Tables(ctx)
	if err != nil {
		return nil, wire.Status(err)
	}
	st, err := s.read(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	out := &pb.ClusterStatusResponse{Leader: s.opts.Addr}
	count := map[string]int64{}
	for _, t := range tables {
		for i := range t.Regions {
			id := layout.RegionID{Table: t.ID, Region: i}
			r := st.regions[id]
			_, live := st.nodes[r.as.Owner]
			if live {
				count[r.as.Owner]++
			}
			out.Regions = append(out.Regions, &pb.RegionPlacement{Region: id.String(), Table: t.Name, Owner: r.as.Owner, Gen: r.as.Gen, OwnerLive: live})
		}
	}
	for _, n := range st.nodes {
		out.Datanodes = append(out.Datanodes, &pb.DatanodeInfo{Id: n.ID, GrpcAddr: n.GRPCAddr, HttpAddr: n.HTTPAddr, StartedUnix: n.Started.Unix(), Regions: count[n.ID],
			Version: n.Version, Revision: n.Revision})
	}
	slices.SortFunc(out.Datanodes, func(a, b *pb.DatanodeInfo) int { return strings.Compare(a.Id, b.Id) })
	resp, err := s.opts.Client.Get(ctx, cluster.MetasrvPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	for _, kv := range resp.Kvs {
		var m cluster.MetasrvInfo
		if json.Unmarshal(kv.Value, &m) != nil {
			continue
		}
		out.Metasrvs = append(out.Metasrvs, &pb.MetasrvInfo{Addr: m.Addr, Leader: m.Addr == s.opts.Addr, Version: m.Version, Revision: m.Revision, StartedUnix: m.Started.Unix()})
	}
	slices.SortFunc(out.Metasrvs, func(a, b *pb.MetasrvInfo) int { return strings.Compare(a.Addr, b.Addr) })
	return out, nil
}

// announce records this replica and its build under the election
// session's lease, so ClusterStatus lists every replica while it runs.
func (s *Server) announce(ctx context.Context, lease clientv3.LeaseID) error {
	data, err := json.Marshal(cluster.MetasrvInfo{Addr: s.opts.Addr, Version: s.opts.Build.Version, Revision: s.opts.Build.Revision, Started: s.started})
	if err != nil {
		return err
	}
	_, err = s.opts.Client.Put(ctx, cluster.MetasrvPrefix+s.opts.Addr, string(data), clientv3.WithLease(lease))
	return err
}

// MoveRegion reassigns a region to a live datanode.
func (s *Server) MoveRegion(ctx context.Context, req *pb.MoveRegionRequest) (*pb.MoveRegionResponse, error) {
	if c, err := s.leaderClient(ctx); err != nil {
		return nil, err
	} else if c != nil {
		return c.MoveRegion(ctx, req)
	}
	id, err := layout.ParseRegionID(req.GetRegion())
	if err != nil {
		return nil, wire.Status(err)
	}
	st, err := s.read(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	cur, exists := st.regions[id]
	if !exists {
		return nil, status.Errorf(codes.NotFound, "region %s is not placed", id)
	}
	to, live := st.nodes[req.GetTo()]
	if !live {
		return nil, status.Errorf(codes.InvalidArgument, "datanode %q is not live", req.GetTo())
	}
	if t, ok := s.cat.ByID(id.Table); ok && t.Partition != "" && !to.Partition {
		return nil, status.Errorf(codes.FailedPrecondition, "table %s is partitioned by %s and datanode %q does not route by partition tag (%s): upgrade it first",
			t.Name, t.Partition, req.GetTo(), cmp.Or(to.Version, "an older build"))
	}
	if cur.as.Owner == req.GetTo() {
		return &pb.MoveRegionResponse{Placement: &pb.RegionPlacement{Region: id.String(), Owner: cur.as.Owner, Gen: cur.as.Gen, OwnerLive: true}}, nil
	}
	if err := s.assign(ctx, id, cur, true, req.GetTo()); err != nil {
		return nil, status.Error(codes.Aborted, err.Error())
	}
	s.metrics.Moves.WithLabelValues(moveAdmin).Inc()
	s.log.Info("region moved", "region", id.String(), "from", cur.as.Owner, "to", req.GetTo())
	return &pb.MoveRegionResponse{Placement: &pb.RegionPlacement{Region: id.String(), Owner: req.GetTo(), Gen: cur.as.Gen + 1, OwnerLive: true}}, nil
}

// CreateTable adds a table to the catalog; placement follows at once.
func (s *Server) CreateTable(ctx context.Context, req *pb.CreateTableRequest) (*pb.CreateTableResponse, error) {
	regions := req.GetRegions()
	if regions == 0 {
		live := 1
		if s.opts.DefaultRegions == 0 {
			n, err := cluster.LiveDatanodes(ctx, s.opts.Client)
			if err != nil {
				return nil, status.Error(codes.Unavailable, err.Error())
			}
			live = n
		}
		regions = catalog.DefaultRegionCount(s.opts.DefaultRegions, live)
	}
	name, err := qualify(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if req.GetPartitionBy() != "" {
		if err := cluster.CheckPartitioning(ctx, s.opts.Client); errors.Is(err, cluster.ErrNoPartitioning) {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		} else if err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	}
	t, err := s.cat.CreateTable(ctx, catalog.TableSpec{Name: name, Regions: regions, Timestamp: req.GetTimestampColumn(),
		TTL: time.Duration(req.GetTtlSeconds()) * time.Second, CompactionWindow: time.Duration(req.GetCompactionWindowSeconds()) * time.Second,
		Partition: req.GetPartitionBy()})
	if err != nil {
		return nil, tableStatus(ctx, err)
	}
	return &pb.CreateTableResponse{Table: tableMsg(t)}, nil
}

// ListTables lists the catalog's tables of the call's tenant.
func (s *Server) ListTables(ctx context.Context, req *pb.ListTablesRequest) (*pb.ListTablesResponse, error) {
	tn, err := tenant.Incoming(ctx)
	if err != nil {
		return nil, err
	}
	tables, err := s.cat.Tables(ctx)
	if err != nil {
		return nil, wire.Status(err)
	}
	out := &pb.ListTablesResponse{}
	for _, t := range tables {
		if tenant.Of(t.Name) == tn {
			out.Tables = append(out.Tables, tableMsg(t))
		}
	}
	return out, nil
}
