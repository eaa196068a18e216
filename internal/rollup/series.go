package rollup

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
)

// Series is one series of a column scan, taken column by column: rolled
// up as its columns come (fused), kept as samples, or, for Rolled
// columns (a rollup its region's owner computed), taken as they are.
type Series struct {
	Samples
	roll   *Roller
	rolled bool // took Rolled columns
}

// errMixed: a series got both Rolled columns and samples, which no scan
// gives (a series lives in one region, and its owner rolls it up whole
// or not at all).
var errMixed = errors.New("rollup: a series' rolled and raw columns mixed")

// Add takes the series' next column and returns how many samples it
// read. With f set and fused, a column of samples is rolled up as it
// comes (ErrUnordered if it cannot be: read the scan again unfused);
// else it is kept. A Rolled column is kept as it is, whatever f.
func (s *Series) Add(c *scan.Column, f *Func, fused bool) (int, error) {
	switch {
	case c.Rolled:
		if s.roll != nil || len(s.TS) > 0 && !s.rolled {
			return 0, errMixed
		}
		s.rolled = true
		s.Samples.Add(c)
		return c.Samples, nil
	case s.rolled:
		return 0, errMixed
	case f != nil && fused:
		if s.roll == nil {
			s.roll = f.Roller()
		}
		return s.roll.AddColumn(c)
	}
	return s.Samples.Add(c), nil
}

// Finish turns what the series took into its samples in milliseconds:
// the windows of f if it was rolled up here (as its columns came or at
// the end) or by its owner, else its samples.
func (s *Series) Finish(f *Func) {
	switch {
	case s.roll != nil:
		s.TS, s.VS = s.roll.Finish()
		s.roll = nil
	case f != nil && !s.rolled:
		s.Millis()
		s.Roll(f)
	default:
		s.Millis() // a Rolled column's times are whole milliseconds
	}
}

// rescans counts column scans read again for ErrUnordered.
var rescans atomic.Int64

// Rescans is how many column scans were read again, keeping samples,
// because a series' columns came out of time order (ErrUnordered): tests
// check which path a rollup took.
func Rescans() int64 { return rescans.Load() }

// Rescanned counts a column scan read again for ErrUnordered by a caller
// that drives Series itself.
func Rescanned() { rescans.Add(1) }

// reaggregations counts aggregations read again for ties.
var reaggregations atomic.Int64

// Reaggregations is how many aggregations whose partials owners computed
// were read again, rolled up only, because a value depended on the order
// of the series (Aggregated.Ties): tests check which path one took.
func Reaggregations() int64 { return reaggregations.Load() }

// Reaggregated counts an aggregation read again for ties.
func Reaggregated() { reaggregations.Add(1) }

// Columns rolls up every series of a column scan where its samples are
// (a region's owner): scanColumns runs the scan, calling emit as
// Region.ScanColumns does (from several goroutines, never for one series
// at once). Each series is rolled up as its columns come; if one comes
// out of time order the scan runs again with the samples kept, rolled up
// at its end. Then emit gets one Rolled column per series that had
// samples (empty if none was in a window: Samples still counts them), one
// call at a time, its slices valid during the call.
func (f *Func) Columns(scanColumns func(emit func(*scan.Column) error) error, emit func(*scan.Column) error) error {
	ss, err := f.rolled(scanColumns)
	if err != nil {
		return err
	}
	c := scan.Column{Kind: row.Float, Rolled: true}
	for _, s := range ss {
		c.Series, c.Samples = s.key, s.n
		setWindows(&c, s.TS, s.VS)
		if err := emit(&c); err != nil {
			return err
		}
	}
	return nil
}

// rolled reads a column scan and rolls up its series (Columns): those
// that had samples, finished.
func (f *Func) rolled(scanColumns func(emit func(*scan.Column) error) error) ([]*keyed, error) {
	out, err := f.collect(scanColumns, true)
	if errors.Is(err, ErrUnordered) {
		Rescanned()
		out, err = f.collect(scanColumns, false)
	}
	if err != nil {
		return nil, err
	}
	k := 0
	for _, s := range out {
		if s.n > 0 {
			s.Finish(f)
			out[k] = s
			k++
		}
	}
	return out[:k], nil
}

// setWindows sets c's values to windows' (ms): Float payloads at
// nanoseconds.
func setWindows(c *scan.Column, ts []int64, vs []float64) {
	c.TS, c.Bits, c.Finite = c.TS[:0], c.Bits[:0], true
	for i, t := range ts {
		v := vs[i]
		c.TS, c.Bits = append(c.TS, Nanos(t)), append(c.Bits, math.Float64bits(v))
		c.Finite = c.Finite && !math.IsNaN(v) && !math.IsInf(v, 0)
	}
}

// keyed is a series Columns rolls up.
type keyed struct {
	key string
	n   int // samples read
	Series
}

// collect reads the scan into series, fused or not.
func (f *Func) collect(scanColumns func(emit func(*scan.Column) error) error, fused bool) ([]*keyed, error) {
	var mu sync.Mutex // emit is called from several goroutines; a series from one at a time
	byKey := map[string]*keyed{}
	var out []*keyed
	err := scanColumns(func(c *scan.Column) error {
		if c.Rolled {
			return fmt.Errorf("%w: a rolled column to roll up", errMixed)
		}
		mu.Lock()
		s := byKey[c.Series]
		if s == nil {
			s = &keyed{key: c.Series}
			byKey[c.Series] = s
			out = append(out, s)
		}
		mu.Unlock()
		n, err := s.Add(c, f, fused)
		s.n += n
		return err
	})
	return out, err
}
