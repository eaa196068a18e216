package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/fwdbatch"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/peerwire"
)

// Options configure a datanode's agent.
type Options struct {
	Client *clientv3.Client
	Node   cluster.NodeInfo
	// Heartbeat is how often the lease is renewed (default 3 s); Lease is
	// its TTL (default 10 s).
	Heartbeat, Lease time.Duration
	Logger           *slog.Logger
	// DialOptions are added to the options of connections to other
	// datanodes: the transport (TLS; default plaintext) and credentials.
	DialOptions []grpc.DialOption
	// Peer, if set, carries remote column scans (peerwire: a point
	// query's are many and small, and cost a third over it what they
	// cost over gRPC); a peer that does not speak it is read over gRPC.
	Peer *peerwire.Client
	// Registerer, if set, gets the lease metrics.
	Registerer prometheus.Registerer
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
	opts Options
	eng  *datanode.Engine
	log  *slog.Logger

	mu       sync.Mutex
	lease    clientv3.LeaseID
	deadline time.Time
	info     cluster.NodeInfo // as registered under lease
	owners   map[layout.RegionID]cluster.Assignment
	nodes    map[string]cluster.NodeInfo
	changed  chan struct{}            // closed and replaced when owners or nodes change (changedLocked)
	watches  map[*ownerWatch]struct{} // remote scans' owners, checked at each change (scan.go)
	opening  map[layout.RegionID]bool
	opened   map[layout.RegionID]uint64 // the assignment generation each hosted region was opened for
	conns    map[string]*grpc.ClientConn
	fwd      forwarder // the owners older than ForwardWrite (forward.go)

	stop context.CancelFunc
	wg   sync.WaitGroup

	renewals    *prometheus.CounterVec // by result
	losses      prometheus.Counter
	remoteScans prometheus.Gauge       // streams and look-ups open (or opening) to other datanodes
	scanRetries prometheus.Counter     // remote scans started again on a region's new owner
	columnScans *prometheus.CounterVec // remote column scans by transport
	forwards    *prometheus.CounterVec // forwarded shares of writes by transport
	fwdRetries  *prometheus.CounterVec // forwarded writes and deletes sent again, by why
}

// New prepares an agent; the engine is attached with Start.
func New(opts Options) *Agent {
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = cluster.DefaultHeartbeat
	}
	if opts.Lease <= 0 {
		opts.Lease = cluster.DefaultLease
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Node.Forward = fwdbatch.Latest // what ForwardWrite reads here (grpcapi)
	opts.Node.Partition = true          // routes by catalog.Table.Router
	a := &Agent{opts: opts, log: opts.Logger.With("node", opts.Node.ID), owners: map[layout.RegionID]cluster.Assignment{}, nodes: map[string]cluster.NodeInfo{},
		changed: make(chan struct{}), watches: map[*ownerWatch]struct{}{}, opening: map[layout.RegionID]bool{}, opened: map[layout.RegionID]uint64{}, conns: map[string]*grpc.ClientConn{},
		renewals:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_lease_renewals_total", Help: "Renewals of the datanode's lease by result: ok or failed."}, []string{"result"}),
		losses:      prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_lease_losses_total", Help: "Times the datanode's lease ran out and it closed every region."}),
		remoteScans: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_remote_scans", Help: "Scan streams and label look-ups (RegionTags) open, or opening, to the owners of regions hosted elsewhere."}),
		scanRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_remote_scan_retries_total",
			Help: "Remote scans and label look-ups started again, nothing delivered yet, because the region's owner moved, lost its lease or could not answer yet."}),
		fwdRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_forward_retries_total",
			Help: "Writes and deletes forwarded to a region's owner sent again, by why: moved (the owner changed, or its lease ended, while the request waited: cancelled) or unavailable (the owner answered it could not take it yet)."}, []string{"why"}),
		columnScans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_remote_column_scans_total",
			Help: "Column scans of regions hosted elsewhere sent to their owners, by transport: peerwire, or grpc (an owner that does not speak peerwire)."}, []string{"transport"}),
		forwards: newForwards()}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(a.renewals, a.losses, a.remoteScans, a.scanRetries, a.fwdRetries, a.columnScans, a.forwards)
	}
	return a
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
	if _, err := a.opts.Client.Put(ctx, cluster.DatanodesPrefix+info.ID, string(data), clientv3.WithLease(g.ID)); err != nil {
		return fmt.Errorf("register datanode %s: %w", info.ID, err)
	}
	a.mu.Lock()
	a.lease, a.deadline, a.info = g.ID, sent.Add(time.Duration(g.TTL)*time.Second), info
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
				a.renewals.WithLabelValues("ok").Inc()
			} else if ctx.Err() == nil {
				a.renewals.WithLabelValues("failed").Inc()
				a.log.Warn("heartbeat failed", "err", err)
			}
		}
	}
}

func (a *Agent) leaseLost(ctx context.Context) {
	hosted := a.eng.Hosted()
	a.losses.Inc()
	a.log.Error("region lease lost: closing every region", "regions", len(hosted))
	for _, id := range hosted {
		_ = a.eng.Unassign(ctx, id, false) // it logs its outcome
	}
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, a.opts.Heartbeat)
		err := a.register(rctx)
		cancel()
		if err == nil {
			_, _ = a.refresh(ctx) // failing that, the watch loop reads again
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
		wc := a.opts.Client.Watch(clientv3.WithRequireLeader(ctx), cluster.Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range wc {
			if resp.Err() != nil {
				break
			}
			changed := false
			for _, ev := range resp.Events {
				k := string(ev.Kv.Key)
				// The catalog follows its keys with its own watch.
				switch {
				case len(k) > len(cluster.RegionsPrefix) && k[:len(cluster.RegionsPrefix)] == cluster.RegionsPrefix,
					len(k) > len(cluster.DatanodesPrefix) && k[:len(cluster.DatanodesPrefix)] == cluster.DatanodesPrefix:
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
	kvs, rev, err := cluster.ReadPlacement(ctx, a.opts.Client)
	if err != nil {
		return 0, err
	}
	owners := map[layout.RegionID]cluster.Assignment{}
	nodes := map[string]cluster.NodeInfo{}
	for _, kv := range kvs {
		k := string(kv.Key)
		if id, ok := cluster.ParseRegionKey(cluster.RegionsPrefix, k); ok {
			var as cluster.Assignment
			if json.Unmarshal(kv.Value, &as) == nil {
				owners[id] = as
			}
		} else if len(k) > len(cluster.DatanodesPrefix) && k[:len(cluster.DatanodesPrefix)] == cluster.DatanodesPrefix {
			var n cluster.NodeInfo
			if json.Unmarshal(kv.Value, &n) == nil {
				nodes[n.ID] = n
			}
		}
	}
	a.mu.Lock()
	a.owners, a.nodes = owners, nodes
	a.changedLocked()
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
			go func() { _ = a.eng.Unassign(context.WithoutCancel(ctx), id, false) }() // it logs its outcome
		} else if as.Owner != a.opts.Node.ID {
			// Moved away (a planned move: flush first).
			go func() { _ = a.eng.Unassign(context.WithoutCancel(ctx), id, true) }()
		} else if known && as.Gen != gen {
			// Ours again, but assigned anew since this instance opened (a
			// quick move away and back): another owner may have fenced
			// it. Close it, and open the region again.
			a.log.Info("region reassigned here since it opened: reopening", "region", id.String(), "opened_gen", gen, "gen", as.Gen)
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				_ = a.eng.Unassign(context.WithoutCancel(ctx), id, false)
				a.mu.Lock()
				delete(a.opened, id)
				a.mu.Unlock()
				a.open(ctx, id)
			}()
		}
	}
	if !live {
		return rev, nil
	}
	for id, as := range owners {
		if as.Owner == a.opts.Node.ID && !hosted[id] {
			a.open(ctx, id)
		}
	}
	return rev, nil
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
				a.changedLocked()
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
// The registration is marked Leaving first, so metasrv does not count the
// revocation as a lease expiry.
func (a *Agent) Revoke(ctx context.Context) {
	a.mu.Lock()
	id, info := a.lease, a.info
	a.mu.Unlock()
	if id != 0 {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info.Leaving = true
		data, _ := json.Marshal(info)
		key := cluster.DatanodesPrefix + info.ID
		// Only while the registration is still this lease's (a lost lease
		// may have been replaced by a new one, or be gone).
		// Both best effort: failing them, the lease expires.
		_, _ = a.opts.Client.Txn(rctx).If(clientv3.Compare(clientv3.LeaseValue(key), "=", id)).
			Then(clientv3.OpPut(key, string(data), clientv3.WithIgnoreLease())).Commit()
		_, _ = a.opts.Client.Revoke(rctx, id)
		cancel()
	}
}

// Close is Stop then Revoke.
func (a *Agent) Close(ctx context.Context) {
	a.Stop()
	a.Revoke(ctx)
}
