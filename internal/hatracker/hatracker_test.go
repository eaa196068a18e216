package hatracker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/tenant"
)

// clock is a settable time for trackers.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTracker(t *testing.T, cfg Config, c *clock) *Tracker {
	t.Helper()
	cli := clustertest.Etcd(t)
	tr, err := New(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr.now = c.now
	return tr
}

func accept(t *testing.T, tr *Tracker, cluster, replica string) bool {
	t.Helper()
	ok, err := tr.Accept(context.Background(), cluster, replica)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestFailover: the first replica seen is elected; the other is refused
// while the elected one is seen; once it has gone unseen for longer than
// the failover timeout, the other is elected, and the first is refused.
func TestFailover(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	tr := newTracker(t, Config{ClusterLabel: "cluster", FailoverTimeout: 10 * time.Second, UpdateInterval: time.Second}, c)
	if !accept(t, tr, "c1", "a") || accept(t, tr, "c1", "b") {
		t.Fatal("a not elected first")
	}
	if !accept(t, tr, "c2", "b") {
		t.Fatal("clusters are not apart")
	}
	// a keeps being seen for longer than the timeout: it stays elected,
	// its last-seen time written every update interval.
	for range 30 {
		c.add(time.Second)
		if !accept(t, tr, "c1", "a") || accept(t, tr, "c1", "b") {
			t.Fatal("a lost its election while seen")
		}
	}
	// a stops; b is refused until the timeout has passed.
	c.add(9 * time.Second)
	if accept(t, tr, "c1", "b") {
		t.Fatal("b elected before the timeout")
	}
	c.add(2 * time.Second)
	if !accept(t, tr, "c1", "b") {
		t.Fatal("b not elected after the timeout")
	}
	if accept(t, tr, "c1", "a") {
		t.Fatal("a still accepted after b was elected")
	}
	if got := testutil.ToFloat64(tr.changes); got != 3 {
		t.Errorf("elections = %v, want 3 (c1: a then b; c2: b)", got)
	}
}

// TestTwoNodesAgree: two trackers (two nodes) over one etcd, each asked at
// once by several replicas of the same clusters: every cluster elects one
// replica, which both nodes accept and no other.
func TestTwoNodesAgree(t *testing.T) {
	cli := clustertest.Etcd(t)
	cfg := Config{ClusterLabel: "cluster", FailoverTimeout: time.Minute}
	var nodes [2]*Tracker
	for i := range nodes {
		var err error
		if nodes[i], err = New(cli, cfg); err != nil {
			t.Fatal(err)
		}
	}
	const clusters, replicas = 20, 4
	var accepted [clusters][replicas]atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for c := range clusters {
		for r := range replicas {
			for n, node := range nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ok, err := node.Accept(context.Background(), fmt.Sprint("c", c), fmt.Sprint("r", (r+n)%replicas))
					if err != nil {
						t.Error(err)
					} else if ok {
						accepted[c][(r+n)%replicas].Add(1)
					}
				}()
			}
		}
	}
	close(start)
	wg.Wait()
	for c := range clusters {
		elected := -1
		for r := range replicas {
			if accepted[c][r].Load() == 0 {
				continue
			}
			if elected >= 0 {
				t.Fatalf("cluster c%d: replicas r%d and r%d both accepted", c, elected, r)
			}
			elected = r
		}
		if elected < 0 {
			t.Fatalf("cluster c%d: no replica accepted", c)
		}
		// Both nodes, asked again, agree.
		for n, node := range nodes {
			for r := range replicas {
				if ok := accept(t, node, fmt.Sprint("c", c), fmt.Sprint("r", r)); ok != (r == elected) {
					t.Errorf("cluster c%d node %d: r%d accepted %v, elected r%d", c, n, r, ok, elected)
				}
			}
		}
	}
	if got := testutil.ToFloat64(nodes[0].changes) + testutil.ToFloat64(nodes[1].changes); got != clusters {
		t.Errorf("elections = %v, want %d", got, clusters)
	}
}

// TestMaxClusters: a new cluster past MaxClusters is refused, and not
// kept; the elected ones go on.
func TestMaxClusters(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	tr := newTracker(t, Config{ClusterLabel: "cluster", MaxClusters: 2}, c)
	if !accept(t, tr, "c1", "a") || !accept(t, tr, "c2", "a") {
		t.Fatal("first clusters refused")
	}
	if _, err := tr.Accept(context.Background(), "c3", "a"); !errors.Is(err, ErrTooManyClusters) {
		t.Fatalf("a third cluster: %v, want ErrTooManyClusters", err)
	}
	if len(tr.clusters) != 2 {
		t.Errorf("%d clusters kept, want 2", len(tr.clusters))
	}
	c.add(time.Minute)
	if !accept(t, tr, "c1", "a") || accept(t, tr, "c1", "b") {
		t.Fatal("an elected cluster refused")
	}
	// The limit is a tenant's: the default tenant's two clusters refuse
	// no other tenant's, and tenant x's refuse neither y's nor the
	// default's new ones beyond its own.
	x1, x2, x3 := tenant.Qualify("x", "c1"), tenant.Qualify("x", "c2"), tenant.Qualify("x", "c3")
	if !accept(t, tr, x1, "a") || !accept(t, tr, x2, "a") {
		t.Fatal("tenant x's first clusters refused for the default tenant's")
	}
	_, err := tr.Accept(context.Background(), x3, "a")
	if !errors.Is(err, ErrTooManyClusters) || !strings.Contains(err.Error(), "tenant x has 2") {
		t.Fatalf("tenant x's third cluster: %v, want ErrTooManyClusters naming tenant x", err)
	}
	if !accept(t, tr, tenant.Qualify("y", "c1"), "a") {
		t.Fatal("tenant y's first cluster refused for the others'")
	}
	if _, err := tr.Accept(context.Background(), "c3", "a"); !errors.Is(err, ErrTooManyClusters) || !strings.Contains(err.Error(), "tenant default has 2") {
		t.Fatalf("the default tenant's third cluster: %v, want ErrTooManyClusters naming it", err)
	}
	// A default tenant's cluster named like a qualified one is the
	// default tenant's, and counts with its others.
	if _, err := tr.Accept(context.Background(), tenant.Qualify(tenant.Default, "__t/x/c9"), "a"); !errors.Is(err, ErrTooManyClusters) || !strings.Contains(err.Error(), "tenant default has 2") {
		t.Fatalf("the default tenant's cluster __t/x/c9: %v, want ErrTooManyClusters naming it", err)
	}
}

func TestCheck(t *testing.T) {
	for _, cfg := range []Config{
		{ClusterLabel: "x", ReplicaLabel: "x"},
		{ClusterLabel: "__name__"},
		{ClusterLabel: "c", FailoverTimeout: time.Second, UpdateInterval: 2 * time.Second},
	} {
		if cfg.Check() == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	if (Config{}).Check() != nil || (Config{ClusterLabel: "cluster"}).Check() != nil {
		t.Error("a good configuration refused")
	}
}
