package prom

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/stratadb/strata/internal/testseed"
)

// TestAggregateMatchesEngine: aggregating rolled-up series without the
// engine gives the engine's result to the bit, for every aggregation and
// grouping planDirect takes, over values the scan never returns but a
// rollup may (NaN, infinities, -0) and sums that overflow. The series
// hold one sample at some steps each, as rolled-up series do; max_over_time
// over such a window is that sample, so the engine sees the same inputs.
func TestAggregateMatchesEngine(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewSource(seed))
	special := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1e308, -1e308, 1.7e308, 5e-324}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e7, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	p := parser.NewParser(parser.Options{})
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const steps = 30
	end := start.Add((steps - 1) * time.Minute)
	for range 400 {
		var held heldSeries
		for i := range 1 + rng.Intn(12) {
			lb := labels.NewScratchBuilder(3)
			lb.Add(model.MetricNameLabel, "x")
			lb.Add("i", fmt.Sprint(i))
			if rng.Intn(4) > 0 {
				lb.Add("g", fmt.Sprint("g", rng.Intn(3)))
			}
			lb.Sort()
			s := &series{labels: lb.Labels()}
			for k := range steps {
				if rng.Intn(3) == 0 {
					continue
				}
				v := float64(rng.Intn(2000)-1000) / 7
				if rng.Intn(5) == 0 {
					v = special[rng.Intn(len(special))]
				}
				s.TS = append(s.TS, start.Add(time.Duration(k)*time.Minute).UnixMilli())
				s.VS = append(s.VS, v)
			}
			held = append(held, s)
		}
		op := []string{"sum", "avg", "min", "max", "count", "group"}[rng.Intn(6)]
		expr := op + []string{"", " by (g)", " by (g, nope)", " by ()"}[rng.Intn(4)] + " (max_over_time(x[1m]))"
		qry, err := engine.NewRangeQuery(ctx, held, nil, expr, start, end, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		res := qry.Exec(ctx)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		want := renderBits(res.Value.(promql.Matrix))
		qry.Close()
		parsed, err := p.ParseExpr(expr)
		if err != nil {
			t.Fatal(err)
		}
		plan := planDirect(parsed, time.Minute)
		if plan == nil {
			t.Fatalf("%s: not planned", expr)
		}
		m, _, err := plan.aggregate(ctx, held, start.UnixMilli(), end.UnixMilli(), time.Minute.Milliseconds())
		if err != nil {
			t.Fatal(err)
		}
		if got := renderBits(m); got != want {
			t.Fatalf("%s:\nwithout the engine %s\nengine             %s", expr, got, want)
		}
	}
	// What planDirect leaves to the engine.
	for _, e := range []string{
		"max_over_time(x[1m])", "max(x)", "max(last_over_time(x[1m]))", "max(rate(x[1m]))",
		"max without (g) (max_over_time(x[1m]))", "max by (__name__) (max_over_time(x[1m]))",
		"topk(1, max_over_time(x[1m]))", "quantile(0.5, max_over_time(x[1m]))", "max(max_over_time(x[2m]))",
		"max(max_over_time(x[1m:10s]))", "max(max_over_time(x[1m]) * 2)",
	} {
		parsed, err := p.ParseExpr(e)
		if err != nil {
			t.Fatal(err)
		}
		if planDirect(parsed, time.Minute) != nil {
			t.Fatalf("%s at step 1m: planned without the engine", e)
		}
	}
}

// renderBits prints a result exactly: every value's bits.
func renderBits(m promql.Matrix) string {
	out := ""
	for _, s := range m {
		out += s.Metric.String() + ":"
		for _, p := range s.Floats {
			out += fmt.Sprintf(" %d=%x", p.T, math.Float64bits(p.F))
		}
		out += "\n"
	}
	return out
}

// heldSeries is a Queryable of series held in memory, in their order.
type heldSeries []*series

func (h heldSeries) Querier(int64, int64) (storage.Querier, error) { return h, nil }
func (h heldSeries) Select(_ context.Context, _ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	set := &seriesSet{pos: -1}
	for _, s := range h {
		ok := true
		for _, m := range ms {
			ok = ok && m.Matches(s.labels.Get(m.Name))
		}
		if ok {
			set.series = append(set.series, s)
		}
	}
	return set
}
func (h heldSeries) LabelValues(context.Context, string, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}
func (h heldSeries) LabelNames(context.Context, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}
func (h heldSeries) Close() error { return nil }
