package rollup

import (
	"math"
	"unsafe"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
)

// Samples are one series' samples kept as a column scan hands them out:
// timestamps in nanoseconds until Millis turns them into milliseconds.
// A scan without a rollup keeps them for the engine; a rollup whose
// columns came out of time order (ErrUnordered) keeps them, merged, and
// rolls them up at the end (Roll).
type Samples struct {
	TS []int64
	VS []float64
}

// Add takes a column of the series (not Rolled): after the samples it
// goes onto them, else it is merged into them as a scan merges rows
// (the column is newer: at a ts both have, its row stands, and if it has
// no value, neither have the samples). It returns by how many samples
// they grew.
func (s *Samples) Add(c *scan.Column) int {
	before := len(s.TS)
	conv := Floats(c.Kind)
	if before > 0 && len(c.TS) > 0 && s.TS[before-1] >= c.TS[0] {
		s.MergeNewer(c.TS, func(j int) (float64, bool) {
			if c.Null != nil && c.Null[j] {
				return 0, false
			}
			return conv(c.Bits[j]), true
		})
		return len(s.TS) - before
	}
	// After the series' samples (its first Column, mostly): straight
	// onto its arrays.
	if before == 0 {
		s.TS, s.VS = make([]int64, 0, len(c.TS)), make([]float64, 0, len(c.TS))
	}
	if c.Null == nil && c.Kind == row.Float {
		// Float payloads are the float64s' bits: two copies.
		s.TS = append(s.TS, c.TS...)
		s.VS = append(s.VS, unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(c.Bits))), len(c.Bits))...)
	} else {
		for i, t := range c.TS {
			if c.Null == nil || !c.Null[i] {
				s.TS, s.VS = append(s.TS, t), append(s.VS, conv(c.Bits[i]))
			}
		}
	}
	return len(s.TS) - before
}

// MergeNewer merges samples newer than s's into them, by the merge rule
// (scan.MergeNewer): at each of ts, value(j) (if it has one) replaces the
// sample at that ts, and with none, neither has s. ts is ascending.
func (s *Samples) MergeNewer(ts []int64, value func(j int) (float64, bool)) {
	mts := make([]int64, 0, len(s.TS)+len(ts))
	mvs := make([]float64, 0, len(s.TS)+len(ts))
	scan.MergeNewer(s.TS, ts, func(i int, newer bool) {
		if !newer {
			mts, mvs = append(mts, s.TS[i]), append(mvs, s.VS[i])
		} else if v, ok := value(i); ok {
			mts, mvs = append(mts, ts[i]), append(mvs, v)
		}
	})
	s.TS, s.VS = mts, mvs
}

// Millis turns the timestamps from nanoseconds into milliseconds, in
// place: of two samples in one millisecond, the later stands.
func (s *Samples) Millis() {
	k := 0
	for i, t := range s.TS {
		ms := Millis(t)
		if k > 0 && s.TS[k-1] == ms {
			s.VS[k-1] = s.VS[i]
			continue
		}
		s.TS[k], s.VS[k] = ms, s.VS[i]
		k++
	}
	s.TS, s.VS = s.TS[:k], s.VS[:k]
}

// Roll replaces the samples (in milliseconds) by f's windows (Finish).
func (s *Samples) Roll(f *Func) {
	r := f.Roller()
	for i, t := range s.TS {
		r.Add(t, s.VS[i])
	}
	s.TS, s.VS = r.Finish()
}

// Floats converts payloads of values of kind k to float64.
func Floats(k row.Kind) func(uint64) float64 {
	switch k {
	case row.Int:
		return func(b uint64) float64 { return float64(int64(b)) }
	case row.Uint:
		return func(b uint64) float64 { return float64(b) }
	case row.Bool:
		return func(b uint64) float64 {
			if b != 0 {
				return 1
			}
			return 0
		}
	}
	return math.Float64frombits
}
