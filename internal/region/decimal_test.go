package region

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/memtable"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
)

// TestFlushWritesDecimals: a flush writes each float field whose values
// are all decimals as decimals at their least scale, the others as
// doubles, and reads back what was written. A scale that turns out wrong
// (memtable.Decimals never gives one) costs the flush a second encoding
// with that field as doubles, not the flush.
func TestFlushWritesDecimals(t *testing.T) {
	ctx := context.Background()
	r := open(t, objstoretest.Mem(t), Options{})
	write := func(base int64) {
		for i := range int64(100) {
			mustWrite(t, r, pt("a", base+i, fl("cpu", float64(i)+0.25), fl("ratio", float64(i)/3)))
		}
	}
	check := func(want map[string]int8) {
		t.Helper()
		var newest string
		for id := range r.Manifest().Files {
			newest = max(newest, id)
		}
		rd, err := r.OpenSST(ctx, r.Manifest().Files[newest])
		if err != nil {
			t.Fatal(err)
		}
		for f, scale := range want {
			got, _, ok := rd.Decimals(f)
			if !ok {
				got = decimal.None
			}
			if got != scale {
				t.Fatalf("field %s at scale %d, want %d", f, got, scale)
			}
		}
	}
	write(0)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check(map[string]int8{"cpu": 2, "ratio": decimal.None})

	old := decimalsOf
	t.Cleanup(func() { decimalsOf = old })
	decimalsOf = func(m *memtable.Memtable, width int) []int8 {
		return slices.Repeat([]int8{0}, width) // 0.25 has no mantissa at scale 0
	}
	write(1000)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check(map[string]int8{"cpu": decimal.None, "ratio": decimal.None})

	key, err := row.EncodeSeries(nil, []row.Tag{{Name: "host", Value: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cpu", "ratio"} {
		var want []string
		for _, base := range []int64{0, 1000} {
			for i := range int64(100) {
				v := float64(i) + 0.25
				if f == "ratio" {
					v = float64(i) / 3
				}
				want = append(want, line(string(key), base+i, math.Float64bits(v)))
			}
		}
		if got := rowScan(t, r, scan.Request{Start: math.MinInt64, End: math.MaxInt64, Fields: []string{f}}); !slices.Equal(got, want) {
			t.Fatalf("field %s read back %q\nwant %q", f, got, want)
		}
	}
}
