package rollup

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/prometheus/prometheus/util/kahansum"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
)

// Aggregations of rolled-up series at each window, as Prometheus' engine
// computes them (promql/engine.go, aggregation; floats only): for
// internal/prom's engine-less plan, and for a region's owner, which
// aggregates its own series by group (Aggregation) and sends one partial
// per group for the receiver to merge with the others'.
//
// Only min, max, count and group are computed at owners: their partials
// merge exactly. min and max almost: where values are equal but their bits
// are not (zeros of both signs) the engine keeps the first in its order,
// and of NaNs alone, the last; an Agg says when its value depends on that
// order (Ties), and the receiver then aggregates the series itself.
// sum and avg are not: merged partials add in another order than the
// engine does (docs/design-decisions.md, "Distributing PromQL").

// Op is an aggregation.
type Op uint8

const (
	Sum Op = iota + 1
	Avg
	Min
	Max
	Count
	Group
)

var opNames = [...]string{Sum: "sum", Avg: "avg", Min: "min", Max: "max", Count: "count", Group: "group"}

func (op Op) String() string {
	if int(op) < len(opNames) && opNames[op] != "" {
		return opNames[op]
	}
	return fmt.Sprintf("Op(%d)", op)
}

// Mergeable reports whether op's partials merge exactly (Agg.Merge), so
// that a region's owner may compute them.
func (op Op) Mergeable() bool { return op == Min || op == Max || op == Count || op == Group }

// Agg is one group's aggregation at one step: the engine's
// groupedAggregation, floats only. The zero Agg has seen nothing.
type Agg struct {
	seen  bool
	incr  bool    // avg: the sum overflowed; the mean is kept incrementally
	ties  bool    // min, max: v depends on the order in which the values came
	v, c  float64 // value (or sum) and its Kahan compensation
	mean  float64
	count float64
}

// Add takes the next series' value: the engine takes them in Select's
// order.
func (a *Agg) Add(op Op, f float64) { a.add(op, f, 1, false) }

// Merge takes a partial of the group from elsewhere: an Aggregated
// column's value at the step (for count, how many series had one), ties
// as the column says. op must be Mergeable.
func (a *Agg) Merge(op Op, f float64, ties bool) {
	n := 1.
	if op == Count {
		n = f
	}
	a.add(op, f, n, ties)
}

func (a *Agg) add(op Op, f, n float64, ties bool) {
	if !a.seen {
		*a = Agg{seen: true, v: f, mean: f, count: n, ties: ties}
		if op == Group {
			a.v = 1
		}
		return
	}
	switch op {
	case Sum:
		a.v, a.c = kahansum.Inc(f, a.v, a.c)
	case Avg:
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
	case Max:
		a.extreme(f, ties, a.v < f)
	case Min:
		a.extreme(f, ties, a.v > f)
	case Count:
		a.count += n
	}
}

// extreme takes f into a min or a max as the engine does (f replaces v if
// beyond it, or if v is NaN), and keeps ties: whether v's bits depend on
// the order of the values taken. They do where the values equal to the
// extreme differ in their bits (zeros of both signs: the first stands),
// or, all of them NaN, the NaNs' payloads do (the last stands).
func (a *Agg) extreme(f float64, ties, beyond bool) {
	vNaN := math.IsNaN(a.v)
	switch {
	case a.v == f || vNaN && math.IsNaN(f):
		a.ties = a.ties || ties || math.Float64bits(a.v) != math.Float64bits(f)
		if vNaN {
			a.v = f
		}
	case beyond || vNaN:
		a.v, a.ties = f, ties
	}
}

// Value is the group's value at the step.
func (a *Agg) Value(op Op) float64 {
	switch op {
	case Sum:
		return a.v + a.c
	case Avg:
		if a.incr {
			return a.mean + a.c
		}
		return a.v/a.count + a.c/a.count
	case Count:
		return a.count
	}
	return a.v
}

// Input is a series Aggregate aggregates, in group Group: its values at
// the steps only (ms), or a group's partial (an Aggregated column, its
// Ties).
type Input struct {
	TS      []int64
	VS      []float64
	Group   int
	Partial bool
	Ties    bool
}

// Aggregated is a group's aggregation: its values at the steps where one
// of its inputs had one. Ties: at some step the value depends on the
// order of the inputs (Agg).
type Aggregated struct {
	TS   []int64
	VS   []float64
	Ties bool
}

// Aggregate aggregates ins by their groups (0 to groups-1) at each step
// from start to end (ms, step > 0), taking them in their order at each
// step, as the engine takes series.
func Aggregate(ctx context.Context, op Op, ins []Input, groups int, start, end, step int64) ([]Aggregated, error) {
	out := make([]Aggregated, groups)
	aggs := make([]Agg, groups)
	next := make([]int, len(ins))
	for t := start; t <= end; t += step {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for g := range aggs {
			aggs[g].seen = false
		}
		for i := range ins {
			in := &ins[i]
			k := next[i]
			if k == len(in.TS) || in.TS[k] > t {
				continue
			}
			if in.TS[k] < t {
				return nil, fmt.Errorf("rollup: a rolled-up value at %d, off the steps", in.TS[k])
			}
			if in.Partial {
				aggs[in.Group].Merge(op, in.VS[k], in.Ties)
			} else {
				aggs[in.Group].Add(op, in.VS[k])
			}
			next[i]++
		}
		for g := range aggs {
			if a := &aggs[g]; a.seen {
				o := &out[g]
				o.TS, o.VS, o.Ties = append(o.TS, t), append(o.VS, a.Value(op)), o.Ties || a.ties
			}
		}
	}
	return out, nil
}

// Aggregation is an aggregation a column scan computes where the series
// are (scan.Aggregate), checked.
type Aggregation struct {
	op Op
	by []string
}

// NewAggregation checks spec: an op whose partials merge exactly. The
// error wraps scan.ErrInvalid.
func NewAggregation(spec scan.Aggregate) (*Aggregation, error) {
	for op, name := range opNames {
		if name == spec.Op && Op(op).Mergeable() {
			return &Aggregation{op: Op(op), by: spec.By}, nil
		}
	}
	return nil, fmt.Errorf("%w: aggregation %q at the series' owner: not one whose partials merge exactly", scan.ErrInvalid, spec.Op)
}

// Columns rolls up every series of a column scan as Func.Columns does,
// and aggregates them by group (their tags named in the aggregation's by)
// at each of f's windows: emit gets one Aggregated column per group whose
// series had samples (empty if none was in a window: Samples still counts
// them), one call at a time, its slices valid during the call.
func (a *Aggregation) Columns(ctx context.Context, f *Func, scanColumns func(emit func(*scan.Column) error) error, emit func(*scan.Column) error) error {
	ss, err := f.rolled(scanColumns)
	if err != nil {
		return err
	}
	groups := map[string]int{}
	var keys []string
	var samples []int
	ins := make([]Input, len(ss))
	var tags []row.Tag
	for i, s := range ss {
		if tags, err = row.DecodeSeries(tags[:0], s.key); err != nil {
			return err
		}
		tags = slices.DeleteFunc(tags, func(t row.Tag) bool { return !slices.Contains(a.by, t.Name) })
		k, err := row.EncodeSeries(nil, tags)
		if err != nil {
			return err
		}
		g, ok := groups[string(k)]
		if !ok {
			g = len(keys)
			groups[string(k)] = g
			keys, samples = append(keys, string(k)), append(samples, 0)
		}
		samples[g] += s.n
		ins[i] = Input{TS: s.TS, VS: s.VS, Group: g}
	}
	first, end, step := f.steps()
	out, err := Aggregate(ctx, a.op, ins, len(keys), first, end, step)
	if err != nil {
		return err
	}
	c := scan.Column{Kind: row.Float, Rolled: true, Aggregated: true}
	for g, o := range out {
		c.Series, c.Samples, c.Ties = keys[g], samples[g], o.Ties
		setWindows(&c, o.TS, o.VS)
		if err := emit(&c); err != nil {
			return err
		}
	}
	return nil
}
