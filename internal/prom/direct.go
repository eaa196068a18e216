package prom

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"

	"github.com/stratadb/strata/internal/rollup"
	"github.com/stratadb/strata/internal/scan"
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
// The aggregation (rollup.Aggregate) is the engine's own
// (promql/engine.go, aggregation), operation for operation, over the
// series in the order the engine would take them (Select's), so the
// result is the same to the bit; TestRollupsMatchEngine holds it to that.
// min, max, count and group are computed by the owners of the regions
// other datanodes host, as partials merged here (eval). Anything else,
// instant queries included, goes to the engine.

// directPlan is a query of that shape.
type directPlan struct {
	op  rollup.Op
	by  []string // the grouping labels, sorted
	fn  string   // the rollup function
	sel *parser.VectorSelector
	rng time.Duration
}

// ops are the aggregations a directPlan evaluates.
var ops = map[parser.ItemType]rollup.Op{parser.SUM: rollup.Sum, parser.AVG: rollup.Avg, parser.MIN: rollup.Min,
	parser.MAX: rollup.Max, parser.COUNT: rollup.Count, parser.GROUP: rollup.Group}

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
	op, ok := ops[agg.Op]
	if !ok {
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
	return &directPlan{op: op, by: slices.Compact(by), fn: call.Func.Name, sel: vs, rng: ms.Range}
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

// eval evaluates the plan from start to end at step over q, which must
// compute rollups in its scans. An aggregation whose partials merge
// exactly is computed by the owners of the regions other datanodes host
// (scan.Request.Aggregate), each answering one partial per group, which
// are merged here with the series of the regions hosted here (and of
// owners that do not know aggregates). If a value then depends on the
// order in which series are taken (ties), the owners' partials cannot
// say which comes first in the engine's order: the series are read
// again, rolled up only, and aggregated here.
func (p *directPlan) eval(ctx context.Context, q *Queryable, start, end time.Time, step time.Duration) (promql.Matrix, error) {
	startMs, endMs, interval := start.UnixMilli(), end.UnixMilli(), step.Milliseconds()
	// The Select the engine would make (promql.Engine.populateSeries).
	hints := &storage.SelectHints{Start: startMs - p.rng.Milliseconds() + 1, End: endMs, Step: interval,
		Range: p.rng.Milliseconds(), Func: p.fn, By: len(p.by) > 0, Grouping: p.by}
	qr := &querier{q: q, mint: hints.Start, maxt: hints.End}
	var agg *scan.Aggregate
	// With a series limit the owners send series, not their groups'
	// partials: the limit counts series wherever they are hosted.
	if p.op.Mergeable() && !slices.Contains(p.by, nameLabel) && q.MaxSeries <= 0 {
		agg = &scan.Aggregate{Op: p.op.String(), By: p.by}
	}
	for counted := false; ; counted = true {
		out, err := qr.sel(ctx, hints, agg, p.sel.LabelMatchers)
		if err == nil && !counted {
			err = q.countSeries(len(out))
		}
		if err != nil {
			return nil, fmt.Errorf("expanding series: %w", err) // as the engine says it
		}
		ss := make([]*series, len(out))
		for i, s := range out {
			var ok bool
			if ss[i], ok = s.(*series); !ok {
				return nil, fmt.Errorf("prom: a %T from Select", s)
			}
		}
		m, ties, err := p.aggregate(ctx, ss, startMs, endMs, interval)
		if err != nil || !ties {
			return m, err
		}
		rollup.Reaggregated()
		agg = nil
	}
}

// aggregate aggregates rolled-up series (each with samples at steps
// only) at each step from start to end (ms), in the series' order, and
// merges the partials among them. ties: with partials, a value depends on
// the order in which the series are taken (rollup.Agg).
func (p *directPlan) aggregate(ctx context.Context, ss []*series, start, end, interval int64) (promql.Matrix, bool, error) {
	var out promql.Matrix
	ins := make([]rollup.Input, len(ss))
	groups := map[string]int{}
	partials := false
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
		ins[i] = rollup.Input{TS: s.TS, VS: s.VS, Group: g, Partial: s.partial, Ties: s.ties}
		partials = partials || s.partial
	}
	aggs, err := rollup.Aggregate(ctx, p.op, ins, len(out), start, end, interval)
	if err != nil {
		return nil, false, fmt.Errorf("prom: %s: %w", p.fn, err)
	}
	ties := false
	for g, a := range aggs {
		ties = ties || a.Ties
		out[g].Floats = make([]promql.FPoint, len(a.TS))
		for i, t := range a.TS {
			out[g].Floats[i] = promql.FPoint{T: t, F: a.VS[i]}
		}
	}
	out = slices.DeleteFunc(out, func(s promql.Series) bool { return len(s.Floats) == 0 })
	slices.SortFunc(out, func(a, b promql.Series) int { return labels.Compare(a.Metric, b.Metric) })
	return out, partials && ties, nil
}

// EvalDirect evaluates a range query of expr as the API does without the
// engine, if it can (ok false: the API would hand it to the engine). q
// must compute rollups and expr be RollupSafe. For tests, which compare
// its answers' bits (the API's JSON does not show a NaN's).
func EvalDirect(ctx context.Context, q *Queryable, expr parser.Expr, start, end time.Time, step time.Duration) (m promql.Matrix, ok bool, err error) {
	p := planDirect(expr, step)
	if p == nil {
		return nil, false, nil
	}
	m, err = p.eval(ctx, q, start, end, step)
	return m, true, err
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
