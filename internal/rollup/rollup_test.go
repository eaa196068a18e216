package rollup_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/stratadb/strata/internal/rollup"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/testseed"
)

var names = []string{"avg_over_time", "sum_over_time", "min_over_time", "max_over_time", "last_over_time"}

// A spec is refused, as an invalid scan, unless its function is one of
// the five and its windows are apart, few enough and within bounds.
func TestNewRefusesBadSpecs(t *testing.T) {
	good := scan.Rollup{Func: "avg_over_time", Range: 60_000, Start: 1_767_225_540_001, End: 1_767_268_800_000, Step: 60_000}
	for _, name := range names {
		sp := good
		sp.Func = name
		if _, err := rollup.New(sp); err != nil {
			t.Fatalf("%+v: %v", sp, err)
		}
	}
	instant := good
	instant.Step = 0
	if _, err := rollup.New(instant); err != nil {
		t.Fatalf("an instant query's rollup: %v", err)
	}
	for _, tc := range []struct {
		what string
		edit func(*scan.Rollup)
	}{
		{"no function", func(r *scan.Rollup) { r.Func = "" }},
		{"a function rollups do not compute", func(r *scan.Rollup) { r.Func = "count_over_time" }},
		{"a rate", func(r *scan.Rollup) { r.Func = "rate" }},
		{"no range", func(r *scan.Rollup) { r.Range = 0 }},
		{"a negative range", func(r *scan.Rollup) { r.Range = -1 }},
		{"a huge range", func(r *scan.Rollup) { r.Range = math.MaxInt64 }},
		{"a step under the range", func(r *scan.Rollup) { r.Step = r.Range - 1 }},
		{"a negative step", func(r *scan.Rollup) { r.Step = -60_000 }},
		{"a huge step", func(r *scan.Rollup) { r.Step, r.Range = math.MaxInt64, 1 }},
		{"a start out of bounds", func(r *scan.Rollup) { r.Start = math.MinInt64 }},
		{"an end out of bounds", func(r *scan.Rollup) { r.End = math.MaxInt64 }},
		{"too many windows", func(r *scan.Rollup) { r.Step, r.Range, r.Start = 1, 1, r.End-1<<21 }},
	} {
		sp := good
		tc.edit(&sp)
		if _, err := rollup.New(sp); !errors.Is(err, scan.ErrInvalid) {
			t.Errorf("%s (%+v): %v, want scan.ErrInvalid", tc.what, sp, err)
		}
	}
}

// column is one column of a series as a scan hands it out.
func column(series string, ts []int64, vs []float64, null []bool) *scan.Column {
	c := &scan.Column{Kind: row.Float, SeriesColumn: scan.SeriesColumn{Series: series, TS: ts, Null: null, Finite: true}}
	for _, v := range vs {
		c.Bits = append(c.Bits, math.Float64bits(v))
		c.Finite = c.Finite && !math.IsNaN(v) && !math.IsInf(v, 0)
	}
	return c
}

// reference is a series' rollup computed from its samples kept and
// merged (the columns in the order given, newest last).
func reference(f *rollup.Func, cols []*scan.Column) ([]int64, []float64, int) {
	var s rollup.Samples
	n := 0
	for _, c := range cols {
		n += s.Add(c)
	}
	s.Millis()
	s.Roll(f)
	return s.TS, s.VS, n
}

// Columns, the owner's rollup, gives each series one Rolled column that
// is the series' samples rolled up: its windows' ends in nanoseconds,
// the samples it read; rolled up as the columns come when they come in
// time order, and read again with the samples kept when they do not.
// Rolling its answer up again changes nothing (one sample per window, at
// its end), which a receiver may rely on.
func TestColumnsIsTheSeriesRollup(t *testing.T) {
	rng := rand.New(rand.NewSource(int64(testseed.Seed(t))))
	const ms = int64(1e6)
	stale := math.Float64frombits(0x7ff0000000000002)
	unordered := 0
	for round := range 200 {
		name := names[rng.Intn(len(names))]
		rangeMs := []int64{10_000, 60_000, 300_000}[rng.Intn(3)]
		step := rangeMs * []int64{0, 1, 1, 2, 3}[rng.Intn(5)]
		start := rng.Int63n(600_000) - 300_000
		f, err := rollup.New(scan.Rollup{Func: name, Range: rangeMs, Start: start, End: start + int64(rng.Intn(30))*max(step, 1), Step: step})
		if err != nil {
			t.Fatal(err)
		}
		// Series of one to four columns; in time order but in round%3 == 0,
		// where they may overlap (a newer one rewrites older samples).
		ordered := round%3 != 0
		bySeries := map[string][]*scan.Column{}
		var order []string
		for s := range 1 + rng.Intn(6) {
			key := fmt.Sprint("s", s)
			order = append(order, key)
			next := int64(rng.Intn(100_000)) * ms
			for range 1 + rng.Intn(4) {
				if !ordered {
					next = int64(rng.Intn(1_000_000)) * ms
				}
				var ts []int64
				var vs []float64
				var null []bool
				for range 1 + rng.Intn(300) {
					next += []int64{1, 999_999, 1_000_001, 10 * ms, 10_000 * ms}[rng.Intn(5)]
					ts = append(ts, next)
					v := float64(rng.Intn(1000)) / 7
					switch rng.Intn(30) {
					case 0:
						v = stale
					case 1:
						v = 1e308
					case 2:
						v = math.NaN()
					}
					vs = append(vs, v)
					null = append(null, rng.Intn(20) == 0)
				}
				if rng.Intn(2) == 0 {
					null = nil
				}
				bySeries[key] = append(bySeries[key], column(key, ts, vs, null))
			}
		}
		// The scan hands out series from several goroutines, each series'
		// columns in order.
		scanCols := func(emit func(*scan.Column) error) error {
			var wg sync.WaitGroup
			errs := make([]error, len(order))
			for i, key := range order {
				wg.Go(func() {
					for _, c := range bySeries[key] {
						if errs[i] = emit(c); errs[i] != nil {
							return
						}
					}
				})
			}
			wg.Wait()
			return errors.Join(errs...)
		}
		ordered = true // unless a column begins before the one before ends
		for _, key := range order {
			cols := bySeries[key]
			for i := 1; i < len(cols); i++ {
				ordered = ordered && cols[i].TS[0] > cols[i-1].TS[len(cols[i-1].TS)-1]
			}
		}
		before := rollup.Rescans()
		got := map[string]scan.Column{}
		err = f.Columns(scanCols, func(c *scan.Column) error {
			if _, dup := got[c.Series]; dup || !c.Rolled || c.Kind != row.Float {
				t.Fatalf("%s: a second column, or not rolled: %+v", c.Series, c)
			}
			got[c.Series] = scan.Column{SeriesColumn: scan.SeriesColumn{Series: c.Series, TS: slices.Clone(c.TS), Bits: slices.Clone(c.Bits), Finite: c.Finite}, Samples: c.Samples, Rolled: true, Kind: c.Kind}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if rescanned := rollup.Rescans() > before; rescanned == ordered {
			t.Fatalf("round %d: columns in order %v, read again %v", round, ordered, rescanned)
		} else if rescanned {
			unordered++
		}
		for _, key := range order {
			ts, vs, n := reference(f, bySeries[key])
			c, ok := got[key]
			if n == 0 {
				if ok {
					t.Fatalf("%s: a column for a series of no samples", key)
				}
				continue
			}
			if !ok || c.Samples != n {
				t.Fatalf("%s: %+v, want %d samples", key, c, n)
			}
			var s rollup.Series
			if _, err := s.Add(&c, f, true); err != nil {
				t.Fatal(err)
			}
			s.Finish(f)
			if !slices.Equal(s.TS, ts) || !slices.Equal(bits(s.VS), bits(vs)) {
				t.Fatalf("round %d %s %s: got %v %v, want %v %v", round, name, key, s.TS, s.VS, ts, vs)
			}
			for i, t0 := range c.TS {
				if t0 != ts[i]*ms {
					t.Fatalf("%s: window end %d ns, want %d ms", key, t0, ts[i])
				}
			}
			// Rolled up again, as an owner's samples (unflagged): the same.
			c.Rolled = false
			again, vs2, _ := reference(f, []*scan.Column{&c})
			if !slices.Equal(again, ts) || !reflect.DeepEqual(bits(vs2), bits(vs)) {
				t.Fatalf("%s %s: rolled up twice %v %v, once %v %v", name, key, again, vs2, ts, vs)
			}
		}
	}
	if unordered < 20 {
		t.Fatalf("only %d of 200 scans had a series' columns out of order", unordered)
	}
}

func bits(vs []float64) []uint64 {
	out := make([]uint64, len(vs))
	for i, v := range vs {
		out[i] = math.Float64bits(v)
	}
	return out
}

// A series takes Rolled columns or samples, never both; a rolled column
// handed to an owner's rollup is refused. The scan's own errors come
// back as they are.
func TestMixedColumnsAreRefused(t *testing.T) {
	f, err := rollup.New(scan.Rollup{Func: "sum_over_time", Range: 10, Start: 1, End: 100, Step: 10})
	if err != nil {
		t.Fatal(err)
	}
	raw := column("a", []int64{5e6}, []float64{1}, nil)
	rolled := column("a", []int64{10e6}, []float64{1}, nil)
	rolled.Rolled, rolled.Samples = true, 1
	for _, order := range [][]*scan.Column{{raw, rolled}, {rolled, raw}} {
		for _, fused := range []bool{true, false} {
			var s rollup.Series
			_, err1 := s.Add(order[0], f, fused)
			if _, err2 := s.Add(order[1], f, fused); err1 != nil || err2 == nil {
				t.Fatalf("rolled %v then %v (fused %v): %v, %v", order[0].Rolled, order[1].Rolled, fused, err1, err2)
			}
		}
	}
	err = f.Columns(func(emit func(*scan.Column) error) error { return emit(rolled) }, func(*scan.Column) error { return nil })
	if err == nil {
		t.Fatal("an owner rolled up a rolled column")
	}
	boom := errors.New("boom")
	err = f.Columns(func(func(*scan.Column) error) error { return boom }, func(*scan.Column) error { return nil })
	if !errors.Is(err, boom) {
		t.Fatalf("the scan's error: %v", err)
	}
	err = f.Columns(func(emit func(*scan.Column) error) error { return emit(raw) }, func(*scan.Column) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("emit's error: %v", err)
	}
}
