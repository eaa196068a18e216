package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/stratadb/strata/internal/wire"
	"io"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// AgentOptions configure a datanode's agent.
type AgentOptions struct {
	Client *clientv3.Client
	Node   NodeInfo
	// Heartbeat is how often the lease is renewed (default 3 s); Lease is
	// its TTL (default 10 s).
	Heartbeat, Lease time.Duration
	Logger           *slog.Logger
	// DialOptions are added to the options of connections to other
	// datanodes (credentials).
	DialOptions []grpc.DialOption
}

// Agent is a datanode's membership of the cluster: it registers the node
// under a lease and renews it, opens the regions metasrv assigns to it and
// closes the ones moved away, closes every region the moment the lease
// cannot be renewed in time, and routes writes and scans of regions other
// datanodes host.
//
// INVARIANT: the agent's local lease deadline is computed from the time a
// renewal was sent, so it is never later than etcd's expiry of the lease;
// metasrv reassigns a region only after etcd expired its owner's lease. So
// a datanode has closed a region before anyone else may open it, and if it
// was paused past its lease, the new owner's epoch fences it in the object
// store (manifest create-if-absent, WAL fence segment) anyway.
type Agent struct {
	opts AgentOptions
	eng  *datanode.Engine
	log  *slog.Logger

	mu       sync.Mutex
	lease    clientv3.LeaseID
	deadline time.Time
	owners   map[layout.RegionID]Assignment
	nodes    map[string]NodeInfo
	changed  chan struct{} // closed and replaced when owners or nodes change
	opening  map[layout.RegionID]bool
	opened   map[layout.RegionID]uint64 // the assignment generation each hosted region was opened for
	conns    map[string]*grpc.ClientConn

	stop context.CancelFunc
	wg   sync.WaitGroup
}

// NewAgent prepares an agent; the engine is attached with Start.
func NewAgent(opts AgentOptions) *Agent {
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.Lease <= 0 {
		opts.Lease = DefaultLease
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Agent{opts: opts, log: opts.Logger.With("node", opts.Node.ID), owners: map[layout.RegionID]Assignment{}, nodes: map[string]NodeInfo{},
		changed: make(chan struct{}), opening: map[layout.RegionID]bool{}, opened: map[layout.RegionID]uint64{}, conns: map[string]*grpc.ClientConn{}}
}

// BindLease returns the deadline of the lease the node holds now, for a
// region opened now (region.Options.Lease): the lease's local deadline,
// computed from the time a renewal was sent so that it never falls after
// etcd's expiry, and the zero time once the node holds another lease. A
// region opened under a lease that expired stays fenced even after the
// node registers again: metasrv may have moved it meanwhile.
func (a *Agent) BindLease() func() time.Time {
	a.mu.Lock()
	id := a.lease
	a.mu.Unlock()
	return func() time.Time {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.lease != id {
			return time.Time{}
		}
		return a.deadline
	}
}

// SetAddrs sets the addresses the node registers (known once it listens).
func (a *Agent) SetAddrs(grpcAddr, httpAddr string) {
	a.opts.Node.GRPCAddr, a.opts.Node.HTTPAddr = grpcAddr, httpAddr
}

// Start registers the node and starts following assignments for eng.
func (a *Agent) Start(ctx context.Context, eng *datanode.Engine) error {
	a.eng = eng
	if err := a.register(ctx); err != nil {
		return err
	}
	bg, stop := context.WithCancel(context.Background())
	a.stop = stop
	a.wg.Add(2)
	go a.heartbeats(bg)
	go a.follow(bg)
	return nil
}

func (a *Agent) register(ctx context.Context) error {
	sent := time.Now()
	g, err := a.opts.Client.Grant(ctx, int64(a.opts.Lease/time.Second))
	if err != nil {
		return fmt.Errorf("grant lease: %w", err)
	}
	info := a.opts.Node
	info.Started = time.Now().UTC()
	data, _ := json.Marshal(info)
	if _, err := a.opts.Client.Put(ctx, DatanodesPrefix+info.ID, string(data), clientv3.WithLease(g.ID)); err != nil {
		return fmt.Errorf("register datanode %s: %w", info.ID, err)
	}
	a.mu.Lock()
	a.lease, a.deadline = g.ID, sent.Add(time.Duration(g.TTL)*time.Second)
	a.mu.Unlock()
	a.log.Info("datanode registered", "lease_ttl", time.Duration(g.TTL)*time.Second)
	return nil
}

// heartbeats renews the lease every Heartbeat. When the deadline passes
// without a renewal, every region closes (without flushing: writing more
// would race the next owner; the WAL holds every acknowledged write) and
// the node registers again under a new lease.
func (a *Agent) heartbeats(ctx context.Context) {
	defer a.wg.Done()
	t := time.NewTicker(a.opts.Heartbeat)
	defer t.Stop()
	for {
		a.mu.Lock()
		deadline := a.deadline
		a.mu.Unlock()
		watchdog := time.NewTimer(time.Until(deadline))
		select {
		case <-ctx.Done():
			watchdog.Stop()
			return
		case <-watchdog.C:
			a.leaseLost(ctx)
		case <-t.C:
			watchdog.Stop()
			sent := time.Now()
			a.mu.Lock()
			id := a.lease
			a.mu.Unlock()
			rctx, cancel := context.WithTimeout(ctx, a.opts.Heartbeat)
			resp, err := a.opts.Client.KeepAliveOnce(rctx, id)
			cancel()
			if err == nil && resp.TTL > 0 {
				a.mu.Lock()
				a.deadline = sent.Add(time.Duration(resp.TTL) * time.Second)
				a.mu.Unlock()
			} else if ctx.Err() == nil {
				a.log.Warn("heartbeat failed", "err", err)
			}
		}
	}
}

func (a *Agent) leaseLost(ctx context.Context) {
	hosted := a.eng.Hosted()
	a.log.Error("region lease lost: closing every region", "regions", len(hosted))
	for _, id := range hosted {
		a.eng.Unassign(ctx, id, false)
	}
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, a.opts.Heartbeat)
		err := a.register(rctx)
		cancel()
		if err == nil {
			a.refresh(ctx)
			return
		}
		a.log.Warn("registering again failed", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(a.opts.Heartbeat):
		}
	}
}

// follow watches assignments and datanodes, applying every change.
func (a *Agent) follow(ctx context.Context) {
	defer a.wg.Done()
	for ctx.Err() == nil {
		rev, err := a.refresh(ctx)
		if err != nil {
			a.log.Warn("reading assignments failed", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		wc := a.opts.Client.Watch(clientv3.WithRequireLeader(ctx), Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range wc {
			if resp.Err() != nil {
				break
			}
			changed := false
			for _, ev := range resp.Events {
				k := string(ev.Kv.Key)
				switch {
				case k == CatalogKey:
					a.eng.ReloadCatalog(ctx)
				case len(k) > len(RegionsPrefix) && k[:len(RegionsPrefix)] == RegionsPrefix,
					len(k) > len(DatanodesPrefix) && k[:len(DatanodesPrefix)] == DatanodesPrefix:
					changed = true
				}
			}
			if changed {
				// Re-read rather than apply events one by one: simpler, and
				// assignments are few.
				if _, err := a.refresh(ctx); err != nil {
					break
				}
			}
		}
	}
}

// refresh reads every assignment and datanode and reconciles the regions
// hosted here with the assignments.
func (a *Agent) refresh(ctx context.Context) (int64, error) {
	resp, err := a.opts.Client.Get(ctx, Prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	owners := map[layout.RegionID]Assignment{}
	nodes := map[string]NodeInfo{}
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		if id, ok := ParseRegionKey(RegionsPrefix, k); ok {
			var as Assignment
			if json.Unmarshal(kv.Value, &as) == nil {
				owners[id] = as
			}
		} else if len(k) > len(DatanodesPrefix) && k[:len(DatanodesPrefix)] == DatanodesPrefix {
			var n NodeInfo
			if json.Unmarshal(kv.Value, &n) == nil {
				nodes[n.ID] = n
			}
		}
	}
	a.mu.Lock()
	a.owners, a.nodes = owners, nodes
	close(a.changed)
	a.changed = make(chan struct{})
	live := time.Now().Before(a.deadline)
	a.mu.Unlock()
	hosted := map[layout.RegionID]bool{}
	for _, id := range a.eng.Hosted() {
		hosted[id] = true
		a.mu.Lock()
		gen, known := a.opened[id]
		a.mu.Unlock()
		if as, ok := owners[id]; !ok {
			// No assignment: the table is being dropped; flushing would
			// only write files about to be deleted.
			go a.eng.Unassign(context.WithoutCancel(ctx), id, false)
		} else if as.Owner != a.opts.Node.ID {
			// Moved away (a planned move: flush first).
			go a.eng.Unassign(context.WithoutCancel(ctx), id, true)
		} else if known && as.Gen != gen {
			// Ours again, but assigned anew since this instance opened (a
			// quick move away and back): another owner may have fenced
			// it. Close it, and open the region again.
			a.log.Info("region reassigned here since it opened: reopening", "region", id.String(), "opened_gen", gen, "gen", as.Gen)
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				a.eng.Unassign(context.WithoutCancel(ctx), id, false)
				a.mu.Lock()
				delete(a.opened, id)
				a.mu.Unlock()
				a.open(ctx, id)
			}()
		}
	}
	if !live {
		return resp.Header.Revision, nil
	}
	for id, as := range owners {
		if as.Owner == a.opts.Node.ID && !hosted[id] {
			a.open(ctx, id)
		}
	}
	return resp.Header.Revision, nil
}

// open opens an assigned region in the background (WAL replay may take a
// while); one attempt at a time per region, retried while it stays ours.
func (a *Agent) open(ctx context.Context, id layout.RegionID) {
	a.mu.Lock()
	if a.opening[id] {
		a.mu.Unlock()
		return
	}
	a.opening[id] = true
	a.mu.Unlock()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer func() { a.mu.Lock(); delete(a.opening, id); a.mu.Unlock() }()
		for attempt := 0; ctx.Err() == nil; attempt++ {
			a.mu.Lock()
			as := a.owners[id]
			mine := as.Owner == a.opts.Node.ID && time.Now().Before(a.deadline)
			a.mu.Unlock()
			if !mine {
				return
			}
			err := a.eng.Assign(ctx, id)
			if err == nil {
				a.mu.Lock()
				a.opened[id] = as.Gen
				close(a.changed)
				a.changed = make(chan struct{})
				a.mu.Unlock()
				return
			}
			a.log.Warn("opening assigned region failed", "region", id.String(), "attempt", attempt, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(min(time.Duration(attempt+1)*500*time.Millisecond, 5*time.Second)):
			}
		}
	}()
}

// Stop stops following assignments and renewing the lease; the regions
// stay open, for the caller to flush and close while the lease lasts.
func (a *Agent) Stop() {
	if a.stop != nil {
		a.stop()
	}
	a.wg.Wait()
	a.mu.Lock()
	for _, c := range a.conns {
		c.Close()
	}
	a.conns = map[string]*grpc.ClientConn{}
	a.mu.Unlock()
}

// Revoke revokes the lease, so that metasrv moves the regions at once
// instead of after the lease times out. Call it after closing the regions.
func (a *Agent) Revoke(ctx context.Context) {
	a.mu.Lock()
	id := a.lease
	a.mu.Unlock()
	if id != 0 {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		a.opts.Client.Revoke(rctx, id)
		cancel()
	}
}

// Close is Stop then Revoke.
func (a *Agent) Close(ctx context.Context) {
	a.Stop()
	a.Revoke(ctx)
}

// owner waits until region id has a live owner and returns its address,
// or "" if the owner is this node and the region is open here.
func (a *Agent) owner(ctx context.Context, id layout.RegionID) (string, error) {
	for {
		a.mu.Lock()
		as, ok := a.owners[id]
		n, live := a.nodes[as.Owner]
		changed := a.changed
		a.mu.Unlock()
		if ok && live {
			if as.Owner != a.opts.Node.ID {
				return n.GRPCAddr, nil
			}
			if slicesContains(a.eng.Hosted(), id) {
				return "", nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w: region %s has no live owner yet: %v", datanode.ErrNotHosted, id, ctx.Err())
		case <-changed:
		case <-time.After(time.Second):
		}
	}
}

func slicesContains(ids []layout.RegionID, id layout.RegionID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func (a *Agent) conn(addr string) (pb.DatanodeClient, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.conns[addr]
	if c == nil {
		opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, a.opts.DialOptions...)
		var err error
		if c, err = grpc.NewClient(addr, opts...); err != nil {
			return nil, err
		}
		a.conns[addr] = c
	}
	return pb.NewDatanodeClient(c), nil
}

// routeTimeout bounds how long a forwarded request waits for a region to
// get an owner (failover takes up to a lease).
const routeTimeout = 30 * time.Second

func retryable(err error) bool {
	return status.Code(err) == codes.Unavailable || errors.Is(err, datanode.ErrNotHosted)
}

// Write forwards a region's points to its owner, waiting for an owner and
// retrying while the region moves.
func (a *Agent) Write(ctx context.Context, table string, id layout.RegionID, points []row.Point) (region.WriteResult, error) {
	ctx, cancel := context.WithTimeout(ctx, routeTimeout)
	defer cancel()
	for {
		addr, err := a.owner(ctx, id)
		if err != nil {
			return region.WriteResult{}, err
		}
		if addr == "" {
			res, err := a.eng.WriteRegion(ctx, table, id, points)
			if err == nil || !errors.Is(err, datanode.ErrNotHosted) {
				return res, err
			}
			continue
		}
		c, err := a.conn(addr)
		if err != nil {
			return region.WriteResult{}, err
		}
		resp, err := c.Write(ctx, &pb.WriteRequest{Table: table, Region: id.String(), Points: wire.FromPoints(points)})
		if err == nil {
			return region.WriteResult{Written: int(resp.Written), Expired: int(resp.Expired)}, nil
		}
		if !retryable(err) || ctx.Err() != nil {
			return region.WriteResult{}, fmt.Errorf("region %s on %s: %w", id, addr, err)
		}
		a.waitChange(ctx)
	}
}

func (a *Agent) waitChange(ctx context.Context) {
	a.mu.Lock()
	ch := a.changed
	a.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-ch:
	case <-time.After(500 * time.Millisecond):
	}
}

// Scan scans a region on its owner.
func (a *Agent) Scan(ctx context.Context, table string, id layout.RegionID, req region.ScanRequest) (row.Iterator, error) {
	wctx, cancel := context.WithTimeout(ctx, routeTimeout)
	defer cancel()
	addr, err := a.owner(wctx, id)
	if err != nil {
		return nil, err
	}
	if addr == "" {
		sc, err := a.eng.ScanRegion(ctx, table, id, req)
		if err != nil {
			return nil, err
		}
		return &localIter{sc: sc}, nil
	}
	c, err := a.conn(addr)
	if err != nil {
		return nil, err
	}
	sctx, scancel := context.WithCancel(ctx)
	stream, err := c.Scan(sctx, &pb.ScanRequest{Table: table, Region: id.String(), Start: req.Start, End: req.End,
		Tags: wire.FromTags(req.Tags), Fields: req.Fields, BatchRows: int32(req.BatchRows)})
	if err != nil {
		scancel()
		return nil, fmt.Errorf("scan region %s on %s: %w", id, addr, err)
	}
	return &remoteIter{stream: stream, cancel: scancel, width: len(req.Fields)}, nil
}

// localIter adapts an engine scanner to a row.Iterator.
type localIter struct {
	sc    *datanode.Scanner
	batch []row.Entry
	pos   int
}

func (it *localIter) Next() bool {
	it.pos++
	for it.pos >= len(it.batch) {
		if !it.sc.Next() {
			return false
		}
		it.batch, it.pos = it.sc.Batch(), 0
	}
	return true
}
func (it *localIter) Entry() *row.Entry { return &it.batch[it.pos] }
func (it *localIter) Err() error        { return it.sc.Err() }
func (it *localIter) Close() error      { return it.sc.Close() }

// remoteIter turns a streamed scan into entries.
type remoteIter struct {
	stream grpc.ServerStreamingClient[pb.ScanResponse]
	cancel context.CancelFunc
	width  int
	resp   *pb.ScanResponse
	keys   []string // series keys of resp
	pos    int
	cur    row.Entry
	err    error
}

func (it *remoteIter) Next() bool {
	for it.resp == nil || it.pos >= len(it.resp.Rows) {
		resp, err := it.stream.Recv()
		if err == io.EOF {
			return false
		}
		if err != nil {
			it.err = err
			return false
		}
		it.resp, it.pos = resp, 0
		it.keys = it.keys[:0]
		for _, s := range resp.Series {
			k, err := row.EncodeSeries(nil, wire.ToTags(s.Tags))
			if err != nil {
				it.err = err
				return false
			}
			it.keys = append(it.keys, string(k))
		}
	}
	r := it.resp.Rows[it.pos]
	it.pos++
	fields := make([]row.Value, it.width)
	for i, v := range r.Values {
		if i < it.width {
			fields[i] = wire.ToValue(v)
		}
	}
	it.cur = row.Entry{Series: it.keys[r.Series], TS: r.Ts, Fields: fields}
	return true
}
func (it *remoteIter) Entry() *row.Entry { return &it.cur }
func (it *remoteIter) Err() error        { return it.err }
func (it *remoteIter) Close() error      { it.cancel(); return nil }
