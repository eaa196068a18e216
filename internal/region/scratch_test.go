package region

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
)

// A write reuses the field values of the writes before it (a kept
// scratch, not cleared when each point fills every field): a point that
// names a field twice, or lacks one, must still read back its lacking
// fields as nulls, never an earlier write's values.
func TestAWriteLacksNoFieldOfAnEarlierOne(t *testing.T) {
	ctx := context.Background()
	r := open(t, objstoretest.Mem(t), Options{})
	defer closeRegion(t, r, false)
	full := func(ts int64) row.Point { return pt("a", ts, fl("x", 1), fl("y", 2), fl("z", 3)) }
	for round := range 3 { // the scratches kept are reused in turn
		var pts []row.Point
		for i := range 64 {
			pts = append(pts, full(int64(round*1000+i)))
		}
		mustWrite(t, r, pts...)
		// A prepared batch whose points name x twice: as many fields as
		// the schema's, but not all of them.
		twice := make([]row.Point, 64)
		keys := make([][]byte, 64)
		for i := range twice {
			twice[i] = pt("c", int64(round*1000+i), fl("x", 6), fl("x", 6), fl("z", 7))
			k, err := row.EncodeSeries(nil, twice[i].Tags)
			if err != nil {
				t.Fatal(err)
			}
			keys[i] = k
		}
		if _, err := r.WriteBatch(ctx, Batch{Points: twice, Keys: keys}); err != nil {
			t.Fatal(err)
		}
		// The same number of points and fields, some lacking y.
		sparse := make([]row.Point, 64)
		for i := range sparse {
			sparse[i] = pt("b", int64(round*1000+i), fl("x", 4), fl("z", 5))
		}
		mustWrite(t, r, sparse...)
	}
	got := scanAll(t, r, scan.Request{})
	want := map[string]string{"host=a": " x=1 y=2 z=3", "host=b": " x=4 z=5", "host=c": " x=6 z=7"}
	n := 0
	for _, line := range got {
		for series, fields := range want {
			if strings.HasPrefix(line, series+" ") {
				n++
				if !strings.HasSuffix(line, fields) {
					t.Fatalf("row %q: want fields%s", line, fields)
				}
			}
		}
	}
	if n != 3*3*64 {
		t.Fatalf("%d rows of %d: %v", n, 3*3*64, slices.Clip(got[:min(len(got), 5)]))
	}
}
