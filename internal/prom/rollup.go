package prom

import (
	"math"
	"slices"
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
var rollups = map[string]*rollup{
	"avg_over_time":  {one: avgOverTime, two: avgOverTime2},
	"sum_over_time":  {one: sumOverTime},
	"min_over_time":  {one: minOverTime},
	"max_over_time":  {one: maxOverTime},
	"last_over_time": {one: func(vs []float64) float64 { return vs[len(vs)-1] }},
}

// rollup is a range function over a window's values; two, if set, is it
// over two windows at once, to the bit as one computes each: where one is
// a chain of dependent additions, two chains side by side take little
// longer than one.
type rollup struct {
	one func([]float64) float64
	two func(a, b []float64) (float64, float64)
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
func rollupOf(hints *storage.SelectHints) *rollup {
	if hints == nil || hints.Range <= 0 || hints.Step != 0 && hints.Step < hints.Range {
		return nil
	}
	return rollups[hints.Func]
}

// roller computes a rollup over a series' samples as they come, in time
// order (milliseconds): it holds only the open window's values, so a wide
// query does not build every sample's arrays first.
type roller struct {
	fn         *rollup
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
	// a window addApart found whole in a column, its value not yet
	// computed (into vs[held]: fn.two takes the next with it), or held -1
	held   int
	heldVs []float64
}

func newRoller(hints *storage.SelectHints, fn *rollup) *roller {
	r := &roller{fn: fn, step: hints.Step, rng: hints.Range, end: hints.End, t: hints.Start + hints.Range - 1, held: -1}
	r.done = r.t > r.end
	if n := r.windows(); n > 0 {
		r.ts, r.vs = make([]int64, 0, n), make([]float64, 0, n)
	}
	return r
}

// windows is how many windows a series may fill, at most a few thousand
// (for an output slice's capacity).
func (r *roller) windows() int {
	if r.done {
		return 0
	}
	if r.step == 0 {
		return 1
	}
	return int(min((r.end-r.t)/r.step+1, 4096))
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
func (r *roller) addColumn(ts []int64, bits []uint64, null []bool, k row.Kind, finite bool) int {
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
		r.addApart(ts[1:last], vs[1:last], finite)
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
// found by comparing nanoseconds to its bounds, and where the window holds
// nothing else, fn is computed over them where they lie. Finite: no value
// is NaN, so none is a stale marker.
func (r *roller) addApart(ts []int64, vs []float64, finite bool) {
	defer r.computeHeld()
	for len(ts) > 0 && !r.done {
		// The open window is (t - rng, t] in ms: [lo, hi) in ns.
		lo, hi := msToNs(r.t-r.rng+1), msToNs(r.t+1)
		i := searchFrom(ts, 0, lo) // those before are between windows
		j := searchFrom(ts, i, hi)
		stale := !finite && anyStale(vs[i:j])
		if j == len(ts) { // the window stays open
			r.collect(vs[i:j], stale)
			return
		}
		if len(r.win) == 0 && !stale && i < j {
			r.ts, r.vs = append(r.ts, r.t), append(r.vs, 0)
			r.computeWhole(len(r.vs)-1, vs[i:j])
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

// computeWhole computes fn over window values ws into vs[at], or holds
// them to compute with the next window's by fn.two.
func (r *roller) computeWhole(at int, ws []float64) {
	switch {
	case r.fn.two == nil:
		r.vs[at] = r.fn.one(ws)
	case r.held < 0:
		r.held, r.heldVs = at, ws
	default:
		r.vs[r.held], r.vs[at] = r.fn.two(r.heldVs, ws)
		r.held, r.heldVs = -1, nil
	}
}

// computeHeld computes the window held, if any: its values are valid only
// until addApart returns.
func (r *roller) computeHeld() {
	if r.held >= 0 {
		r.vs[r.held] = r.fn.one(r.heldVs)
		r.held, r.heldVs = -1, nil
	}
}

// searchFrom returns the index of the first of ts[from:] (sorted) not
// below x: galloping from from, as the next window's end is most often
// near.
func searchFrom(ts []int64, from int, x int64) int {
	if from == len(ts) || ts[from] >= x {
		return from
	}
	// ts[lo] < x; find hi with ts[hi] >= x (or the end) by doubling.
	lo, step := from, 1
	hi := lo + step
	for hi < len(ts) && ts[hi] < x {
		lo, step = hi, step*2
		hi = lo + step
	}
	hi = min(hi, len(ts))
	k, _ := slices.BinarySearch(ts[lo+1:hi], x)
	return lo + 1 + k
}

// anyStale reports whether vs holds a stale marker.
func anyStale(vs []float64) bool {
	return slices.Contains(unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(vs))), len(vs)), value.StaleNaN)
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
		r.ts, r.vs = append(r.ts, r.t), append(r.vs, r.fn.one(r.win))
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
func (s *series) rollup(hints *storage.SelectHints, fn *rollup) {
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

// avgOverTime2 is avgOverTime of a and of b, their Kahan sums computed
// side by side. Without avgOverTime's test for an overflow at each
// addition: a running sum that overflows stays infinite or turns NaN, so a
// finite sum at the end means there was none, and a window whose sum is
// not finite is computed again by avgOverTime.
func avgOverTime2(a, b []float64) (float64, float64) {
	n := min(len(a), len(b))
	sa, ca, sb, cb := a[0], 0., b[0], 0.
	for i := 1; i < n; i++ {
		fa, fb := a[i], b[i]
		ta, tb := sa+fa, sb+fb
		if math.Abs(sa) >= math.Abs(fa) {
			ca += (sa - ta) + fa
		} else {
			ca += (fa - ta) + sa
		}
		if math.Abs(sb) >= math.Abs(fb) {
			cb += (sb - tb) + fb
		} else {
			cb += (fb - tb) + sb
		}
		sa, sb = ta, tb
	}
	return avgFinish(a, n, sa, ca), avgFinish(b, n, sb, cb)
}

// avgFinish goes on with avgOverTime2's sum and compensation of vs from
// vs[from] on, and returns the average.
func avgFinish(vs []float64, from int, sum, c float64) float64 {
	for _, f := range vs[from:] {
		t := sum + f
		if math.Abs(sum) >= math.Abs(f) {
			c += (sum - t) + f
		} else {
			c += (f - t) + sum
		}
		sum = t
	}
	if math.IsInf(sum, 0) || math.IsNaN(sum) {
		return avgOverTime(vs)
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
