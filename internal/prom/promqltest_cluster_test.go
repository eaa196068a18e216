package prom_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/storage"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// clusterDatanodes is how many datanodes each cluster of
// TestUpstreamPromQLTestsOnACluster has: every table a write creates gets
// one region on each.
const clusterDatanodes = 3

// Prometheus' own PromQL test files, as TestUpstreamPromQLTests runs them,
// against a cluster of three datanodes, a new one for each section of a
// file (as the standalone is): each load is written through dn1, whose
// write path forwards the shares of the regions dn2 and dn3 own to them,
// and flushed on every datanode; every eval asks dn1, which reads the
// regions dn2 and dn3 own over the network (ScanColumns), with the range
// functions of a query the API would roll up in the scan (RollupSafe)
// rolled up by the regions' owners. The test checks that every table has
// a region on each datanode, and that each file's writes and scans did
// cross the network (the bytes dn1 exchanged with its peers) and, over
// the run, that owners sent rolled-up columns. The files and sections
// run are TestUpstreamPromQLTests' (skipped, supported).
//
// Nothing is random: the tables are created in the order of their names
// (appender.Commit), so each series is in the same region, on the same
// datanode, every run. It takes about 40 s on two cores, less than the
// standalone's run (about 100 s): most of a start is its embedded etcd's
// election, and etcds start ahead here, in the background.
func TestUpstreamPromQLTestsOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster per test file section")
	}
	// An embedded etcd takes most of a cluster's start (its election):
	// three start ahead while sections run.
	etcds := clustertest.NewEtcdPool(t, 3)
	engine := rollupEngine{promqltest.NewTestEngine(t, false, 0, 50_000_000)}
	var total remoteCounts
	eachUpstreamFile(t, func(t *testing.T, content string) {
		var file remoteCounts
		loaded := false
		promqltest.RunTestWithStorage(t, content, engine, func(tb testing.TB) storage.Storage {
			var counts remoteCounts
			var dn1 sync.Once // the first engine tuned is dn1's
			c := servertest.StartCluster(tb, clusterDatanodes, servertest.ClusterOptions{Etcd: etcds.Get,
				Tune: func(o *datanode.Options) { dn1.Do(func() { o.Remote = countingRemote{Remote: o.Remote, c: &counts} }) }})
			dns := c.Datanodes
			s := &strataStorage{Queryable: &prom.Queryable{Engine: dns[0].Engine()}}
			for _, dn := range dns {
				s.nodes = append(s.nodes, dn.Engine())
			}
			s.close = func() error {
				tables := dns[0].Engine().Tables()
				if len(tables) > 0 {
					loaded = true
					spread(tb, dns, tables)
				}
				counts.forwarded.Store(int64(servertest.PeerBytes(tb, dns[0], "sent", "Write")))
				counts.received.Store(int64(servertest.PeerBytes(tb, dns[0], "received", "/ScanColumns")))
				file.add(&counts)
				c.Stop()
				return nil
			}
			return s
		})
		t.Logf("through dn1: %s", &file)
		if loaded && (file.forwarded.Load() == 0 || file.scans.Load() == 0 || file.received.Load() == 0) {
			t.Errorf("the file's data did not cross the network: %s", &file)
		}
		total.add(&file)
	})
	t.Logf("through dn1, in all: %s", &total)
	if total.rolled.Load() == 0 {
		t.Errorf("no owner rolled up a column: %s", &total)
	}
}

// spread fails the test unless the rows of every one of tables are in
// regions on every datanode of dns (a logical table's rows are in
// LinesTable's regions): regions are placed in the background, so it waits
// for them to open.
func spread(t testing.TB, dns []*server.Server, tables []catalog.Table) {
	t.Helper()
	e := dns[0].Engine()
	for _, tb := range tables {
		phys := tb
		if tb.Logical {
			var err error
			if phys, err = e.Table(catalog.LinesTable); err != nil {
				t.Fatal(err)
			}
		}
		for deadline := time.Now().Add(30 * time.Second); ; {
			var hosted [][]layout.RegionID
			on, open := 0, 0
			for _, dn := range dns {
				var mine []layout.RegionID
				for _, id := range dn.Engine().Hosted() {
					if id.Table == phys.ID {
						mine = append(mine, id)
					}
				}
				hosted = append(hosted, mine)
				open += len(mine)
				if len(mine) > 0 {
					on++
				}
			}
			if open == int(phys.Regions) && on == len(dns) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("table %s (rows in %s, %d regions): not on every datanode: %v", tb.Name, phys.Name, phys.Regions, hosted)
			}
			time.Sleep(20 * time.Millisecond) // the agents open regions in the background
		}
	}
}

// remoteCounts are what dn1 read of, and wrote to, the regions other
// datanodes own.
type remoteCounts struct {
	scans     atomic.Int64 // column scans of a region another datanode owns
	rolled    atomic.Int64 // columns that came back rolled up by their owner
	rows      atomic.Int64 // scans of rows of a region another datanode owns
	forwarded atomic.Int64 // bytes of writes sent to owners
	received  atomic.Int64 // bytes of ScanColumns messages received
}

func (c *remoteCounts) add(o *remoteCounts) {
	c.scans.Add(o.scans.Load())
	c.rolled.Add(o.rolled.Load())
	c.rows.Add(o.rows.Load())
	c.forwarded.Add(o.forwarded.Load())
	c.received.Add(o.received.Load())
}

func (c *remoteCounts) String() string {
	return fmt.Sprintf("%d bytes of writes forwarded; %d remote column scans (%d bytes received, %d columns rolled up by their owner), %d remote scans of rows",
		c.forwarded.Load(), c.scans.Load(), c.received.Load(), c.rolled.Load(), c.rows.Load())
}

// countingRemote counts a datanode's reads of regions other datanodes own
// (its engine reads those hosted here itself).
type countingRemote struct {
	datanode.Remote
	c *remoteCounts
}

func (r countingRemote) ScanColumns(ctx context.Context, table string, id layout.RegionID, req scan.Request, emit func(*scan.Column) error) error {
	r.c.scans.Add(1)
	return r.Remote.ScanColumns(ctx, table, id, req, func(c *scan.Column) error {
		if c.Rolled {
			r.c.rolled.Add(1)
		}
		return emit(c)
	})
}

func (r countingRemote) Scan(ctx context.Context, table string, id layout.RegionID, req scan.Request) (row.Iterator, error) {
	r.c.rows.Add(1)
	return r.Remote.Scan(ctx, table, id, req)
}

// rollupEngine evaluates a query as the API does (API.plan): with the
// range functions of a query RollupSafe passes rolled up in the scan, by
// the regions' owners.
type rollupEngine struct{ promql.QueryEngine }

var testParser = parser.NewParser(promqltest.TestParserOpts)

func (e rollupEngine) NewInstantQuery(ctx context.Context, q storage.Queryable, opts promql.QueryOpts, qs string, ts time.Time) (promql.Query, error) {
	return e.QueryEngine.NewInstantQuery(ctx, rollups(q, qs), opts, qs, ts)
}

func (e rollupEngine) NewRangeQuery(ctx context.Context, q storage.Queryable, opts promql.QueryOpts, qs string, start, end time.Time, interval time.Duration) (promql.Query, error) {
	return e.QueryEngine.NewRangeQuery(ctx, rollups(q, qs), opts, qs, start, end, interval)
}

// rollups is q asking for rollups if qs is RollupSafe.
func rollups(q storage.Queryable, qs string) storage.Queryable {
	s, ok := q.(*strataStorage)
	if !ok {
		return q
	}
	expr, err := testParser.ParseExpr(qs)
	if err != nil || !prom.RollupSafe(expr) {
		return q // a bad expression fails in the engine, with its message
	}
	r := *s.Queryable
	r.Rollups = true
	return &r
}
