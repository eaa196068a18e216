//go:build enginecompare

package prom_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	thanos "github.com/thanos-io/promql-engine/engine"

	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/tsbs"
)

// BenchmarkEngineCompare (build tag enginecompare and STRATA_ENGINE_COMPARE=1;
// scripts/engine-compare.sh adds the Thanos module for the run): Prometheus' engine, as
// Strata runs it (range functions rolled up in the scan where RollupSafe
// allows, and the API's engine-less path where planDirect takes the
// query), against the Thanos PromQL engine (github.com/thanos-io/promql-engine,
// local mode) over the same Queryable, with and without rollups. TSBS
// cpu-only rows, $STRATA_COMPARE_HOSTS hosts (default 1000) for 12 hours,
// flushed and compacted on file://. Every engine's answer is checked
// against the upstream engine's over raw samples before anything is timed.
// docs/design-decisions.md, "Distributing PromQL".
func BenchmarkEngineCompare(b *testing.B) {
	if os.Getenv("STRATA_ENGINE_COMPARE") == "" {
		b.Skip("set STRATA_ENGINE_COMPARE=1")
	}
	hosts := 1000
	if s := os.Getenv("STRATA_COMPARE_HOSTS"); s != "" {
		var err error
		if hosts, err = strconv.Atoi(s); err != nil || hosts < 8 {
			b.Fatalf("STRATA_COMPARE_HOSTS=%q", s)
		}
	}
	const hours = 12
	ctx := context.Background()
	store, err := objstore.Open(ctx, "file://"+b.TempDir(), objstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	node := servertest.Start(b, store, servertest.Options{})
	e := node.Engine()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tags := make([][]row.Tag, hosts)
	for h := range tags {
		tags[h] = tsbs.Tags(h)
	}
	for r := range 360 * hours {
		batch := make([]row.Point, hosts)
		for h := range hosts {
			batch[h] = tsbs.Point(tags, r*hosts+h, start.UnixNano())
		}
		if _, err := e.Write(ctx, "cpu", batch, datanode.WriteOptions{CreateTable: true}); err != nil {
			b.Fatal(err)
		}
	}
	if err := e.Flush(ctx, "cpu"); err != nil {
		b.Fatal(err)
	}
	for {
		_, err := e.Compact(ctx, "cpu", true)
		if err == nil {
			break
		}
		if !errors.Is(err, compact.ErrBusy) {
			b.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	opts := promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute}
	upstream := promql.NewEngine(opts)
	th := thanos.New(thanos.Opts{EngineOpts: opts})
	raw := &prom.Queryable{Engine: e}
	rolled := &prom.Queryable{Engine: e, Rollups: true}
	end := start.Add(hours * time.Hour)
	eight := `hostname=~"host_1|host_2|host_3|host_4|host_5|host_6|host_7|host_8"`
	queries := []struct {
		name  string
		expr  string
		start time.Time
		step  time.Duration
	}{
		{"1-host-1h", `max(max_over_time(cpu_usage_user{hostname="host_1"}[1m]))`, end.Add(-time.Hour), time.Minute},
		{"8-hosts-1h", `max(max_over_time(cpu_usage_user{` + eight + `}[1m]))`, end.Add(-time.Hour), time.Minute},
		{"1-host-12h", `max(max_over_time(cpu_usage_user{hostname="host_1"}[1m]))`, start, time.Minute},
		{"all-hosts-avg-12h", `avg(avg_over_time(cpu_usage_user[1h])) by (hostname)`, start.Add(time.Hour), time.Hour},
		{"sum-rate-by-region-1h", `sum by (region) (rate(cpu_usage_user[5m]))`, end.Add(-time.Hour), time.Minute},
		{"topk-avg-12h", `topk(5, avg_over_time(cpu_usage_user[1h]))`, start.Add(time.Hour), time.Hour},
	}
	type runner func(qs string, s, en time.Time, step time.Duration) (promql.Matrix, error)
	engineRun := func(eng promql.QueryEngine, q storage.Queryable) runner {
		return func(qs string, s, en time.Time, step time.Duration) (promql.Matrix, error) {
			qry, err := eng.NewRangeQuery(ctx, q, nil, qs, s, en, step)
			if err != nil {
				return nil, err
			}
			defer qry.Close()
			res := qry.Exec(ctx)
			if res.Err != nil {
				return nil, res.Err
			}
			m, err := res.Matrix()
			if err != nil {
				return nil, err
			}
			return copyMatrix(m), nil // the query's Close recycles its points
		}
	}
	// strata: the API's choice (api.go: rangeQuery, plan): rollups for a
	// RollupSafe query, the engine-less path where planDirect takes it.
	strata := func(qs string, s, en time.Time, step time.Duration) (promql.Matrix, error) {
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(qs)
		if err != nil {
			return nil, err
		}
		q := raw
		if prom.RollupSafe(expr) {
			q = rolled
			if m, ok, err := prom.EvalDirect(ctx, q, expr, s, en, step); ok {
				return m, err
			}
		}
		return engineRun(upstream, q)(qs, s, en, step)
	}
	variants := []struct {
		name string
		run  runner
	}{
		{"prom-raw", engineRun(upstream, raw)},
		{"prom-rollups", engineRun(upstream, rolled)},
		{"strata-api", strata},
		{"thanos-raw", engineRun(th, raw)},
		{"thanos-rollups", engineRun(th, rolled)},
	}
	for _, qc := range queries {
		want, err := engineRun(upstream, raw)(qc.expr, qc.start, end, qc.step)
		if err != nil {
			b.Fatal(qc.name, err)
		}
		for _, v := range variants {
			got, err := v.run(qc.expr, qc.start, end, qc.step)
			if err != nil {
				b.Fatal(qc.name, v.name, err)
			}
			if d := diffMatrix(want, got); d != "" {
				b.Logf("%s/%s differs from prom-raw: %s", qc.name, v.name, d)
			} else {
				b.Logf("%s/%s: %d series, same as prom-raw", qc.name, v.name, len(got))
			}
		}
	}
	// The data loads once: -count would load it again, so the rounds are
	// $STRATA_COMPARE_ROUNDS (default 3), each query's variants side by
	// side in each (go test names the later rounds' runs NAME#01, ...).
	rounds := 3
	if s := os.Getenv("STRATA_COMPARE_ROUNDS"); s != "" {
		if rounds, err = strconv.Atoi(s); err != nil || rounds < 1 {
			b.Fatalf("STRATA_COMPARE_ROUNDS=%q", s)
		}
	}
	for range rounds {
		for _, qc := range queries {
			for _, v := range variants {
				b.Run(qc.name+"/"+v.name, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if _, err := v.run(qc.expr, qc.start, end, qc.step); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

func copyMatrix(m promql.Matrix) promql.Matrix {
	out := make(promql.Matrix, len(m))
	for i, s := range m {
		out[i] = promql.Series{Metric: s.Metric, Floats: slices.Clone(s.Floats)}
	}
	return out
}

// diffMatrix compares two range-query answers as sets of series: "" if
// every value is the same to the bit, else the first difference, or the
// largest relative difference where they differ only in rounding.
func diffMatrix(want, got promql.Matrix) string {
	sortM := func(m promql.Matrix) {
		slices.SortFunc(m, func(a, b promql.Series) int { return labels.Compare(a.Metric, b.Metric) })
	}
	sortM(want)
	sortM(got)
	if len(want) != len(got) {
		return fmt.Sprintf("%d series, want %d", len(got), len(want))
	}
	var maxRel float64
	for i := range want {
		w, g := want[i], got[i]
		if !labels.Equal(w.Metric, g.Metric) {
			return fmt.Sprintf("series %d is %s, want %s", i, g.Metric, w.Metric)
		}
		if len(w.Floats) != len(g.Floats) {
			return fmt.Sprintf("%s: %d points, want %d", w.Metric, len(g.Floats), len(w.Floats))
		}
		for j := range w.Floats {
			wp, gp := w.Floats[j], g.Floats[j]
			if wp.T != gp.T {
				return fmt.Sprintf("%s: point %d at %d, want %d", w.Metric, j, gp.T, wp.T)
			}
			if math.Float64bits(wp.F) != math.Float64bits(gp.F) {
				rel := math.Abs(wp.F-gp.F) / math.Max(math.Abs(wp.F), 1e-300)
				if !(rel < 1e-9) {
					return fmt.Sprintf("%s at %d: %v, want %v", w.Metric, wp.T, gp.F, wp.F)
				}
				maxRel = max(maxRel, rel)
			}
		}
	}
	if maxRel > 0 {
		return fmt.Sprintf("same series and points; values differ in rounding only (largest relative difference %.2g)", maxRel)
	}
	return ""
}
