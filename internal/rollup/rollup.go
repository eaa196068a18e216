// Package rollup computes range functions over a series' samples as a
// column scan hands them out ("rollups"), for the PromQL layer and for a
// region's owner, which computes them where the samples are and sends one
// value per window instead of every sample.
//
// For avg_over_time(m[r]) evaluated every step s >= r, the windows
// (t-r, t] of the evaluation times t are apart, so each sample is in one
// window at most. A scan can then hand Prometheus' engine, per series, one
// sample per window, at t, holding the function's value over the window:
// the engine's function over a window that holds just that sample returns
// it unchanged. The engine then copies a sample per window instead of
// every sample (it spends most of an aggregation over many series doing
// that), and a remote region's owner sends one value per window (for [1h]
// over 10 s samples, 360 times fewer).
//
// The functions are computed as Prometheus computes them
// (promql/functions.go, v0.316.0), so the results are the same to the bit.
// Which queries may be rolled up (no subqueries, @ or offsets: the
// evaluation times must be the query's own steps) is internal/prom's to
// say; a scan.Rollup only names the function and the windows.
//
// It also aggregates rolled-up series at each window (aggregate.go), as
// the engine does, for internal/prom's engine-less plan and, for the
// aggregations whose partials merge exactly, at a region's owner.
//
// It imports nothing of Strata's but scan and row, and of Prometheus only
// two leaf packages (the staleness marker and Kahan summation).
package rollup

import (
	"fmt"
	"math"

	"github.com/stratadb/strata/internal/scan"
)

// funcs are the range functions whose value over a window's samples is
// also their value over that one value.
var funcs = map[string]*fn{
	"avg_over_time":  {one: avgOverTime, two: avgOverTime2},
	"sum_over_time":  {one: sumOverTime},
	"min_over_time":  {one: minOverTime},
	"max_over_time":  {one: maxOverTime},
	"last_over_time": {one: func(vs []float64) float64 { return vs[len(vs)-1] }},
}

// fn is a range function over a window's values; two, if set, is it over
// two windows at once, to the bit as one computes each: where one is a
// chain of dependent additions, two chains side by side take little
// longer than one.
type fn struct {
	one func([]float64) float64
	two func(a, b []float64) (float64, float64)
}

// Known reports whether name is a range function a rollup computes.
func Known(name string) bool { return funcs[name] != nil }

// Bounds of a valid Func: every time within ±maxTime ms and a range and
// step within maxSpan, so no window's arithmetic overflows; at most
// maxWindows windows (the API's 11,000 points a series fit many times).
const (
	maxTime    = 1 << 62
	maxSpan    = 1 << 60
	maxWindows = 1 << 20
)

// Func is a rollup whose spec was checked: its function and windows.
type Func struct {
	spec scan.Rollup
	fn   *fn
}

// New checks spec: a known function, a positive range, a step of 0 (one
// window, at Start + Range - 1) or at least the range (the windows are
// apart), times that cannot overflow and not too many windows. The error
// wraps scan.ErrInvalid.
func New(spec scan.Rollup) (*Func, error) {
	f := funcs[spec.Func]
	switch {
	case f == nil:
		return nil, fmt.Errorf("%w: rollup of %q: not a range function a rollup computes", scan.ErrInvalid, spec.Func)
	case spec.Range <= 0 || spec.Range > maxSpan:
		return nil, fmt.Errorf("%w: rollup range %d ms", scan.ErrInvalid, spec.Range)
	case spec.Step < 0 || spec.Step > maxSpan || spec.Step != 0 && spec.Step < spec.Range:
		return nil, fmt.Errorf("%w: rollup step %d ms under the range %d ms (windows must be apart)", scan.ErrInvalid, spec.Step, spec.Range)
	case spec.Start < -maxTime || spec.Start > maxTime || spec.End < -maxTime || spec.End > maxTime:
		return nil, fmt.Errorf("%w: rollup from %d to %d ms", scan.ErrInvalid, spec.Start, spec.End)
	}
	if first := spec.Start + spec.Range - 1; spec.Step > 0 && first <= spec.End && (spec.End-first)/spec.Step >= maxWindows {
		return nil, fmt.Errorf("%w: rollup of more than %d windows", scan.ErrInvalid, maxWindows)
	}
	return &Func{spec: spec, fn: f}, nil
}

// Spec is the rollup f computes.
func (f *Func) Spec() scan.Rollup { return f.spec }

// steps are f's windows' ends: from first to end every step (ms, step > 0).
func (f *Func) steps() (first, end, step int64) {
	sp := f.spec
	first = sp.Start + sp.Range - 1
	if sp.Step == 0 {
		return first, min(first, sp.End), 1
	}
	return first, sp.End, sp.Step
}

// Millis floors a nanosecond timestamp to milliseconds.
func Millis(ns int64) int64 {
	ms := ns / 1e6
	if ns%1e6 < 0 {
		ms--
	}
	return ms
}

// Nanos is ms in nanoseconds, clamped to int64.
func Nanos(ms int64) int64 {
	switch {
	case ms > math.MaxInt64/1_000_000:
		return math.MaxInt64 - 1
	case ms < math.MinInt64/1_000_000:
		return math.MinInt64
	}
	return ms * 1e6
}
