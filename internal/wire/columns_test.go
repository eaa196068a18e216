package wire

import (
	"math"
	"reflect"
	"testing"

	"github.com/stratadb/strata/internal/scan"
)

// A column packs and unpacks to itself: timestamps of any spacing (negative,
// irregular, the extremes), every payload's bits, nulls or none.
func TestColumnRoundTrip(t *testing.T) {
	cols := []scan.Column{
		{SeriesColumn: scan.SeriesColumn{Series: "a", TS: []int64{42}, Bits: []uint64{math.Float64bits(math.NaN())}}},
		{SeriesColumn: scan.SeriesColumn{Series: "b", TS: []int64{-5, 3}, Bits: []uint64{0x7ff0000000000002, math.MaxUint64}, Finite: true}, Samples: 720},
		{SeriesColumn: scan.SeriesColumn{Series: "c", TS: []int64{math.MinInt64, -1, 0, 10, 20, 30, 31, 1000, math.MaxInt64}, Bits: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9},
			Null: []bool{false, true, false, false, false, false, false, false, true}}},
		{SeriesColumn: scan.SeriesColumn{Series: "d (no windows)", TS: []int64{}, Bits: []uint64{}}, Samples: 3},
		{SeriesColumn: scan.SeriesColumn{Series: "e (a partial whose value depends on the order)", TS: []int64{60e9}, Bits: []uint64{1 << 63}, Finite: true}, Samples: 6, Ties: true},
	}
	var got scan.Column
	for _, c := range cols {
		if err := ToColumn(FromColumn(&c), &got); err != nil {
			t.Fatalf("%s: %v", c.Series, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("%s: got %+v, want %+v", c.Series, got, c)
		}
	}
	m := FromColumn(&cols[2])
	m.Ts = m.Ts[:len(m.Ts)-1]
	if err := ToColumn(m, &got); err == nil {
		t.Fatal("a column missing part of a timestamp unpacked")
	}
	m = FromColumn(&cols[2])
	m.Values = m.Values[:8]
	if err := ToColumn(m, &got); err == nil {
		t.Fatal("a column with more timestamps than values unpacked")
	}
	m = FromColumn(&cols[1])
	m.Samples = -1
	if err := ToColumn(m, &got); err == nil {
		t.Fatal("a column of -1 samples unpacked")
	}
}

// A rollup converts to its message and back, and none to none.
func TestRollupRoundTrip(t *testing.T) {
	r := &scan.Rollup{Func: "avg_over_time", Range: 3_600_000, Start: -3_599_999, End: 43_200_000, Step: 3_600_000}
	if got := ToRollup(FromRollup(r)); !reflect.DeepEqual(got, r) {
		t.Fatalf("got %+v, want %+v", got, r)
	}
	if FromRollup(nil) != nil || ToRollup(nil) != nil {
		t.Fatal("no rollup converted to one")
	}
}

// An aggregation converts to its message and back, and none to none.
func TestAggregateRoundTrip(t *testing.T) {
	a := &scan.Aggregate{Op: "max", By: []string{"host", "region"}}
	if got := ToAggregate(FromAggregate(a)); !reflect.DeepEqual(got, a) {
		t.Fatalf("got %+v, want %+v", got, a)
	}
	if FromAggregate(nil) != nil || ToAggregate(nil) != nil {
		t.Fatal("no aggregation converted to one")
	}
}
