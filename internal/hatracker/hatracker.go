// Package hatracker elects one replica of each HA Prometheus pair (Mimir's
// HA tracker): two Prometheus replicas scraping the same targets send the
// same series with the same cluster label and different replica labels,
// and only the elected replica's samples are stored.
//
// The elected replica of a cluster, and when it was last seen, is one etcd
// key, /strata/ha/<cluster>. A replica is elected when none is, or when the
// elected one has not been seen for longer than the failover timeout.
// Every change is a compare-and-swap on the key's ModRevision, so two
// nodes never elect different replicas. Each node caches the key and reads
// it again (writing the elected replica's last-seen time) at most every
// update interval, which bounds etcd's traffic to one read and one write
// per cluster and node per interval.
package hatracker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stratadb/strata/internal/tenant"
)

// Prefix is where the elected replicas are kept, under Strata's /strata/
// (internal/cluster's Prefix).
const Prefix = "/strata/ha/"

// Defaults.
const (
	DefaultReplicaLabel    = "__replica__"
	DefaultFailoverTimeout = 30 * time.Second // Mimir's
	DefaultMaxClusters     = 100
	// maxUpdateInterval bounds the update interval (Mimir's
	// update_timeout is 15s against its 30s failover timeout).
	maxUpdateInterval = 5 * time.Second
)

// Config turns deduplication on (ClusterLabel set).
type Config struct {
	// ClusterLabel names a pair's cluster (e.g. "cluster"); empty: off.
	ClusterLabel string
	// ReplicaLabel names the replica (default DefaultReplicaLabel); it is
	// removed from the series stored.
	ReplicaLabel string
	// FailoverTimeout: how long the elected replica may go unseen before
	// another is elected (default DefaultFailoverTimeout).
	FailoverTimeout time.Duration
	// MaxClusters bounds the clusters elected in etcd (their keys), so
	// that a sender cannot make etcd's keys grow without bound (default
	// DefaultMaxClusters; negative: no bound). Concurrent first requests
	// of new clusters on several nodes may pass it by a few.
	MaxClusters int
	// UpdateInterval: how long a node decides from its cached election
	// before it reads etcd again (default a quarter of the failover
	// timeout, at most 5s). Tests shorten it.
	UpdateInterval time.Duration
}

// AddFlags adds --ha-cluster-label, --ha-replica-label and
// --ha-failover-timeout.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.ClusterLabel, "ha-cluster-label", "", "deduplicate HA Prometheus pairs: the label naming a pair's cluster, e.g. cluster; of each cluster only the elected replica's samples are stored (docs/ha-pairs.md; empty: off)")
	fs.StringVar(&c.ReplicaLabel, "ha-replica-label", DefaultReplicaLabel, "the label naming an HA pair's replica, removed from the series stored")
	fs.IntVar(&c.MaxClusters, "ha-max-clusters", DefaultMaxClusters, "most HA clusters elected of each tenant (etcd keys under /strata/ha/); a request of a new cluster past it is refused, 400 (negative: no bound)")
	fs.DurationVar(&c.FailoverTimeout, "ha-failover-timeout", DefaultFailoverTimeout, "how long a cluster's elected replica may go unseen before another of its replicas is elected")
}

// Enabled says whether deduplication is on.
func (c Config) Enabled() bool { return c.ClusterLabel != "" }

// WithDefaults fills the defaults in.
func (c Config) WithDefaults() Config {
	if c.ReplicaLabel == "" {
		c.ReplicaLabel = DefaultReplicaLabel
	}
	if c.FailoverTimeout <= 0 {
		c.FailoverTimeout = DefaultFailoverTimeout
	}
	if c.MaxClusters == 0 {
		c.MaxClusters = DefaultMaxClusters
	}
	if c.UpdateInterval <= 0 {
		c.UpdateInterval = min(c.FailoverTimeout/4, maxUpdateInterval)
	}
	return c
}

// Check refuses a configuration that cannot work.
func (c Config) Check() error {
	if !c.Enabled() {
		return nil
	}
	c = c.WithDefaults()
	if c.ClusterLabel == "__name__" || c.ReplicaLabel == "__name__" {
		return errors.New("the HA cluster and replica labels cannot be __name__")
	}
	if c.ClusterLabel == c.ReplicaLabel {
		return fmt.Errorf("the HA cluster and replica labels are both %q", c.ClusterLabel)
	}
	if c.UpdateInterval >= c.FailoverTimeout {
		return fmt.Errorf("the HA failover timeout (%v) must be longer than the update interval (%v)", c.FailoverTimeout, c.UpdateInterval)
	}
	return nil
}

// ErrTooManyClusters refuses a request of a new cluster past MaxClusters.
var ErrTooManyClusters = errors.New("too many HA clusters")

// record is a cluster's key's value.
type record struct {
	Replica string `json:"replica"`
	// Seen is when the replica was last seen (Unix milliseconds, the
	// clock of the node that saw it).
	Seen int64 `json:"seen"`
}

// entry is a node's cache of one cluster's key.
type entry struct {
	mu      sync.Mutex // held across a refresh from etcd
	rec     record
	fetched time.Time // when rec was read from (or written to) etcd
}

// Tracker decides which replica of a cluster is accepted.
type Tracker struct {
	cli *clientv3.Client
	cfg Config
	now func() time.Time

	mu       sync.Mutex
	clusters map[string]*entry

	dropped, changes prometheus.Counter
}

// New is a tracker over cli; cfg must be enabled.
func New(cli *clientv3.Client, cfg Config) (*Tracker, error) {
	if !cfg.Enabled() {
		return nil, errors.New("hatracker: no cluster label")
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	return &Tracker{cli: cli, cfg: cfg.WithDefaults(), now: time.Now, clusters: map[string]*entry{},
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_ha_samples_dropped_total",
			Help: "Samples of HA pairs dropped because their replica was not the elected one of its cluster."}),
		changes: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_ha_elected_replica_changes_total",
			Help: "Elections this node wrote: a cluster's first replica, or another after a failover timeout."}),
	}, nil
}

// Config is the tracker's configuration, defaults filled in.
func (t *Tracker) Config() Config { return t.cfg }

// Collectors are the tracker's metrics.
func (t *Tracker) Collectors() []prometheus.Collector {
	return []prometheus.Collector{t.dropped, t.changes}
}

// Dropped counts n samples dropped as another replica's.
func (t *Tracker) Dropped(n int) { t.dropped.Add(float64(n)) }

// Accept says whether a request of cluster's replica is to be stored: it
// is if replica is (or is now) the elected one. An error is etcd's: the
// request is to be retried.
func (t *Tracker) Accept(ctx context.Context, cluster, replica string) (bool, error) {
	t.mu.Lock()
	e := t.clusters[cluster]
	if e == nil {
		e = &entry{}
		t.clusters[cluster] = e
	}
	t.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fetched.IsZero() {
		// Unknown yet: not kept if it stays so (a refused cluster).
		defer func() {
			if e.fetched.IsZero() {
				t.mu.Lock()
				if t.clusters[cluster] == e {
					delete(t.clusters, cluster)
				}
				t.mu.Unlock()
			}
		}()
	}
	now := t.now()
	if !e.fetched.IsZero() && now.Sub(e.fetched) < t.cfg.UpdateInterval {
		if e.rec.Replica == replica {
			return true, nil
		}
		if now.Sub(time.UnixMilli(e.rec.Seen)) <= t.cfg.FailoverTimeout {
			return false, nil
		}
		// The elected replica may have failed: see etcd.
	}
	return t.refresh(ctx, e, cluster, replica, now)
}

// tenantOf is the tenant of a cluster's key (tenant.Qualify's name) and
// the prefix of that tenant's keys: the limit of clusters is a tenant's
// (as Mimir's ha_max_clusters), so one tenant's clusters never refuse
// another's. The default tenant's keys are the rest of Prefix.
func tenantOf(cluster string) (string, string) {
	if !strings.HasPrefix(cluster, tenant.QualifierPrefix) {
		return tenant.Default, Prefix
	}
	tn := tenant.Of(cluster)
	if tn == tenant.Default {
		return tn, Prefix // a default tenant's name that looks qualified (tenant.Qualify)
	}
	return tn, Prefix + tenant.QualifierPrefix + tn + "/"
}

// elected counts the clusters with a key under prefix; under Prefix, the
// default tenant's: all, but those of other tenants.
func (t *Tracker) elected(ctx context.Context, prefix string) (int64, error) {
	count := func(p string) (int64, error) {
		n, err := t.cli.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return 0, fmt.Errorf("HA tracker: count %s: %w", p, err)
		}
		return n.Count, nil
	}
	n, err := count(prefix)
	if err != nil || prefix != Prefix {
		return n, err
	}
	qualified, err := count(Prefix + tenant.QualifierPrefix)
	if err != nil {
		return 0, err
	}
	defaults, err := count(Prefix + tenant.QualifierPrefix + tenant.Default + "/")
	if err != nil {
		return 0, err
	}
	return n - qualified + defaults, nil
}

// refresh reads cluster's key and, if replica is to be elected or is the
// elected one not written as seen for an update interval, writes it, in a
// compare-and-swap on the key's ModRevision (read again when it fails).
func (t *Tracker) refresh(ctx context.Context, e *entry, cluster, replica string, now time.Time) (bool, error) {
	key := Prefix + cluster
	resp, err := t.cli.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("HA tracker: read %s: %w", key, err)
	}
	kvs := resp.Kvs
	for {
		var cur record
		var mod int64
		if len(kvs) > 0 {
			if err := json.Unmarshal(kvs[0].Value, &cur); err != nil {
				return false, fmt.Errorf("HA tracker: %s: %w", key, err)
			}
			mod = kvs[0].ModRevision
		}
		seen := time.UnixMilli(cur.Seen)
		accept, write := false, false
		switch {
		case mod == 0 || cur.Replica != replica && now.Sub(seen) > t.cfg.FailoverTimeout:
			accept, write = true, true // elect replica
		case cur.Replica == replica:
			accept, write = true, now.Sub(seen) >= t.cfg.UpdateInterval
		}
		if !write {
			e.rec, e.fetched = cur, now
			return accept, nil
		}
		if mod == 0 && t.cfg.MaxClusters > 0 {
			tn, prefix := tenantOf(cluster)
			n, err := t.elected(ctx, prefix)
			if err != nil {
				return false, err
			}
			if n >= int64(t.cfg.MaxClusters) {
				return false, fmt.Errorf("%w: tenant %s has %d elected, --ha-max-clusters is %d (delete the keys of its clusters gone under %s)", ErrTooManyClusters, tn, n, t.cfg.MaxClusters, prefix)
			}
		}
		next := record{Replica: replica, Seen: now.UnixMilli()}
		val, _ := json.Marshal(next)
		tx, err := t.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", mod)).
			Then(clientv3.OpPut(key, string(val))).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return false, fmt.Errorf("HA tracker: write %s: %w", key, err)
		}
		if tx.Succeeded {
			if cur.Replica != replica {
				t.changes.Inc()
			}
			e.rec, e.fetched = next, now
			return true, nil
		}
		// Another node wrote first: decide again from what it wrote.
		kvs = tx.Responses[0].GetResponseRange().Kvs
	}
}
