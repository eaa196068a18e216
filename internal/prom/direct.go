package prom

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/kahansum"

	"github.com/stratadb/strata/internal/rollup"
)

// Aggregations of rollups, evaluated without the engine.
//
// The query dashboards ask most, AGG [by (labels)] (F(selector[r])) with
// F a rollup and a step of at least r, is answered in two steps once the
// scan has rolled up each series (one sample per step holding F over its
// window, see internal/rollup): aggregate the series at each step. Prometheus'
// engine does the same, but first walks every step of every series
// through its generic range-function machinery (buffered iterators, one
// window at a time), which costs more than the scan on narrow queries.
// The aggregation below is the engine's own (promql/engine.go,
// aggregation), operation for operation, over the series in the order
// the engine would take them (Select's), so the result is the same to the
// bit; TestRollupsMatchEngine holds it to that. Anything else, instant
// queries included, goes to the engine.

// directPlan is a query of that shape.
type directPlan struct {
	op  parser.ItemType // SUM, AVG, MIN, MAX or COUNT
	by  []string        // the grouping labels, sorted
	fn  string          // the rollup function
	sel *parser.VectorSelector
	rng time.Duration
}

// planDirect returns the plan for a range query of expr at step, or nil
// if the engine must evaluate it. expr must be RollupSafe.
func planDirect(expr parser.Expr, step time.Duration) *directPlan {
	if expr == nil {
		return nil
	}
	agg, ok := unparen(expr).(*parser.AggregateExpr)
	if !ok || agg.Param != nil || agg.Without || slices.Contains(agg.Grouping, model.MetricNameLabel) {
		return nil
	}
	switch agg.Op {
	case parser.SUM, parser.AVG, parser.MIN, parser.MAX, parser.COUNT:
	default:
		return nil
	}
	call, ok := unparen(agg.Expr).(*parser.Call)
	// last_over_time keeps the metric name; it is left to the engine.
	if !ok || len(call.Args) != 1 || !rollup.Known(call.Func.Name) || call.Func.Name == "last_over_time" {
		return nil
	}
	ms, ok := unparen(call.Args[0]).(*parser.MatrixSelector)
	if !ok || ms.RangeExpr != nil || ms.Range <= 0 || step < ms.Range {
		return nil
	}
	vs, ok := ms.VectorSelector.(*parser.VectorSelector)
	// Series of several names may have the same labels once F dropped
	// their names: the engine then fails where they meet at a step, and
	// merges them (in no set order) where they do not. Unless the
	// grouping keeps the names apart (byname.go), that is the engine's.
	if !ok || !oneName(vs) && !slices.Contains(agg.Grouping, nameLabel) {
		return nil
	}
	by := slices.Clone(agg.Grouping)
	slices.Sort(by)
	return &directPlan{op: agg.Op, by: slices.Compact(by), fn: call.Func.Name, sel: vs, rng: ms.Range}
}

func unparen(e parser.Expr) parser.Expr {
	for {
		p, ok := e.(*parser.ParenExpr)
		if !ok {
			return e
		}
		e = p.Expr
	}
}

// aggregate is one group's aggregation at a step: the engine's
// groupedAggregation, floats only.
type aggregate struct {
	seen  bool
	incr  bool    // avg: the sum overflowed; the mean is kept incrementally
	v, c  float64 // value (or sum) and its Kahan compensation
	mean  float64
	count float64
}

func (a *aggregate) add(op parser.ItemType, f float64) {
	if !a.seen {
		*a = aggregate{seen: true, v: f, mean: f, count: 1}
		return
	}
	switch op {
	case parser.SUM:
		a.v, a.c = kahansum.Inc(f, a.v, a.c)
	case parser.AVG:
		a.count++
		if !a.incr {
			v, c := kahansum.Inc(f, a.v, a.c)
			if !math.IsInf(v, 0) {
				a.v, a.c = v, c
				return
			}
			a.incr = true
			a.mean = a.v / (a.count - 1)
			a.c /= a.count - 1
		}
		q := (a.count - 1) / a.count
		a.mean, a.c = kahansum.Inc(f/a.count, q*a.mean, q*a.c)
	case parser.MAX:
		if a.v < f || math.IsNaN(a.v) {
			a.v = f
		}
	case parser.MIN:
		if a.v > f || math.IsNaN(a.v) {
			a.v = f
		}
	case parser.COUNT:
		a.count++
	}
}

func (a *aggregate) value(op parser.ItemType) float64 {
	switch op {
	case parser.SUM:
		return a.v + a.c
	case parser.AVG:
		if a.incr {
			return a.mean + a.c
		}
		return a.v/a.count + a.c/a.count
	case parser.COUNT:
		return a.count
	}
	return a.v
}

// eval evaluates the plan from start to end at step over q, which must
// compute rollups in its scans.
func (p *directPlan) eval(ctx context.Context, q *Queryable, start, end time.Time, step time.Duration) (promql.Matrix, error) {
	startMs, endMs, interval := start.UnixMilli(), end.UnixMilli(), step.Milliseconds()
	// The Select the engine would make (promql.Engine.populateSeries).
	hints := &storage.SelectHints{Start: startMs - p.rng.Milliseconds() + 1, End: endMs, Step: interval,
		Range: p.rng.Milliseconds(), Func: p.fn, By: len(p.by) > 0, Grouping: p.by}
	qr, err := q.Querier(hints.Start, hints.End)
	if err != nil {
		return nil, err
	}
	defer qr.Close()
	set := qr.Select(ctx, false, hints, p.sel.LabelMatchers...)
	var ss []*series
	for set.Next() {
		s, ok := set.At().(*series)
		if !ok {
			return nil, fmt.Errorf("prom: a %T from Select", set.At())
		}
		ss = append(ss, s)
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("expanding series: %w", err) // as the engine says it
	}
	return p.aggregate(ctx, ss, startMs, endMs, interval)
}

// aggregate aggregates rolled-up series (each with samples at steps only)
// at each step from start to end (ms), in the series' order.
func (p *directPlan) aggregate(ctx context.Context, ss []*series, start, end, interval int64) (promql.Matrix, error) {
	var out promql.Matrix
	group := make([]int, len(ss))
	groups := map[string]int{}
	for i, s := range ss {
		ls := labels.EmptyLabels()
		if len(p.by) > 0 {
			b := labels.NewBuilder(s.labels)
			b.Keep(p.by...)
			ls = b.Labels()
		}
		key := ls.String()
		g, ok := groups[key]
		if !ok {
			g = len(out)
			groups[key] = g
			out = append(out, promql.Series{Metric: ls})
		}
		group[i] = g
	}
	aggs := make([]aggregate, len(out))
	next := make([]int, len(ss))
	for t := start; t <= end; t += interval {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for g := range aggs {
			aggs[g].seen = false
		}
		for i, s := range ss {
			k := next[i]
			if k == len(s.TS) || s.TS[k] > t {
				continue
			}
			if s.TS[k] < t {
				return nil, fmt.Errorf("prom: %s: a rolled-up sample at %d, off the steps", p.fn, s.TS[k])
			}
			aggs[group[i]].add(p.op, s.VS[k])
			next[i]++
		}
		for g := range aggs {
			if aggs[g].seen {
				out[g].Floats = append(out[g].Floats, promql.FPoint{T: t, F: aggs[g].value(p.op)})
			}
		}
	}
	out = slices.DeleteFunc(out, func(s promql.Series) bool { return len(s.Floats) == 0 })
	slices.SortFunc(out, func(a, b promql.Series) int { return labels.Compare(a.Metric, b.Metric) })
	return out, nil
}

// directQuery is a directPlan as an evaluation, for the API's eval.
type directQuery struct {
	plan       *directPlan
	q          *Queryable
	start, end time.Time
	step       time.Duration
}

func (d *directQuery) Exec(ctx context.Context) *promql.Result {
	m, err := d.plan.eval(ctx, d.q, d.start, d.end, d.step)
	return &promql.Result{Value: m, Err: err}
}

func (d *directQuery) Close() {}
