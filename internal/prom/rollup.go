package prom

import (
	"math"
	"unsafe"

	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/kahansum"
	"github.com/stratadb/strata/internal/row"
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
	"avg_over_time":  avgOverTime,
	"sum_over_time":  sumOverTime,
	"min_over_time":  minOverTime,
	"max_over_time":  maxOverTime,
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

// roller computes a rollup over a series' samples as they come, in time
// order (milliseconds): it holds only the open window's values, so a wide
// query does not build every sample's arrays first.
type roller struct {
	fn         func([]float64) float64
	step, rng  int64
	end        int64
	t          int64     // the open window's evaluation time: its window is (t - rng, t]
	done       bool      // past the last window
	win        []float64 // the open window's values, stale markers left out
	ts         []int64   // the closed windows' times and values
	vs         []float64
	pending    bool // a sample not yet placed: a later one in its millisecond replaces it
	lastT      int64
	lastV      float64
	lastNs     int64 // the last sample's time as given to addColumn (ns)
	anySamples bool
}

func newRoller(hints *storage.SelectHints, fn func([]float64) float64) *roller {
	r := &roller{fn: fn, step: hints.Step, rng: hints.Range, end: hints.End, t: hints.Start + hints.Range - 1}
	r.done = r.t > r.end
	return r
}

// add takes the next sample, at ms t (not before the last one's).
func (r *roller) add(t int64, v float64) {
	if r.pending && t == r.lastT {
		r.lastV = v // of two samples in one millisecond, the later stands
		return
	}
	r.place()
	r.pending, r.lastT, r.lastV = true, t, v
}

// addColumn takes a column's samples (ns, the payloads of kind k; none
// where null), all after every earlier sample.
func (r *roller) addColumn(ts []int64, bits []uint64, null []bool, k row.Kind) int {
	if len(ts) > 0 {
		r.lastNs, r.anySamples = ts[len(ts)-1], true
	}
	if null != nil || k != row.Float {
		conv, n := floats(k), 0
		for i, t := range ts {
			if null == nil || !null[i] {
				r.add(nsToMs(t), conv(bits[i]))
				n++
			}
		}
		return n
	}
	// Floats without nulls, the common column.
	vs := unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(bits))), len(bits))
	if len(ts) > 1 && r.apart(ts) {
		last := len(ts) - 1
		r.add(nsToMs(ts[0]), vs[0])
		r.place()
		r.addApart(ts[1:last], vs[1:last])
		r.pending, r.lastT, r.lastV = true, nsToMs(ts[last]), vs[last]
		return len(ts)
	}
	for i, t := range ts {
		r.add(nsToMs(t), vs[i])
	}
	return len(ts)
}

// apart reports whether ts's samples are each in a millisecond of their
// own (at least 1 ms apart), so none replaces another.
func (r *roller) apart(ts []int64) bool {
	for i := 1; i < len(ts); i++ {
		if ts[i]-ts[i-1] < 1e6 {
			return false
		}
	}
	return true
}

// addApart places samples (ns) that are each in a millisecond of their
// own and after the last one placed, none pending: a window's samples are
// found by comparing nanoseconds to its bounds, and handed to fn where
// they lie when the window holds nothing else.
func (r *roller) addApart(ts []int64, vs []float64) {
	for len(ts) > 0 && !r.done {
		// The open window is (t - rng, t] in ms: [lo, hi) in ns.
		lo, hi := msToNs(r.t-r.rng+1), msToNs(r.t+1)
		i := 0
		for i < len(ts) && ts[i] < lo {
			i++ // between windows
		}
		j, stale := i, false
		for j < len(ts) && ts[j] < hi {
			stale = stale || value.IsStaleNaN(vs[j])
			j++
		}
		if j == len(ts) { // the window stays open
			r.collect(vs[i:j], stale)
			return
		}
		if len(r.win) == 0 && !stale && i < j {
			r.ts, r.vs = append(r.ts, r.t), append(r.vs, r.fn(vs[i:j]))
			r.advance()
		} else {
			r.collect(vs[i:j], stale)
			r.close()
		}
		ts, vs = ts[j:], vs[j:]
		if len(r.win) == 0 && !r.done {
			// Skip the windows before the next sample's.
			if ms := nsToMs(ts[0]); ms > r.t && r.step > 0 {
				r.t += (ms - r.t - 1) / r.step * r.step
				r.done = r.t > r.end
			}
		}
	}
}

// collect adds vs to the open window, stale markers left out.
func (r *roller) collect(vs []float64, stale bool) {
	if !stale {
		r.win = append(r.win, vs...)
		return
	}
	for _, v := range vs {
		if !value.IsStaleNaN(v) {
			r.win = append(r.win, v)
		}
	}
}

// place puts the pending sample in its window, closing the windows before.
func (r *roller) place() {
	if !r.pending {
		return
	}
	r.pending = false
	for !r.done && r.lastT > r.t {
		r.close()
	}
	if r.done || r.lastT <= r.t-r.rng || value.IsStaleNaN(r.lastV) {
		return // between windows, past the last, or a stale marker
	}
	r.win = append(r.win, r.lastV)
}

// close closes the open window and opens the next.
func (r *roller) close() {
	if len(r.win) > 0 {
		r.ts, r.vs = append(r.ts, r.t), append(r.vs, r.fn(r.win))
		r.win = r.win[:0]
	}
	r.advance()
}

// advance opens the next window.
func (r *roller) advance() {
	if r.step == 0 {
		r.done = true
		return
	}
	r.t += r.step
	r.done = r.t > r.end
}

// finish closes the open window and returns the windows' samples.
func (r *roller) finish() ([]int64, []float64) {
	r.place()
	if !r.done {
		r.close()
	}
	return r.ts, r.vs
}

// rollup replaces the series' samples (in milliseconds) by one a window
// of hints' evaluation times that holds any, at that time, holding fn of
// the window's samples. Stale markers are left out, as the engine leaves
// them out of range selectors.
func (s *series) rollup(hints *storage.SelectHints, fn func([]float64) float64) {
	r := newRoller(hints, fn)
	for i, t := range s.ts {
		r.add(t, s.vs[i])
	}
	s.ts, s.vs = r.finish()
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

// avgOverTime is Prometheus' average: a Kahan sum divided by the count,
// unless the sum overflows, when it starts again with an incremental mean
// (avgIncremental).
func avgOverTime(vs []float64) float64 {
	sum, c := vs[0], 0.
	for _, f := range vs[1:] {
		// kahansum.Inc, written out: Prometheus keeps it from being
		// inlined (so that no multiplication around it is fused with its
		// additions); there is none here, and the calls were more than
		// half of the average's time.
		t := sum + f
		if t > math.MaxFloat64 || t < -math.MaxFloat64 {
			return avgIncremental(vs)
		}
		if math.Abs(sum) >= math.Abs(f) {
			c += (sum - t) + f
		} else {
			c += (f - t) + sum
		}
		sum = t
	}
	count := float64(len(vs))
	return sum/count + c/count
}

// avgIncremental is Prometheus' avg_over_time as it is written
// (promql/functions.go), for windows whose sum overflows.
func avgIncremental(vs []float64) float64 {
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

// minOverTime and maxOverTime are Prometheus' compareOverTime with its
// comparisons written in: a NaN gives way to any later value.
func minOverTime(vs []float64) float64 {
	m := vs[0]
	for _, v := range vs {
		if v < m || math.IsNaN(m) {
			m = v
		}
	}
	return m
}

func maxOverTime(vs []float64) float64 {
	m := vs[0]
	for _, v := range vs {
		if v > m || math.IsNaN(m) {
			m = v
		}
	}
	return m
}
