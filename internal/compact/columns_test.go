package compact

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/testseed"
)

// TestColumnScanAfterCompaction: a compaction of files that are not
// neighbours in write order (the first and third of three flushes, which
// TWCS does when they share a time window) writes a file whose sequence
// range spans the file it skipped. A column scan reads the same values as a
// row scan all the same: it cannot order those two files by age, so it
// merges their rows.
func TestColumnScanAfterCompaction(t *testing.T) {
	s0 := testseed.Seed(t)
	ctx := context.Background()
	for round := range 6 {
		sd := s0 + uint64(round)
		rng := rand.New(rand.NewPCG(sd, 5))
		r := openRegion(t, objstoretest.Mem(t))
		for range 3 {
			var pts []row.Point
			for range 100 + rng.IntN(100) {
				pts = append(pts, row.Point{Tags: []row.Tag{{Name: "host", Value: "h" + strconv.Itoa(rng.IntN(6))}}, TS: int64(rng.IntN(300)),
					Fields: []row.Field{{Name: "v", Value: row.FloatValue(float64(rng.IntN(1000)))}}})
			}
			if _, err := r.Write(ctx, pts); err != nil {
				t.Fatal(err)
			}
			if err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		fs := SortedFiles(r.Manifest().Files) // by age
		if _, err := NewJob(r, []manifest.FileMeta{fs[0], fs[2]}, Options{RowGroupRows: 32, MaxOutputBytes: int64(1+rng.IntN(4)) * 2048}).Run(ctx); err != nil {
			t.Fatalf("seed %d: %v", sd, err)
		}
		req := scan.Request{Start: region.AllTime, End: region.AllTimeEnd, Fields: []string{"v"}}
		want, err := scanLines(ctx, r, req)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		rows := map[string]map[int64]float64{}
		err = r.ScanColumns(ctx, req, func(c *scan.Column) error {
			mu.Lock()
			defer mu.Unlock()
			if rows[c.Series] == nil {
				rows[c.Series] = map[int64]float64{}
			}
			for i, ts := range c.TS {
				rows[c.Series][ts] = row.NumberValue(c.Kind, c.Bits[i]).Float()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, k := range slices.Sorted(maps.Keys(rows)) {
			for _, ts := range slices.Sorted(maps.Keys(rows[k])) {
				got = append(got, fmt.Sprintf("%s %d v=%v", row.FormatSeries(k), ts, row.FloatValue(rows[k][ts])))
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d: a column scan after compacting files 1 and 3 of 3 reads %d rows, a row scan %d:\n%q\n%q", sd, len(got), len(want), got, want)
		}
		if err := r.Close(ctx, region.CloseOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
