package region

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
)

// A region's counts are exact as series come: counted whole (files and a
// memtable holding some of the same series), then only the memtable's
// new series looked up (the kept pairs shared, the new ones apart, then
// folded into one map once many), then whole again after a flush.
func TestCardinalityKeptFollowsSeries(t *testing.T) {
	ctx := context.Background()
	r := open(t, objstoretest.Mem(t), Options{})
	defer closeRegion(t, r, false)
	hosts := map[int]bool{}
	write := func(from, to int, ts int64) {
		t.Helper()
		var pts []row.Point
		for i := from; i < to; i++ {
			hosts[i] = true
			pts = append(pts, row.Point{Tags: []row.Tag{{Name: "host", Value: fmt.Sprintf("h%05d", i)}, {Name: "rack", Value: fmt.Sprintf("r%d", i%5)}},
				TS: ts, Fields: []row.Field{fl("v", 1)}})
		}
		mustWrite(t, r, pts...)
	}
	check := func(what string, delta bool) {
		t.Helper()
		want := map[row.Tag]int64{}
		for i := range hosts {
			want[row.Tag{Name: "host", Value: fmt.Sprintf("h%05d", i)}]++
			want[row.Tag{Name: "rack", Value: fmt.Sprintf("r%d", i%5)}]++
		}
		groups, err := r.Cardinality(ctx, AllTime, AllTimeEnd)
		if err != nil {
			t.Fatal(err)
		}
		g := groups[""]
		if len(groups) != 1 || g == nil || g.Series != int64(len(hosts)) {
			t.Fatalf("%s: %d groups, %+v series, want %d", what, len(groups), g, len(hosts))
		}
		got := map[row.Tag]int64{}
		g.Each(func(t row.Tag, n int64) { got[t] = n })
		if !maps.Equal(got, want) {
			t.Fatalf("%s: %d pairs, want %d", what, len(got), len(want))
		}
		if _, more := g.Split(); (more != nil) != delta {
			t.Fatalf("%s: counted the new series alone: %v, want %v", what, more != nil, delta)
		}
	}
	write(0, 3000, 10)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	write(0, 500, 20) // in the file and the memtable
	check("a file and a memtable", false)
	check("again", false)
	write(400, 2600, 30) // 2,100 more of the file's, 0 new
	write(3000, 5000, 30)
	check("2,000 new series", true)
	write(5000, 6500, 40)
	write(100, 200, 40)
	check("1,500 more, folded", true)
	recounts := r.cardinality.recounts
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The flushed memtable's file holds its series: the counts stay.
	check("after a flush", true)
	if r.cardinality.recounts != recounts {
		t.Fatalf("a flush made the counts list every key again (%d recounts, %d before)", r.cardinality.recounts, recounts)
	}
	write(7000, 7100, 50)
	write(0, 10, 50)
	check("100 new after the flush", true)
	if r.cardinality.recounts != recounts {
		t.Fatalf("new series after a flush were not looked up alone (%d recounts, %d before)", r.cardinality.recounts, recounts)
	}
	// A range that cuts the memtable's rows is counted whole, and leaves
	// the kept counts as they were.
	write(6500, 6501, 1000)
	if groups, err := r.Cardinality(ctx, 1000, 2000); err != nil || groups[""].Series != 1 {
		t.Fatalf("the series of [1000, 2000): %v %v", groups, err)
	}
	check("all again", true)
	// A memtable counted in part (it gained series since) is counted
	// whole by its flush, before the file takes its place.
	write(8000, 8010, 60)
	recounts = r.cardinality.recounts
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("a memtable flushed with series not counted", true)
	if r.cardinality.recounts != recounts {
		t.Fatalf("%d recounts, want %d", r.cardinality.recounts, recounts)
	}
}

// A series a memtable gains while a count lists it (here while the file's
// series index is read) is counted once, by that count and the next ones;
// rows of series counted before still move the counts' time bounds.
func TestCardinalityOfASeriesAddedWhileCounting(t *testing.T) {
	ctx := context.Background()
	var armed atomic.Bool
	var r *Region
	var hookErr error
	s := faultstore.New(objstoretest.Mem(t))
	s.Hook = func(c faultstore.Call) {
		if strings.HasSuffix(c.Key, ".series") && armed.CompareAndSwap(true, false) {
			_, hookErr = r.Write(ctx, []row.Point{pt("d", 30, fl("v", 1))})
		}
	}
	r = open(t, s, Options{})
	defer closeRegion(t, r, false)
	mustWrite(t, r, pt("a", 10, fl("v", 1)), pt("b", 10, fl("v", 1)))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, r, pt("b", 20, fl("v", 1)), pt("c", 20, fl("v", 1)))
	armed.Store(true)
	for i := range 3 {
		groups, err := r.Cardinality(ctx, AllTime, AllTimeEnd)
		if err != nil || hookErr != nil {
			t.Fatal(err, hookErr)
		}
		if g := groups[""]; g == nil || g.Series != 4 || g.MaxTS != 30 {
			t.Fatalf("count %d: %+v, want 4 series (a, b, c and d, written while the first count listed) up to ts 30", i, g)
		}
	}
	if armed.Load() {
		t.Fatal("the count read no series index: nothing was written during it")
	}
	mustWrite(t, r, pt("a", 500, fl("v", 1)))
	if groups, err := r.Cardinality(ctx, AllTime, AllTimeEnd); err != nil || groups[""].Series != 4 || groups[""].MaxTS != 500 {
		t.Fatalf("after a row of a counted series at 500: %+v %v", groups[""], err)
	}
}

// A change of files other than a flush (a compaction's commit, here one
// removing a file) counts the series again in the background, once they
// were asked for: the next request finds them counted.
func TestCardinalityCountedAgainAfterAChangeOfFiles(t *testing.T) {
	ctx := context.Background()
	r := open(t, objstoretest.Mem(t), Options{})
	defer closeRegion(t, r, false)
	mustWrite(t, r, pt("a", 10, fl("v", 1)), pt("b", 10, fl("v", 1)))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	first := slices.Collect(maps.Keys(r.Manifest().Files))
	mustWrite(t, r, pt("c", 20, fl("v", 1)))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if r.cardinality.recent() {
		t.Fatal("asked for counts before any request")
	}
	if err := r.Commit(ctx, manifest.Action{Edit: &manifest.Edit{Remove: first}}); err != nil {
		t.Fatal(err)
	}
	if groups, err := r.Cardinality(ctx, AllTime, AllTimeEnd); err != nil || groups[""].Series != 1 {
		t.Fatalf("series of the second file: %+v %v", groups[""], err)
	}
	recounted := func() int {
		r.cardinality.mu.Lock()
		defer r.cardinality.mu.Unlock()
		return r.cardinality.recounts
	}
	before := recounted()
	mustWrite(t, r, pt("d", 30, fl("v", 1)), pt("e", 30, fl("v", 1)))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	second := slices.Collect(maps.Keys(r.Manifest().Files))
	slices.Sort(second)
	if err := r.Commit(ctx, manifest.Action{Edit: &manifest.Edit{Remove: second[:1]}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for recounted() == before {
		if time.Now().After(deadline) {
			t.Fatal("no count in the background after the commit")
		}
		time.Sleep(5 * time.Millisecond) // polling a background goroutine's count: no signal to wait on
	}
	after := recounted()
	groups, err := r.Cardinality(ctx, AllTime, AllTimeEnd)
	if err != nil {
		t.Fatal(err)
	}
	if recounted() != after {
		t.Fatal("the request counted again: the background count was not kept")
	}
	left := 0
	for range r.Manifest().Files {
		left++
	}
	if left != 1 || groups[""].Series != 2 {
		t.Fatalf("%d files, %+v series, want 1 file of d and e", left, groups[""])
	}
}
