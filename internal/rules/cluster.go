package rules

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	promrules "github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/rules/rulestore"
	"github.com/stratadb/strata/internal/tenant"
)

// ClusterOptions make a Manager evaluate the rule groups stored in etcd
// (store.go), each on one datanode of the cluster at a time.
//
// Ownership: each datanode holds an etcd lease of its own for rules
// (TTL Lease, renewed every Lease/3), and announces itself as an
// evaluator under it (/strata/rules/nodes/{id}). A group is evaluated by
// the datanode whose id is under /strata/rules/owners/{ns}/{group} (a
// tenant's group: /strata/rules/tenants/{tenant}/owners/{ns}/{group}), a
// key created under that lease: when the datanode dies, or freezes for
// longer than Lease, its lease expires and its announcement and owner
// keys go at once. Groups are spread over the announced evaluators by
// rendezvous hashing of their keys: the preferred evaluator claims an
// unowned group at once (any evaluator claims one left unowned longer
// than Lease); an owner hands a group over (stops it, then deletes its
// key) to a preferred evaluator announced for at least 2 x Lease (so a
// datanode that froze and came back does not take its groups back at
// once). Before each evaluation, before each write of its results and
// before its alerts are sent, the owner checks that it still holds the
// key and that its lease is still valid by its own clock (the last
// renewal's send time plus the TTL): a datanode frozen past its lease
// and woken neither evaluates, writes nor notifies, even before it
// learns from etcd that it lost the group.
//
// A group is known by its ID (rulestore.ID: tenant, namespace and name),
// which is what is hashed, leased and run: two tenants' groups of one
// namespace and name are two groups. A tenant's group reads the tenant's
// series and writes its metrics table (Manager.evalFor).
type ClusterOptions struct {
	Client *clientv3.Client
	// NodeID is this datanode's id (its registration under
	// /strata/datanodes/).
	NodeID string
	// Lease is the TTL of the rules lease (default cluster.DefaultLease):
	// a dead or frozen evaluator's groups move after at most this long.
	Lease time.Duration
	// Resync is how often ownership is reconciled besides on etcd changes
	// (default 1 s).
	Resync time.Duration
	// Peer asks the datanode at gRPC address addr for the state of the
	// groups it evaluates (its LocalRuleGroups; the RuleGroups RPC), for
	// /api/v1/rules and /api/v1/alerts to answer the whole cluster. Nil:
	// other evaluators' groups are answered with health "unknown".
	Peer func(ctx context.Context, addr string) ([]byte, error)
}

// errNotOwner refuses a write of a group this node no longer owns.
var errNotOwner = errors.New("rules: this datanode no longer evaluates the group (its ownership lapsed); result not written")

// clusterMetrics are the ownership metrics.
type clusterMetrics struct {
	owned   prometheus.Gauge
	changes *prometheus.CounterVec
	skipped prometheus.Counter
	fenced  prometheus.Counter
}

func newClusterMetrics(reg prometheus.Registerer) *clusterMetrics {
	m := &clusterMetrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_rule_groups_owned", Help: "Rule groups stored in etcd that this datanode evaluates now."}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_rule_group_ownership_changes_total",
			Help: "Rule groups this datanode began evaluating (gained), stopped because its ownership lapsed or another took them (lost), handed over to their preferred datanode (released), or stopped because they were deleted (deleted)."}, []string{"change"}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_rule_group_evaluations_skipped_total",
			Help: "Evaluations of a rule group not run because this datanode's ownership of it was not certain (lease not renewed in time, or ownership lost)."}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_rule_group_results_fenced_total",
			Help: "Writes of rule results and alert notifications refused because the group's ownership lapsed during its evaluation."}),
	}
	for _, c := range []string{"gained", "lost", "released", "deleted"} {
		m.changes.WithLabelValues(c)
	}
	if reg != nil {
		reg.MustRegister(m.owned, m.changes, m.skipped, m.fenced)
	}
	return m
}

// clusterRules runs the groups this datanode owns, each in a rules
// manager of its own (stopping one writes no staleness markers, so the
// next owner carries its series on, and its alerts' state is restored
// there from ALERTS_FOR_STATE).
type clusterRules struct {
	m       *Manager
	opts    ClusterOptions
	metrics *clusterMetrics
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	kick    chan struct{}

	mu         sync.Mutex
	lease      clientv3.LeaseID // 0: none
	validUntil time.Time        // the lease is certainly alive before this (local monotonic clock)
	groups     map[string]*ownedGroup
	unowned    map[string]time.Time // groups seen without owner, since
	announced  map[string]time.Time // evaluators ("id@create revision") seen, since
}

// ownedGroup is a group running here.
type ownedGroup struct {
	key      string // rulestore.ID
	tenant   string
	lease    clientv3.LeaseID
	content  []byte
	mgr      *promrules.Manager
	cancel   context.CancelFunc
	running  chan struct{} // closed when the manager's Run returned
	stopping bool
	restored bool // the first evaluation restored the alerts' state (guarded by clusterRules.mu)
}

func newClusterRules(m *Manager, opts ClusterOptions) *clusterRules {
	opts.Lease = cmpDuration(opts.Lease, cluster.DefaultLease)
	opts.Resync = cmpDuration(opts.Resync, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	return &clusterRules{m: m, opts: opts, metrics: newClusterMetrics(m.opts.Registerer), ctx: ctx, cancel: cancel,
		kick: make(chan struct{}, 1), groups: map[string]*ownedGroup{}, unowned: map[string]time.Time{}, announced: map[string]time.Time{}}
}

// start runs the lease and the reconciliation.
func (c *clusterRules) start() {
	c.wg.Add(2)
	go c.keepLease()
	go c.watch()
}

// close stops every group, then gives the lease up (its keys go at once,
// so other datanodes take the groups over without waiting for the TTL).
func (c *clusterRules) close() {
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	var stop []*ownedGroup
	for _, g := range c.groups {
		g.stopping = true
		stop = append(stop, g)
	}
	c.groups = map[string]*ownedGroup{}
	lease := c.lease
	c.mu.Unlock()
	for _, g := range stop {
		g.stop()
	}
	c.metrics.owned.Set(0)
	if lease != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = c.opts.Client.Revoke(ctx, lease)
	}
}

func (c *clusterRules) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// keepLease grants the rules lease and renews it every TTL/3, keeping
// validUntil: the send time of the last successful renewal plus the TTL.
// A lease found expired (this process was frozen, or etcd unreachable
// for longer than the TTL) is replaced by a new one; every group held
// under it is stopped.
func (c *clusterRules) keepLease() {
	defer c.wg.Done()
	ttl := int64(max(1, c.opts.Lease/time.Second))
	tick := time.NewTicker(c.opts.Lease / 3)
	defer tick.Stop()
	for {
		c.mu.Lock()
		lease := c.lease
		c.mu.Unlock()
		sent := time.Now()
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.Lease/3)
		if lease == 0 {
			resp, err := c.opts.Client.Grant(ctx, ttl)
			if err == nil {
				if _, err = c.opts.Client.Put(ctx, rulestore.NodesPrefix+c.opts.NodeID, c.opts.NodeID, clientv3.WithLease(resp.ID)); err != nil {
					_, _ = c.opts.Client.Revoke(ctx, resp.ID) // or it lives out its TTL
				}
			}
			if err == nil {
				c.mu.Lock()
				c.lease, c.validUntil = resp.ID, sent.Add(time.Duration(resp.TTL)*time.Second-c.opts.Lease/20)
				c.mu.Unlock()
				c.poke()
			} else if c.ctx.Err() == nil {
				c.m.opts.Logger.Warn("rules: cannot grant the rules lease", "err", err)
			}
		} else {
			resp, err := c.opts.Client.KeepAliveOnce(ctx, lease)
			switch {
			case err == nil && resp.TTL > 0:
				c.mu.Lock()
				if c.lease == lease {
					c.validUntil = sent.Add(time.Duration(resp.TTL)*time.Second - c.opts.Lease/20)
				}
				c.mu.Unlock()
			case errors.Is(err, rpctypes.ErrLeaseNotFound) || err == nil:
				c.m.opts.Logger.Warn("rules: the rules lease expired; the groups evaluated here are stopped", "lease", int64(lease))
				c.loseAll(lease)
				cancel()
				continue // grant a new one at once
			case c.ctx.Err() == nil:
				c.m.opts.Logger.Warn("rules: cannot renew the rules lease", "err", err)
			}
		}
		cancel()
		select {
		case <-c.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// loseAll stops every group held under lease, which expired.
func (c *clusterRules) loseAll(lease clientv3.LeaseID) {
	c.mu.Lock()
	if c.lease == lease {
		c.lease, c.validUntil = 0, time.Time{}
	}
	var stop []*ownedGroup
	for k, g := range c.groups {
		if g.lease == lease {
			g.stopping = true
			stop = append(stop, g)
			delete(c.groups, k)
		}
	}
	c.metrics.owned.Set(float64(len(c.groups)))
	c.mu.Unlock()
	for _, g := range stop {
		g.stop()
		c.metrics.changes.WithLabelValues("lost").Inc()
	}
}

// watch reconciles ownership whenever rules, owners or evaluators change,
// and every Resync.
func (c *clusterRules) watch() {
	defer c.wg.Done()
	tick := time.NewTicker(c.opts.Resync)
	defer tick.Stop()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(c.ctx))
	defer cancel()
	rules := c.opts.Client.Watch(wctx, rulestore.StorePrefix, clientv3.WithPrefix())
	for {
		if err := c.reconcile(); err != nil && c.ctx.Err() == nil {
			c.m.opts.Logger.Warn("rules: reconciling rule group ownership", "err", err)
		}
		select {
		case <-c.ctx.Done():
			return
		case <-tick.C:
		case <-c.kick:
		case _, ok := <-rules:
			if !ok {
				rules = c.opts.Client.Watch(wctx, rulestore.StorePrefix, clientv3.WithPrefix())
			}
		}
	}
}

type ownerKV struct {
	node  string
	lease clientv3.LeaseID
}

// reconcile reads the stored groups, their owners and the evaluators at
// one revision, and starts, updates, stops, claims and
// hands over groups accordingly.
func (c *clusterRules) reconcile() error {
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.Lease)
	defer cancel()
	resp, err := c.opts.Client.Txn(ctx).Then(clientv3.OpGet(rulestore.GroupsPrefix, clientv3.WithPrefix()), clientv3.OpGet(rulestore.OwnersPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(rulestore.NodesPrefix, clientv3.WithPrefix()), clientv3.OpGet(rulestore.TenantsPrefix, clientv3.WithPrefix())).Commit()
	if err != nil {
		return err
	}
	// Both maps are by group ID: the default tenant's relative keys, and
	// the other tenants' keys read as IDs.
	want := map[string][]byte{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		want[strings.TrimPrefix(string(kv.Key), rulestore.GroupsPrefix)] = kv.Value
	}
	owners := map[string]ownerKV{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		owners[strings.TrimPrefix(string(kv.Key), rulestore.OwnersPrefix)] = ownerKV{string(kv.Value), clientv3.LeaseID(kv.Lease)}
	}
	for _, kv := range resp.Responses[3].GetResponseRange().Kvs {
		id, owner, ok := rulestore.IDOfKey(strings.TrimPrefix(string(kv.Key), rulestore.TenantsPrefix))
		switch {
		case !ok:
			c.m.opts.Logger.Warn("rules: a key under the tenants' rules is no group's; skipped", "key", string(kv.Key))
		case owner:
			owners[id] = ownerKV{string(kv.Value), clientv3.LeaseID(kv.Lease)}
		default:
			want[id] = kv.Value
		}
	}
	// The evaluators, and those announced long enough to be handed groups.
	var live, settled []string
	seen := map[string]bool{}
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		id := string(kv.Value)
		inst := fmt.Sprintf("%s@%d", id, kv.CreateRevision)
		seen[inst] = true
		c.mu.Lock()
		since, ok := c.announced[inst]
		if !ok {
			since = time.Now()
			c.announced[inst] = since
		}
		c.mu.Unlock()
		live = append(live, id)
		if time.Since(since) >= 2*c.opts.Lease || id == c.opts.NodeID {
			settled = append(settled, id)
		}
	}
	c.mu.Lock()
	for inst := range c.announced {
		if !seen[inst] {
			delete(c.announced, inst)
		}
	}
	c.mu.Unlock()
	me := c.opts.NodeID
	now := time.Now()
	c.mu.Lock()
	lease, valid := c.lease, now.Before(c.validUntil)
	var stops []change
	var updates []*ownedGroup
	for key, g := range c.groups {
		o, held := owners[key]
		content, exists := want[key]
		switch {
		case !exists:
			stops = append(stops, change{g, "deleted", true})
		case !held || o.node != me || o.lease != g.lease || !valid:
			stops = append(stops, change{g, "lost", false})
		case preferred(key, live) != me && preferred(key, live) == preferred(key, settled):
			stops = append(stops, change{g, "released", true})
		case string(content) != string(g.content):
			g.content = content
			updates = append(updates, g)
		}
	}
	for _, s := range stops {
		s.g.stopping = true
		delete(c.groups, s.g.key)
	}
	var claims []string
	for key := range want {
		if _, running := c.groups[key]; running {
			continue
		}
		o, held := owners[key]
		if held {
			delete(c.unowned, key)
			if o.node != me {
				continue
			}
		} else if _, seen := c.unowned[key]; !seen {
			c.unowned[key] = now
		}
		if lease == 0 || !valid || stoppedHere(stops, key) {
			continue
		}
		p := preferred(key, live)
		switch {
		case held && (p == me || p == ""):
			// ours, not running: under this lease (stopped while the lease
			// was uncertain) or a previous run's (taken over)
			claims = append(claims, key)
		case !held && (p == me || p == "" || now.Sub(c.unowned[key]) > c.opts.Lease):
			claims = append(claims, key)
		}
	}
	for key := range c.unowned {
		if _, ok := want[key]; !ok {
			delete(c.unowned, key)
		}
	}
	c.mu.Unlock()

	// Every group taken out of c.groups is stopped, whatever etcd says
	// after: close finds only the groups left there.
	for _, s := range stops {
		s.g.stop()
		c.metrics.changes.WithLabelValues(s.why).Inc()
		c.m.opts.Logger.Info("rules: stopped evaluating a group", "group", s.g.key, "why", s.why)
	}
	for _, s := range stops {
		if s.drop {
			okey := rulestore.OwnersKeyOf(s.g.key)
			_, err := c.opts.Client.Txn(ctx).If(clientv3.Compare(clientv3.Value(okey), "=", me), clientv3.Compare(clientv3.LeaseValue(okey), "=", s.g.lease)).
				Then(clientv3.OpDelete(okey)).Commit()
			if err != nil {
				return err
			}
		}
	}
	for _, g := range updates {
		if err := g.update(c.m.opts.Interval, c.m.opts.ExternalURL, c.iterate(g.key)); err != nil {
			c.m.opts.Logger.Error("rules: a stored group cannot be loaded; the previous version keeps evaluating", "group", g.key, "err", err)
		}
	}
	for _, key := range claims {
		o, held := owners[key]
		okey := rulestore.OwnersKeyOf(key)
		var cmp clientv3.Cmp
		if held { // ours, under a lease of a previous run of this datanode
			cmp = clientv3.Compare(clientv3.LeaseValue(okey), "=", o.lease)
		} else {
			cmp = clientv3.Compare(clientv3.CreateRevision(okey), "=", 0)
		}
		r, err := c.opts.Client.Txn(ctx).If(cmp).Then(clientv3.OpPut(okey, me, clientv3.WithLease(lease))).Commit()
		if err != nil {
			return err
		}
		if !r.Succeeded {
			continue
		}
		if err := c.startGroup(key, want[key], lease); err != nil {
			c.m.opts.Logger.Error("rules: a stored group cannot be loaded", "group", key, "err", err)
		}
	}
	c.mu.Lock()
	c.metrics.owned.Set(float64(len(c.groups)))
	c.mu.Unlock()
	return nil
}

// change is a group stopped by reconcile.
type change struct {
	g    *ownedGroup
	why  string
	drop bool // delete the owner key after stopping
}

func stoppedHere(stops []change, key string) bool {
	for _, s := range stops {
		if s.g.key == key {
			return true
		}
	}
	return false
}

// preferred is the live datanode a group goes to (rendezvous hashing);
// empty when none is live.
func preferred(key string, live []string) string {
	best, bestH := "", uint64(0)
	for _, n := range live {
		h := sha256.New() // FNV spreads keys differing in their last bytes badly
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write([]byte(key))
		if v := binary.BigEndian.Uint64(h.Sum(nil)); best == "" || v > bestH || v == bestH && n < best {
			best, bestH = n, v
		}
	}
	return best
}

// owns reports whether this datanode may evaluate key's group now.
func (c *clusterRules) owns(key string, g *ownedGroup) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups[key] == g && !g.stopping && g.lease == c.lease && time.Now().Before(c.validUntil)
}

// startGroup starts a group this datanode now owns, key its ID.
func (c *clusterRules) startGroup(key string, content []byte, lease clientv3.LeaseID) error {
	t, ns, _, _ := rulestore.ParseID(key)
	gctx, cancel := context.WithCancel(c.ctx)
	g := &ownedGroup{key: key, tenant: t, lease: lease, content: content, cancel: cancel, running: make(chan struct{})}
	m := c.m
	ev := m.evalFor(t)
	inner := m.notifyFunc
	if t != tenant.Default {
		inner = tenantAlerts(t, inner)
	}
	g.mgr = promrules.NewManager(&promrules.ManagerOptions{
		ExternalURL: m.extURL,
		QueryFunc:   ev.queryFunc,
		NotifyFunc: func(ctx context.Context, expr string, alerts ...*promrules.Alert) {
			if !c.owns(key, g) {
				c.metrics.fenced.Inc()
				return
			}
			inner(ctx, expr, alerts...)
		},
		Context:         gctx,
		AppendableV2:    fencedAppendable{inner: ev.app, owns: func() bool { return c.owns(key, g) }, fenced: c.metrics.fenced},
		Queryable:       ev.queryable,
		Logger:          m.opts.Logger.With("component", "rules", "group", key),
		Metrics:         m.ruleMetrics,
		OutageTolerance: m.opts.OutageTolerance,
		ForGracePeriod:  m.opts.ForGracePeriod,
		ResendDelay:     m.opts.ResendDelay,
		Parser:          m.parser,
		GroupLoader:     storedLoader{g: g, c: c, parser: m.parser},
	})
	c.mu.Lock()
	if c.ctx.Err() != nil || c.lease != lease {
		c.mu.Unlock()
		cancel()
		return nil
	}
	c.groups[key] = g
	c.mu.Unlock()
	// The group's file is its namespace, qualified with a tenant other than
	// the default (stateOf shows the namespace): Prometheus keys its rule
	// metrics by file and name, and two tenants' groups of one name are two.
	if err := g.mgr.Update(m.opts.Interval, []string{tenant.Qualify(t, ns)}, labels.EmptyLabels(), m.opts.ExternalURL, c.iterate(key)); err != nil {
		c.mu.Lock()
		delete(c.groups, key)
		c.mu.Unlock()
		cancel()
		g.mgr.Stop()
		return err
	}
	go func() {
		defer close(g.running)
		g.mgr.Run()
	}()
	c.metrics.changes.WithLabelValues("gained").Inc()
	m.opts.Logger.Info("rules: evaluating a group", "group", key, "lease", int64(lease))
	return nil
}

// update loads a changed group's new content (its alerts' state kept).
func (g *ownedGroup) update(interval time.Duration, extURL string, iter promrules.GroupEvalIterationFunc) error {
	_, ns, _, _ := rulestore.ParseID(g.key)
	return g.mgr.Update(interval, []string{ns}, labels.EmptyLabels(), extURL, iter)
}

// stop ends the group's evaluation (an evaluation in flight is
// cancelled) without staleness markers.
func (g *ownedGroup) stop() {
	g.cancel()
	g.mgr.Stop()
	<-g.running
}

// iterate is each evaluation of the stored group of ID key: skipped unless this
// datanode owns it for certain. The first evaluation of a group gained
// here (not of a new version of a group already running here, which
// carries its alerts' state over) restores its alerts' `for` state before it writes anything: its
// alerting rules are evaluated (no result written), their active alerts'
// activeAt read back from ALERTS_FOR_STATE, and then the group evaluated
// as usual, so an alert that fired on the previous owner fires here from
// the first evaluation, without a pending period (Prometheus restores
// after the second evaluation, as after a restart).
func (c *clusterRules) iterate(key string) promrules.GroupEvalIterationFunc {
	return func(ctx context.Context, pg *promrules.Group, ts time.Time) { c.evaluate(ctx, key, pg, ts) }
}

func (c *clusterRules) evaluate(ctx context.Context, key string, pg *promrules.Group, ts time.Time) {
	c.mu.Lock()
	g := c.groups[key]
	c.mu.Unlock()
	if g == nil || !c.owns(key, g) {
		c.metrics.skipped.Inc()
		return
	}
	c.mu.Lock()
	first := !g.restored
	g.restored = true
	c.mu.Unlock()
	if first && pg.HasAlertingRules() {
		query := c.m.evalFor(g.tenant).queryFunc
		for _, ar := range pg.AlertingRules() {
			if _, err := ar.Eval(ctx, pg.QueryOffset(), ts, query, c.m.extURL, pg.Limit()); err != nil {
				pg.Logger().Warn("rules: evaluating an alerting rule to restore its state", "alert", ar.Name(), "err", err)
			}
		}
		pg.RestoreForState(time.Now())
	}
	promrules.DefaultEvalIterationFunc(ctx, pg, ts)
}

// storedLoader gives a group's manager the group's stored content.
// tenantAlerts sends tenant t's alerts with the label tenant.Label (as a
// federated read names a series' tenant): every tenant's alerts go to
// the same Alertmanager, which would otherwise take two tenants' alerts
// of one name and labels for one, resolving one when the other resolves.
// The rule's own alerts (and so ALERTS, in t's series) are left as they
// are: copies are sent.
func tenantAlerts(t string, send promrules.NotifyFunc) promrules.NotifyFunc {
	return func(ctx context.Context, expr string, alerts ...*promrules.Alert) {
		out := make([]*promrules.Alert, len(alerts))
		for i, a := range alerts {
			c := *a
			c.Labels = labels.NewBuilder(a.Labels).Set(tenant.Label, t).Labels()
			out[i] = &c
		}
		send(ctx, expr, out...)
	}
}

type storedLoader struct {
	g      *ownedGroup
	c      *clusterRules
	parser parser.Parser
}

func (l storedLoader) Load(identifier string, ignoreUnknownFields bool, scheme model.ValidationScheme) (*rulefmt.RuleGroups, []error) {
	l.c.mu.Lock()
	content := l.g.content
	l.c.mu.Unlock()
	rgs, errs := rulefmt.Parse(content, ignoreUnknownFields, scheme, l.parser, l.c.m.opts.Logger)
	for i := range errs {
		errs[i] = errors.Join(errors.New(identifier+":"), errs[i])
	}
	return rgs, errs
}

func (l storedLoader) Parse(query string) (parser.Expr, error) { return l.parser.ParseExpr(query) }

// fencedAppendable refuses a group's results once its ownership lapsed.
type fencedAppendable struct {
	inner  storage.AppendableV2
	owns   func() bool
	fenced prometheus.Counter
}

func (f fencedAppendable) AppenderV2(ctx context.Context) storage.AppenderV2 {
	return fencedAppender{AppenderV2: f.inner.AppenderV2(ctx), f: f}
}

type fencedAppender struct {
	storage.AppenderV2
	f fencedAppendable
}

func (a fencedAppender) Commit() error {
	if !a.f.owns() {
		a.f.fenced.Inc()
		_ = a.Rollback()
		return errNotOwner
	}
	return a.AppenderV2.Commit()
}

// runningGroup is a stored group running here, and its tenant.
type runningGroup struct {
	tenant string
	*promrules.Group
}

// running are the groups running here, for the API.
func (c *clusterRules) running() []runningGroup {
	c.mu.Lock()
	gs := make([]*ownedGroup, 0, len(c.groups))
	for _, g := range c.groups {
		gs = append(gs, g)
	}
	c.mu.Unlock()
	var out []runningGroup
	for _, g := range gs {
		for _, pg := range g.mgr.RuleGroups() {
			out = append(out, runningGroup{g.tenant, pg})
		}
	}
	return out
}
