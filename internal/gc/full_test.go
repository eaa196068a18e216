package gc

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
)

func TestMain(m *testing.M) {
	code := m.Run()
	objstoretest.StopMinIO()
	os.Exit(code)
}

// backends are a counting Store over mem:// and over MinIO.
func backends(t *testing.T) map[string]func(t *testing.T) *objstore.Store {
	open := func(t *testing.T, url string) *objstore.Store {
		s, err := objstore.Open(context.Background(), url, objstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return map[string]func(t *testing.T) *objstore.Store{
		"mem":   func(t *testing.T) *objstore.Store { return open(t, "mem://") },
		"minio": func(t *testing.T) *objstore.Store { return open(t, objstoretest.MinIO(t).NewBucket(t)) },
	}
}

func point(host string, ts int64) row.Point {
	return row.Point{Tags: []row.Tag{{Name: "h", Value: host}}, TS: ts, Fields: []row.Field{{Name: "v", Value: row.FloatValue(float64(ts))}}}
}

func TestFullGCDeletesOnlyOldOrphans(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := open(t)
			clk := &clock{t: time.Now()}
			r, err := region.Open(ctx, store, rid, region.Options{Create: true, Logger: quiet, Now: clk.now})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = r.Close(ctx, region.CloseOptions{}) }()
			// Live files, removed files (compaction inputs), and a purged
			// watermark of the region's own WAL, which an earlier
			// version wrote up to segment 3.
			if err := r.Commit(ctx, manifest.Action{Edit: &manifest.Edit{FlushedSegment: 3}}); err != nil {
				t.Fatal(err)
			}
			for i := range 4 {
				if _, err := r.Write(ctx, []row.Point{point("a", int64(i))}); err != nil {
					t.Fatal(err)
				}
				if err := r.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := compact.NewJob(r, compact.SortedFiles(r.Manifest().Files), compact.Options{}).Run(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := Fast(ctx, r, Options{}); err != nil { // WAL purged; removed files still linger
				t.Fatal(err)
			}
			if _, err := r.Write(ctx, []row.Point{point("a", 100)}); err != nil { // a live row
				t.Fatal(err)
			}
			st := r.Manifest()
			var below uint64 // a purged WAL number that is not a kept fence
			for n := uint64(1); n < st.WALPurged && below == 0; n++ {
				if !st.IsFence(n) {
					below = n
				}
			}
			if below == 0 || len(st.Removed) != 4 {
				t.Fatalf("setup: WAL purged below %d (fences %v), %d removed", st.WALPurged, st.Fences, len(st.Removed))
			}
			// Orphans: an SST no manifest entry names, a WAL segment below
			// the purge watermark, and a key Strata never writes.
			orphans := []string{rid.SSTKey("01JORPHANORPHANORPHANORPHAN"), rid.WALKey(below), rid.Prefix() + "stray/notes.txt"}
			slices.Sort(orphans)
			for _, k := range orphans {
				if err := store.Put(ctx, k, []byte("orphan")); err != nil {
					t.Fatal(err)
				}
			}
			all, _ := objstore.ListAll(ctx, store, rid.Prefix(), 1000)
			n := len(all)
			const page = 4
			if n%page == 0 {
				// Keep the count off a page boundary so that the expected
				// number of LISTs does not depend on whether a backend
				// returns a final empty page.
				if err := store.Put(ctx, rid.Prefix()+"stray/more.txt", []byte("x")); err != nil {
					t.Fatal(err)
				}
				orphans = append(orphans, rid.Prefix()+"stray/more.txt")
				slices.Sort(orphans)
				n++
			}
			wantLists := (n + page - 1) / page
			keysOf := func(objs []Object) []string {
				var ks []string
				for _, o := range objs {
					ks = append(ks, o.Key)
				}
				return ks
			}

			// Young orphans are found and kept.
			rep, err := Full(ctx, r, FullOptions{PageSize: page})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(keysOf(rep.Orphans), orphans) || len(rep.Deleted) != 0 || rep.Young != len(orphans) {
				t.Fatalf("young orphans: found %v, deleted %v, young %d; want found %v", keysOf(rep.Orphans), keysOf(rep.Deleted), rep.Young, orphans)
			}
			// (The live rows' WAL is a stream, outside the region's prefix.)
			if rep.Listed != n || rep.Owned[OwnerRemoved] != 8 || rep.Owned[OwnerLive] != 2 || rep.Owned[OwnerManifest] == 0 {
				t.Fatalf("listed %d of %d, owned %v", rep.Listed, n, rep.Owned)
			}
			if sum := rep.ByKind(); sum[KindSST].Count != 1 || sum[KindWAL].Count != 1 || sum[KindOther].Count != len(orphans)-2 {
				t.Fatalf("by kind: %+v", sum)
			}

			// Past the minimum age, a dry run names exactly what a real
			// run deletes, and deletes nothing.
			clk.add(DefaultMinAge + time.Minute)
			reqs := store.Requests()
			dry, err := Full(ctx, r, FullOptions{PageSize: page, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(keysOf(dry.Deleted), orphans) || dry.Deletes != 0 {
				t.Fatalf("dry run would delete %v (issued %d deletes), want %v", keysOf(dry.Deleted), dry.Deletes, orphans)
			}
			if d := diff(store.Requests(), reqs); d[objstore.OpDelete] != 0 || d[objstore.OpList] != wantLists || dry.Lists != wantLists {
				t.Fatalf("dry run requests %v, reported %d LISTs; want %d LISTs for %d objects in pages of %d", d, dry.Lists, wantLists, n, page)
			}
			reqs = store.Requests()
			rep, err = Full(ctx, r, FullOptions{PageSize: page})
			if err != nil {
				t.Fatal(err)
			}
			d := diff(store.Requests(), reqs)
			// The orphans go in one batch request (objstore.DeleteMany).
			if !slices.Equal(keysOf(rep.Deleted), keysOf(dry.Deleted)) || rep.Deletes != len(orphans) || d[objstore.OpDelete] != 1 {
				t.Fatalf("deleted %v with %d deletes (%d requests), want %v in 1 request", keysOf(rep.Deleted), rep.Deletes, d[objstore.OpDelete], orphans)
			}
			if d[objstore.OpList] != wantLists || rep.Lists != wantLists || d[objstore.OpPut] != 0 {
				t.Fatalf("requests %v, reported %d LISTs; want %d LISTs and no writes", d, rep.Lists, wantLists)
			}
			left, _ := objstore.ListAll(ctx, store, rid.Prefix(), 1000)
			if len(left) != n-len(orphans) {
				t.Fatalf("%d objects left, want %d", len(left), n-len(orphans))
			}
			// Nothing owned was touched: the data reads back, and a
			// second run finds nothing.
			sc, err := r.Scan(ctx, scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
			if err != nil {
				t.Fatal(err)
			}
			rows := 0
			for sc.Next() {
				rows += len(sc.Batch())
			}
			if err := sc.Err(); err != nil || rows != 5 {
				t.Fatalf("after full GC: %d rows, %v", rows, err)
			}
			sc.Close()
			if rep, err := Full(ctx, r, FullOptions{}); err != nil || len(rep.Orphans) != 0 {
				t.Fatalf("second run: %+v %v", rep, err)
			}
		})
	}
}

func diff(after, before objstore.RequestCounts) map[objstore.Op]int {
	d := map[objstore.Op]int{}
	for op, n := range after {
		d[op] = int(n - before[op])
	}
	return d
}
