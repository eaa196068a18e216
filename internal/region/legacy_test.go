package region_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stratadb/strata/internal/gc"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
)

// testdata/legacy-own-wal is a store the version before the one WAL writer
// wrote (commit c024ebd), with its own per-region WAL: region 1/1 opened,
// written (rows at ts 1 to 3 of hosts a and b), flushed (WAL segments 1
// to 4, the fence 1 among them), written again (ts 4, 5: segments 5, 6),
// closed; opened by a second owner (fence 7), written (ts 6, 7: segments
// 8, 9) and closed, nothing of the last four writes flushed.
const legacyStore = "testdata/legacy-own-wal"

var legacyRegion = layout.RegionID{Table: 1, Region: 1}

// loadStore copies a directory of objects (a key a file) into a store.
func loadStore(t *testing.T, dir string, s objstore.Bucket) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		return s.Put(context.Background(), filepath.ToSlash(rel), data)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// legacyRows is what the store's writes hold, through ts n.
func legacyRows(n int64) map[string]float64 {
	want := map[string]float64{}
	for ts := int64(1); ts <= n; ts++ {
		want[fmt.Sprintf("a %d", ts)] = float64(ts) * 1.5
		want[fmt.Sprintf("b %d", ts)] = -float64(ts)
	}
	return want
}

func scanRows(t *testing.T, r *region.Region) map[string]float64 {
	t.Helper()
	sc, err := r.Scan(context.Background(), scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	got := map[string]float64{}
	for sc.Next() {
		for _, e := range sc.Batch() {
			got[fmt.Sprintf("%s %d", row.SeriesTag(e.Series, "host"), e.TS)] = e.Fields[0].Float()
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// ownWAL lists the region's own WAL segments.
func ownWAL(t *testing.T, s objstore.Bucket) []uint64 {
	t.Helper()
	objs, err := objstore.ListAll(context.Background(), s, legacyRegion.WALPrefix(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ns []uint64
	for _, o := range objs {
		n, ok := legacyRegion.ParseWALKey(o.Key)
		if !ok {
			t.Fatalf("unknown object %s", o.Key)
		}
		ns = append(ns, n)
	}
	return ns
}

// A store written with a region's own WAL opens and loses nothing: the
// first open replays the log above the flushed segment and seals it, so
// the former owner's next append fails; later opens read what is left
// below the seal without listing it; a flush carries the flushed segment
// past it and fast GC deletes its segments but the fences.
func TestLegacyOwnWALStoreOpens(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	inner := objstoretest.Mem(t)
	loadStore(t, legacyStore, inner)
	if got := ownWAL(t, inner); !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("the fixture's WAL: %v", got)
	}
	var mu sync.Mutex
	var walCalls []faultstore.Call // calls on the region's own WAL
	s := faultstore.New(inner)
	s.Hook = func(c faultstore.Call) {
		if strings.HasPrefix(c.Key, legacyRegion.WALPrefix()) {
			mu.Lock()
			walCalls = append(walCalls, c)
			mu.Unlock()
		}
	}
	calls := func() []faultstore.Call {
		mu.Lock()
		defer mu.Unlock()
		c := walCalls
		walCalls = nil
		return c
	}
	check := func(r *region.Region, want map[string]float64) {
		t.Helper()
		if got := scanRows(t, r); len(got) != len(want) {
			t.Fatalf("%d rows, want %d: %v", len(got), len(want), got)
		} else {
			for k, v := range want {
				if got[k] != v {
					t.Fatalf("%s = %v, want %v", k, got[k], v)
				}
			}
		}
	}

	r, err := region.Open(ctx, s, legacyRegion, region.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	check(r, legacyRows(7))
	st := r.Manifest()
	if !slices.Equal(st.Fences, []uint64{1, 7, 10}) || st.WALSealed != 10 || st.FlushedSegment != 4 {
		t.Fatalf("after the first open: fences %v, sealed at %d, flushed segment %d", st.Fences, st.WALSealed, st.FlushedSegment)
	}
	var listed bool
	for _, c := range calls() {
		listed = listed || c.Op == objstore.OpList
	}
	if !listed {
		t.Fatal("the first open did not list the region's own WAL")
	}
	// The former owner's next append targets the seal.
	if err := inner.CreateIfAbsent(ctx, legacyRegion.WALKey(10), []byte("late")); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("a former owner's append at the seal: %v", err)
	}
	if _, err := r.Write(ctx, []row.Point{{Tags: []row.Tag{{Name: "host", Value: "a"}}, TS: 8, Fields: []row.Field{{Name: "v", Value: row.FloatValue(12)}}}}); err != nil {
		t.Fatal(err)
	}
	want := legacyRows(7)
	want["a 8"] = 12
	check(r, want)
	if err := r.Close(ctx, region.CloseOptions{}); err != nil {
		t.Fatal(err)
	}
	if c := calls(); len(c) != 0 {
		t.Fatalf("writes touched the region's own WAL: %v", c)
	}

	// Reopened unflushed: what is left below the seal is read by number.
	r, err = region.Open(ctx, s, legacyRegion, region.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close(ctx, region.CloseOptions{}) }()
	check(r, want)
	for _, c := range calls() {
		if c.Op != objstore.OpGet {
			t.Fatalf("an open below the seal: %s %s", c.Op, c.Key)
		}
	}
	if st := r.Manifest(); !slices.Equal(st.Fences, []uint64{1, 7, 10}) {
		t.Fatalf("fences %v after the second open", st.Fences)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := r.Manifest(); st.FlushedSegment != 9 {
		t.Fatalf("flushed segment %d, want 9", st.FlushedSegment)
	}
	rep, err := gc.Fast(ctx, r, gc.Options{Lingering: -1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.WALSegments != 7 || !slices.Equal(ownWAL(t, inner), []uint64{1, 7, 10}) {
		t.Fatalf("fast GC deleted %d segments; the WAL holds %v, want the fences 1, 7, 10", rep.WALSegments, ownWAL(t, inner))
	}
	if err := r.Close(ctx, region.CloseOptions{}); err != nil {
		t.Fatal(err)
	}
	calls()

	// Flushed past: an open does not touch the log at all.
	r, err = region.Open(ctx, s, legacyRegion, region.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	check(r, want)
	if c := calls(); len(c) != 0 {
		t.Fatalf("an open of a flushed, sealed log: %v", c)
	}

	// An owner of the earlier version opens the region again: its fence
	// (11) is above the seal, so the next open lists the log and seals it
	// anew.
	fence, err := inner.Get(ctx, legacyRegion.WALKey(7))
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Put(ctx, legacyRegion.WALKey(11), fence); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(ctx, manifest.Action{Fences: &manifest.WALFences{Segments: []uint64{11}}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx, region.CloseOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err = region.Open(ctx, s, legacyRegion, region.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	check(r, want)
	if st := r.Manifest(); !slices.Equal(st.Fences, []uint64{1, 7, 10, 11, 12}) || st.WALSealed != 12 {
		t.Fatalf("after an earlier version's open: fences %v, sealed at %d", st.Fences, st.WALSealed)
	}
}
