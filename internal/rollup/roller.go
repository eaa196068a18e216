package rollup

import (
	"errors"
	"slices"
	"unsafe"

	"github.com/prometheus/prometheus/model/value"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
)

// ErrUnordered: a series' column began at or before the end of the
// samples the Roller has, which a rollup computed as the columns come
// cannot take (rows written out of order across files). Read the series
// again keeping its samples (Samples), and roll them up then.
var ErrUnordered = errors.New("rollup: a series' columns out of time order")

// Roller computes a rollup over a series' samples as they come, in time
// order (milliseconds): it holds only the open window's values, so a wide
// query does not build every sample's arrays first.
type Roller struct {
	fn         *fn
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

// Roller starts a series' rollup.
func (f *Func) Roller() *Roller {
	sp := f.spec
	r := &Roller{fn: f.fn, step: sp.Step, rng: sp.Range, end: sp.End, t: sp.Start + sp.Range - 1, held: -1}
	r.done = r.t > r.end
	if n := r.windows(); n > 0 {
		r.ts, r.vs = make([]int64, 0, n), make([]float64, 0, n)
	}
	return r
}

// windows is how many windows a series may fill, at most a few thousand
// (for an output slice's capacity).
func (r *Roller) windows() int {
	if r.done {
		return 0
	}
	if r.step == 0 {
		return 1
	}
	return int(min((r.end-r.t)/r.step+1, 4096))
}

// Add takes the next sample, at ms t (not before the last one's).
func (r *Roller) Add(t int64, v float64) {
	if r.pending && t == r.lastT {
		r.lastV = v // of two samples in one millisecond, the later stands
		return
	}
	r.place()
	r.pending, r.lastT, r.lastV = true, t, v
}

// AddColumn takes a column of the series' samples (not Rolled) and
// returns how many it held (rows without a value are none). It fails
// with ErrUnordered, taking nothing, if the column does not begin after
// every sample taken before.
func (r *Roller) AddColumn(c *scan.Column) (int, error) {
	if r.anySamples && len(c.TS) > 0 && c.TS[0] <= r.lastNs {
		return 0, ErrUnordered
	}
	return r.addColumn(c.TS, c.Bits, c.Null, c.Kind, c.Finite), nil
}

func (r *Roller) addColumn(ts []int64, bits []uint64, null []bool, k row.Kind, finite bool) int {
	if len(ts) > 0 {
		r.lastNs, r.anySamples = ts[len(ts)-1], true
	}
	if null != nil || k != row.Float {
		conv, n := Floats(k), 0
		for i, t := range ts {
			if null == nil || !null[i] {
				r.Add(Millis(t), conv(bits[i]))
				n++
			}
		}
		return n
	}
	// Floats without nulls, the common column.
	vs := unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(bits))), len(bits))
	if len(ts) > 1 && r.apart(ts) {
		last := len(ts) - 1
		r.Add(Millis(ts[0]), vs[0])
		r.place()
		r.addApart(ts[1:last], vs[1:last], finite)
		r.pending, r.lastT, r.lastV = true, Millis(ts[last]), vs[last]
		return len(ts)
	}
	for i, t := range ts {
		r.Add(Millis(t), vs[i])
	}
	return len(ts)
}

// apart reports whether ts's samples are each in a millisecond of their
// own (at least 1 ms apart), so none replaces another.
func (r *Roller) apart(ts []int64) bool {
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
func (r *Roller) addApart(ts []int64, vs []float64, finite bool) {
	defer r.computeHeld()
	for len(ts) > 0 && !r.done {
		// The open window is (t - rng, t] in ms: [lo, hi) in ns.
		lo, hi := Nanos(r.t-r.rng+1), Nanos(r.t+1)
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
			if ms := Millis(ts[0]); ms > r.t && r.step > 0 {
				r.t += (ms - r.t - 1) / r.step * r.step
				r.done = r.t > r.end
			}
		}
	}
}

// computeWhole computes fn over window values ws into vs[at], or holds
// them to compute with the next window's by fn.two.
func (r *Roller) computeWhole(at int, ws []float64) {
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
func (r *Roller) computeHeld() {
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
func (r *Roller) collect(vs []float64, stale bool) {
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
func (r *Roller) place() {
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
func (r *Roller) close() {
	if len(r.win) > 0 {
		r.ts, r.vs = append(r.ts, r.t), append(r.vs, r.fn.one(r.win))
		r.win = r.win[:0]
	}
	r.advance()
}

// advance opens the next window.
func (r *Roller) advance() {
	if r.step == 0 {
		r.done = true
		return
	}
	r.t += r.step
	r.done = r.t > r.end
}

// Finish closes the open window and returns the windows' samples: one
// per window that holds a sample, at its end (ms), holding the function
// of its samples. Stale markers are left out, as the engine leaves them
// out of range selectors.
func (r *Roller) Finish() ([]int64, []float64) {
	r.place()
	if !r.done {
		r.close()
	}
	return r.ts, r.vs
}
