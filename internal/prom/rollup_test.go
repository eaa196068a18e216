package prom_test

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/rollup"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/testseed"
)

// TestRollupsMatchEngine: range functions computed in the scan give the
// engine's own results to the bit, for range and instant queries, with
// steps from the range up, under aggregations and in binary expressions,
// over series with irregular and sub-millisecond timestamps, sums that
// overflow and overwrites, in files and memtables: over a table whose
// files hold apart stretches of time (rolled up as its columns come) and
// one whose files overlap (read again, keeping every sample). Queries that
// cannot be rolled up (steps under the range, other functions) must match
// too, and RollupSafe must refuse subqueries, @ and offsets.
func TestRollupsMatchEngine(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewSource(seed))
	ctx := context.Background()
	e := servertest.Start(t, objstoretest.Mem(t), servertest.Options{}).Engine()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Strata stores finite floats only; huge ones overflow a sum, which
	// avg_over_time then takes incrementally.
	special := []float64{1e308, -1e308, 1.7e308, 5e-324}
	point := func(ts, notBefore time.Time) row.Point {
		if rng.Intn(3) == 0 && !ts.Truncate(10*time.Second).Before(notBefore) {
			ts = ts.Truncate(10 * time.Second)
		}
		v := float64(rng.Intn(1000)) / 10
		if rng.Intn(40) == 0 {
			v = special[rng.Intn(len(special))]
		}
		return row.Point{Tags: []row.Tag{{Name: "host", Value: fmt.Sprint("h", rng.Intn(5))}}, TS: ts.UnixNano(),
			Fields: []row.Field{{Name: "v", Value: row.FloatValue(v)}}}
	}
	// Table m: each flush spans the whole half hour, so a series' columns
	// come out of time order and the scan keeps every sample. Table n:
	// flush k holds the k-th stretch of time (its bounds off the
	// millisecond, with a sample either side of each in one millisecond),
	// so columns come in order and are rolled up as they come.
	bound := func(k int) time.Time {
		return base.Add(time.Duration(k)*5*time.Minute + time.Duration(k)*400*time.Microsecond)
	}
	for step := range 6 {
		var m, n []row.Point
		for range 400 {
			m = append(m, point(base.Add(time.Duration(rng.Int63n(int64(30*time.Minute)))), base))
			n = append(n, point(bound(step).Add(time.Duration(rng.Int63n(int64(bound(step+1).Sub(bound(step)))))), bound(step)))
		}
		edge := func(ts time.Time) row.Point {
			return row.Point{Tags: []row.Tag{{Name: "host", Value: "h0"}}, TS: ts.UnixNano(), Fields: []row.Field{{Name: "v", Value: row.FloatValue(float64(step))}}}
		}
		n = append(n, edge(bound(step+1).Add(-100*time.Nanosecond)))
		if step > 0 {
			n = append(n, edge(bound(step).Add(100*time.Nanosecond)))
		}
		for table, pts := range map[string][]row.Point{"m": m, "n": n} {
			if _, err := e.Write(ctx, table, pts, datanode.WriteOptions{CreateTable: true}); err != nil {
				t.Fatal(err)
			}
			if step < 4 {
				if err := e.Flush(ctx, table); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e7, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	plain := &prom.Queryable{Engine: e}
	rolled := &prom.Queryable{Engine: e, Rollups: true}
	p := parser.NewParser(parser.Options{})
	funcs := []string{"avg_over_time", "sum_over_time", "min_over_time", "max_over_time", "last_over_time", "count_over_time"}
	ranges := []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 3 * time.Minute}
	aggs := []string{"sum", "avg", "min", "max", "count"}
	rolledUp, inOrder, direct := 0, 0, 0
	for range 300 {
		f, r := funcs[rng.Intn(len(funcs))], ranges[rng.Intn(len(ranges))]
		metric := []string{"m_v", "n_v"}[rng.Intn(2)]
		inner := fmt.Sprintf("%s(%s[%s])", f, metric, promDuration(r))
		agg := aggs[rng.Intn(len(aggs))]
		expr := []string{inner, agg + " by (host) (" + inner + ")", agg + "(" + inner + ")", "(" + agg + " by (host, nope) ((" + inner + ")))", inner + " - " + inner}[rng.Intn(5)]
		parsed, err := p.ParseExpr(expr)
		if err != nil || !prom.RollupSafe(parsed) {
			t.Fatalf("%s: %v, safe %v", expr, err, err == nil)
		}
		// Half the queries step on the 10 s grid a third of the samples
		// are on, so windows' edges fall on samples.
		start := base.Add(time.Duration(rng.Int63n(int64(20 * time.Minute)))).Truncate([]time.Duration{time.Millisecond, 10 * time.Second}[rng.Intn(2)])
		step := time.Duration(float64(r) * []float64{1, 1, 2, 3.5, 0.5}[rng.Intn(5)])
		end := start.Add(time.Duration(rng.Intn(20)) * step)
		instant := rng.Intn(4) == 0
		// The result is rendered before the query is closed: closing hands
		// its points back to the engine's pools.
		run := func(q storage.Queryable) string {
			var qry promql.Query
			if instant {
				qry, err = engine.NewInstantQuery(ctx, q, nil, expr, end)
			} else {
				qry, err = engine.NewRangeQuery(ctx, q, nil, expr, start, end, step)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer qry.Close()
			res := qry.Exec(ctx)
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			switch v := res.Value.(type) {
			case promql.Matrix:
				return prom.RenderBits(v)
			case promql.Vector:
				m := promql.Matrix{}
				for _, s := range v {
					m = append(m, promql.Series{Metric: s.Metric, Floats: []promql.FPoint{{T: s.T, F: s.F}}})
				}
				slices.SortFunc(m, func(a, b promql.Series) int { return labels.Compare(a.Metric, b.Metric) })
				return prom.RenderBits(m)
			}
			t.Fatalf("%s: a %T", expr, res.Value)
			return ""
		}
		want := run(plain)
		rescans := rollup.Rescans()
		if got := run(rolled); want != got {
			t.Fatalf("%s from %s to %s step %s (instant %v):\nrolled up %s\nengine    %s", expr, start, end, step, instant, got, want)
		}
		// The API evaluates aggregations of rollups itself.
		if m, ok, err := prom.EvalDirect(ctx, rolled, parsed, start, end, step); err != nil {
			t.Fatalf("%s: %v", expr, err)
		} else if ok && !instant {
			if got := prom.RenderBits(m); got != want {
				t.Fatalf("%s from %s to %s step %s:\nwithout the engine %s\nengine             %s", expr, start, end, step, got, want)
			}
			direct++
		}
		if f != "count_over_time" && (step >= r || instant) {
			rolledUp++
			if rescanned := rollup.Rescans() > rescans; metric == "n_v" && rescanned {
				t.Fatalf("%s: table n's columns came out of time order", expr)
			} else if metric == "n_v" {
				inOrder++
			}
		}
	}
	if rolledUp < 75 || inOrder < 25 || direct < 30 {
		t.Fatalf("only %d of 300 queries could be rolled up, %d as their columns came, %d evaluated without the engine", rolledUp, inOrder, direct)
	}
	if rollup.Rescans() == 0 {
		t.Fatal("no scan of table m was read again for columns out of time order")
	}
	// The scan hands over one sample a window, not every sample.
	qr, _ := rolled.Querier(base.UnixMilli(), base.Add(time.Hour).UnixMilli())
	hints := &storage.SelectHints{Start: base.UnixMilli() - 60_000 + 1, End: base.Add(30 * time.Minute).UnixMilli(), Step: 60_000, Range: 60_000, Func: "avg_over_time"}
	ss := qr.Select(ctx, false, hints, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "m_v"))
	var it chunkenc.Iterator
	for ss.Next() {
		n := 0
		for it = ss.At().Iterator(it); it.Next() != chunkenc.ValNone; n++ {
		}
		if n > 31 {
			t.Fatalf("%s: %d samples for 31 windows", ss.At().Labels(), n)
		}
	}
	for _, unsafe := range []string{"avg_over_time(m_v[1m:10s])", "avg_over_time(m_v[1m] offset 5m)", "avg_over_time(m_v[1m] @ 100)", "avg_over_time(m_v[1m] @ end())", "max(m_v offset -1m)"} {
		if parsed, err := p.ParseExpr(unsafe); err != nil || prom.RollupSafe(parsed) {
			t.Fatalf("%s: %v, safe", unsafe, err)
		}
	}
}

// promDuration formats a duration as PromQL does (10s, 1m, 3m).
func promDuration(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return fmt.Sprintf("%ds", d/time.Second)
}
