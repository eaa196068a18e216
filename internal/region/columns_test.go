package region

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand"
	"slices"
	"sync"
	"testing"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/sst"
	"github.com/stratadb/strata/internal/testseed"
)

// TestScanColumnsMatchesScan: a column scan, its Columns resolved as its
// contract says (later Columns of a series stand over earlier ones at the
// same ts), reads exactly what a row scan of the same field reads, over
// random histories of overwrites, nulls, a field added after some flushes,
// tombstones (which make it merge rows) and files read in ranges and in
// parallel parts.
func TestScanColumnsMatchesScan(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewSource(seed))
	oldLimit, oldPart := sst.WholeFileLimit, minPartRows
	t.Cleanup(func() { sst.WholeFileLimit, minPartRows = oldLimit, oldPart })
	ctx := context.Background()
	for round := range 12 {
		deletes := round%3 == 2
		sst.WholeFileLimit = []int64{oldLimit, 1024}[round%2] // whole files, then ranged reads
		minPartRows = int64(1 + rng.Intn(40))
		r := open(t, objstoretest.Mem(t), Options{RowGroupRows: int64(5 + rng.Intn(40))})
		hosts := []string{"a", "b", "c", "d", "e"}
		for step := range 8 {
			var pts []row.Point
			for range 20 + rng.Intn(60) {
				p := pt(hosts[rng.Intn(len(hosts))], int64(rng.Intn(300))*1_000_000+int64(rng.Intn(2))*500)
				if rng.Intn(5) > 0 {
					p.Fields = append(p.Fields, fl("cpu", float64(rng.Intn(1000))))
				}
				if step >= 3 { // the field exists only from the fourth step on
					p.Fields = append(p.Fields, row.Field{Name: "mem", Value: row.IntValue(int64(rng.Intn(1000)))})
				}
				if len(p.Fields) == 0 {
					p.Fields = append(p.Fields, fl("cpu", 1))
				}
				pts = append(pts, p)
			}
			mustWrite(t, r, pts...)
			if deletes && rng.Intn(3) == 0 {
				lo := int64(rng.Intn(300)) * 1_000_000
				if err := r.Delete(ctx, []row.Tag{{Name: "host", Value: hosts[rng.Intn(len(hosts))]}}, lo, lo+int64(rng.Intn(50))*1_000_000); err != nil {
					t.Fatal(err)
				}
			}
			if rng.Intn(2) == 0 {
				if err := r.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		for q := range 10 {
			req := scan.Request{Start: int64(rng.Intn(150)) * 1_000_000, Fields: []string{[]string{"cpu", "mem"}[rng.Intn(2)]}}
			req.End = req.Start + int64(1+rng.Intn(200))*1_000_000
			switch rng.Intn(3) {
			case 1:
				req.Tags = []row.Tag{{Name: "host", Value: hosts[rng.Intn(len(hosts))]}}
			case 2:
				req.In = []row.TagIn{{Name: "host", Values: []string{"b", "d", "zz"}}}
			}
			want := rowScan(t, r, req)
			got := columnScan(t, r, req)
			if !slices.Equal(got, want) {
				t.Fatalf("round %d query %d %+v (deletes %v):\ncolumns %q\nrows    %q", round, q, req, deletes, got, want)
			}
			p, err := r.plan(&req)
			if err != nil {
				t.Fatal(err)
			}
			_, _, columnar, err := r.columnInputs(ctx, p)
			r.unpin(p.files)
			if err != nil {
				t.Fatal(err)
			}
			if !deletes && !columnar {
				t.Fatalf("round %d query %d: flushes and memtables without tombstones were not read by column", round, q)
			}
		}
		closeRegion(t, r, false)
	}
}

// rowScan is a row scan's "series ts value" lines of req's one field, for
// the rows that have a value of it.
func rowScan(t *testing.T, r *Region, req scan.Request) []string {
	t.Helper()
	sc, err := r.Scan(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	var out []string
	for sc.Next() {
		for _, e := range sc.Batch() {
			if !e.Field(0).IsNull() {
				out = append(out, line(e.Series, e.TS, e.Field(0).Bits()))
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// columnScan is a column scan's lines, its Columns resolved: a later
// Column's row of a series stands over an earlier one's at the same ts,
// even without a value.
func columnScan(t *testing.T, r *Region, req scan.Request) []string {
	t.Helper()
	type val struct {
		bits uint64
		null bool
	}
	var mu sync.Mutex
	rows := map[string]map[int64]val{}
	err := r.ScanColumns(context.Background(), req, func(c *scan.Column) error {
		mu.Lock()
		defer mu.Unlock()
		if len(c.TS) == 0 || len(c.Bits) != len(c.TS) || c.Null != nil && len(c.Null) != len(c.TS) {
			return fmt.Errorf("column of %d timestamps, %d values, %d nulls", len(c.TS), len(c.Bits), len(c.Null))
		}
		if rows[c.Series] == nil {
			rows[c.Series] = map[int64]val{}
		}
		for i, ts := range c.TS {
			if i > 0 && ts <= c.TS[i-1] || ts < req.Start || ts >= req.End {
				return fmt.Errorf("series %s: ts %d out of order or range", c.Series, ts)
			}
			rows[c.Series][ts] = val{c.Bits[i], c.Null != nil && c.Null[i]}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		for _, ts := range slices.Sorted(maps.Keys(rows[k])) {
			if v := rows[k][ts]; !v.null {
				out = append(out, line(k, ts, v.bits))
			}
		}
	}
	return out
}

func line(series string, ts int64, bits uint64) string {
	return fmt.Sprintf("%s %d %x", series, ts, bits)
}

// A column scan's parts are counted in the rows it reads: those of the
// file's series in the scan's time range.
func TestPartsCountRowsInRange(t *testing.T) {
	hour := int64(3600_000)
	for _, c := range []struct {
		minTS, maxTS, start, end int64
		want                     float64
	}{
		{0, 12*hour - 1, 0, 12 * hour, 1},               // all of it
		{0, 12*hour - 1, -hour, 13 * hour, 1},           // more than all
		{0, 12*hour - 1, 11 * hour, 12 * hour, 1. / 12}, // the last hour
		{0, 12*hour - 1, 11 * hour, 20 * hour, 1. / 12}, // past the end
		{0, 12*hour - 1, 12 * hour, 13 * hour, 0},       // none
		{5, 5, 0, 10, 1}, // one timestamp
		{math.MinInt64, math.MaxInt64, 0, math.MaxInt64, 0.5}, // the whole range
		{0, math.MaxInt64, 0, math.MaxInt64, 1},
	} {
		if got := timeShare(c.minTS, c.maxTS, c.start, c.end); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("timeShare(%d, %d, %d, %d) = %v, want %v", c.minTS, c.maxTS, c.start, c.end, got, c.want)
		}
	}
	if got := leastPartRows(false, 1); got != minPartRows {
		t.Errorf("whole file, read whole: %d, want %d", got, minPartRows)
	}
	if got := leastPartRows(true, 1); got != minPartRows/16 {
		t.Errorf("whole file, read in ranges: %d, want %d", got, minPartRows/16)
	}
	if got := leastPartRows(true, 1./12); got != minPartRows/16*12 {
		t.Errorf("an hour of 12, read in ranges: %d, want %d", got, minPartRows/16*12)
	}
	// Three hosts' hour of a 12-hour file (4,320 rows each): one part.
	runs := []sst.Run{{Key: "a", Start: 0, End: 4320}, {Key: "b", Start: 4320, End: 8640}, {Key: "c", Start: 8640, End: 12960}}
	if parts := splitRuns(runs, 4, leastPartRows(true, 1./12)); len(parts) != 1 {
		t.Errorf("an hour of three series: %d parts", len(parts))
	}
	if parts := splitRuns(runs, 4, leastPartRows(true, 1)); len(parts) != 3 {
		t.Errorf("all 12 hours of three series: %d parts, want 3", len(parts))
	}
}
