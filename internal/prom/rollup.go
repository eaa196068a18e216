package prom

import (
	"math"
	"sort"

	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/kahansum"
)

// Range functions computed in the scan ("rollups").
//
// For avg_over_time(m[r]) evaluated every step s >= r, the windows
// (t-r, t] of the evaluation times t are apart, so each sample is in one
// window at most. Select can then hand the engine, per series, one sample
// per window, at t, holding the function's value over the window: the
// engine's function over a window that holds just that sample returns it
// unchanged. The engine then copies a sample per window instead of every
// sample (it spends most of an aggregation over many series doing that).
//
// The evaluation times come from the Select's hints (a range selector's
// Start is the query's start less the range, plus 1 ms; Step is the query's
// step, 0 for an instant query), which only holds without subqueries, @ and
// offsets: RollupSafe vets the expression, and the API asks for rollups
// only for expressions it passes.

// rollups are the range functions whose value over a window's samples is
// also their value over that one value: computed as Prometheus computes
// them (promql/functions.go), so the results are the same to the bit.
var rollups = map[string]func([]float64) float64{
	"avg_over_time": avgOverTime,
	"sum_over_time": sumOverTime,
	"min_over_time": func(vs []float64) float64 {
		return compareOverTime(vs, func(cur, m float64) bool { return cur < m || math.IsNaN(m) })
	},
	"max_over_time": func(vs []float64) float64 {
		return compareOverTime(vs, func(cur, m float64) bool { return cur > m || math.IsNaN(m) })
	},
	"last_over_time": func(vs []float64) float64 { return vs[len(vs)-1] },
}

// RollupSafe reports whether Select may compute range functions for expr:
// it has no subquery, and no selector with @ or an offset (or Prometheus'
// experimental anchored and smoothed selectors), so every range selector
// is evaluated at the query's own steps.
func RollupSafe(expr parser.Expr) bool {
	ok := true
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.SubqueryExpr:
			ok = false
		case *parser.VectorSelector:
			if n.Timestamp != nil || n.StartOrEnd != 0 || n.OriginalOffset != 0 || n.OriginalOffsetExpr != nil || n.Anchored || n.Smoothed {
				ok = false
			}
		}
		return nil
	})
	return ok
}

// rollupOf is the function Select computes for hints, or nil: a rollup
// function directly over a range selector, evaluated at steps no closer
// than its range.
func rollupOf(hints *storage.SelectHints) func([]float64) float64 {
	if hints == nil || hints.Range <= 0 || hints.Step != 0 && hints.Step < hints.Range {
		return nil
	}
	return rollups[hints.Func]
}

// rollup replaces the series' samples (in milliseconds) by one a window
// of hints' evaluation times that holds any, at that time, holding fn of
// the window's samples. Stale markers are left out, as the engine leaves
// them out of range selectors.
func (s *series) rollup(hints *storage.SelectHints, fn func([]float64) float64) {
	first := hints.Start + hints.Range - 1 // the first evaluation time
	var ts []int64
	var vs []float64
	i := 0
	for t := first; t <= hints.End; t += max(hints.Step, 1) {
		// The window (t - range, t].
		i += sort.Search(len(s.ts)-i, func(k int) bool { return s.ts[i+k] > t-hints.Range })
		j := i
		for j < len(s.ts) && s.ts[j] <= t {
			j++
		}
		win := s.vs[i:j:j]
		if stale := countStale(win); stale > 0 {
			clean := make([]float64, 0, len(win)-stale)
			for _, v := range win {
				if !value.IsStaleNaN(v) {
					clean = append(clean, v)
				}
			}
			win = clean
		}
		if len(win) > 0 {
			ts, vs = append(ts, t), append(vs, fn(win))
		}
		i = j
		if hints.Step == 0 {
			break
		}
	}
	s.ts, s.vs = ts, vs
}

func countStale(vs []float64) int {
	n := 0
	for _, v := range vs {
		if value.IsStaleNaN(v) {
			n++
		}
	}
	return n
}

func sumOverTime(vs []float64) float64 {
	var sum, c float64
	for _, v := range vs {
		sum, c = kahansum.Inc(v, sum, c)
	}
	if math.IsInf(sum, 0) {
		return sum
	}
	return sum + c
}

func avgOverTime(vs []float64) float64 {
	var (
		sum, count      = vs[0], 1.
		mean, kahanC    float64
		incrementalMean bool
	)
	for i, f := range vs[1:] {
		count = float64(i + 2)
		if !incrementalMean {
			newSum, newC := kahansum.Inc(f, sum, kahanC)
			if !math.IsInf(newSum, 0) {
				sum, kahanC = newSum, newC
				continue
			}
			incrementalMean = true
			mean = sum / (count - 1)
			kahanC /= (count - 1)
		}
		q := (count - 1) / count
		mean, kahanC = kahansum.Inc(f/count, q*mean, q*kahanC)
	}
	if incrementalMean {
		return mean + kahanC
	}
	return sum/count + kahanC/count
}

func compareOverTime(vs []float64, better func(cur, m float64) bool) float64 {
	m := vs[0]
	for _, v := range vs {
		if better(v, m) {
			m = v
		}
	}
	return m
}
