package gc_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/fsck"
	"github.com/stratadb/strata/internal/gc"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/wal"
)

func streamKeys(t *testing.T, s objstore.Bucket) []string {
	t.Helper()
	objs, err := objstore.ListAll(context.Background(), s, layout.StreamsPrefix, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

func hostPoint(host string, ts int64) []row.Point {
	return []row.Point{{Tags: []row.Tag{{Name: "host", Value: host}}, TS: ts, Fields: []row.Field{{Name: "v", Value: row.FloatValue(1)}}}}
}

// TestFastGCCollectsStreamSegments: two regions share a stream. A segment
// is deleted only once every region with entries in it has flushed past
// it: the first region's GC keeps what the second still needs, the
// second's deletes the rest. Run with the writer's index and, from a new
// process, without it (reading the segments).
func TestFastGCCollectsStreamSegments(t *testing.T) {
	for _, indexed := range []bool{true, false} {
		t.Run(fmt.Sprintf("indexed=%v", indexed), func(t *testing.T) {
			ctx := context.Background()
			counted := faultstore.New(objstoretest.Mem(t))
			n := 0
			s1 := wal.NewStream(counted, wal.StreamOptions{NewID: func() string { n++; return fmt.Sprintf("dn1/%d", n) }})
			defer func() { _ = s1.Close() }()
			ida, idb := layout.RegionID{Table: 5, Region: 1}, layout.RegionID{Table: 5, Region: 2}
			open := func(id layout.RegionID, s *wal.Stream) *region.Region {
				r, err := region.Open(ctx, counted, id, region.Options{Create: true, Stream: s, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			a, b := open(ida, s1), open(idb, s1)
			for i := range 4 {
				for _, r := range []*region.Region{a, b} {
					if _, err := r.Write(ctx, hostPoint("h", int64(i))); err != nil {
						t.Fatal(err)
					}
				}
			}
			segments := len(streamKeys(t, counted))
			if segments != 8 {
				t.Fatalf("%d stream segments, want 8", segments)
			}
			if err := a.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if !indexed {
				// A new process: the writer's index is gone.
				if err := a.Close(ctx, region.CloseOptions{}); err != nil {
					t.Fatal(err)
				}
				if err := b.Close(ctx, region.CloseOptions{}); err != nil {
					t.Fatal(err)
				}
				s2 := wal.NewStream(counted, wal.StreamOptions{NewID: func() string { return "dn2/1" }})
				defer func() { _ = s2.Close() }()
				a, b = open(ida, s2), open(idb, s2)
			}
			rep, err := gc.Fast(ctx, a, gc.Options{})
			if err != nil {
				t.Fatal(err)
			}
			// A's four segments go; B's stay (B needs them). On the live
			// stream the newest segment (B's) waits: a new owner seals a
			// stream above the last segment it lists.
			wantKept, wantGarbage := 4, 0
			if indexed {
				wantKept, wantGarbage = 3, 1
			}
			if rep.Stream.Deleted != 4 || rep.Stream.Kept != wantKept || len(rep.Stream.Collected) == 0 {
				t.Fatalf("A's GC: %+v", rep.Stream)
			}
			if indexed && rep.Stream.Reads != 0 {
				t.Fatalf("A's GC read %d segments with the writer's index at hand", rep.Stream.Reads)
			}
			if g := a.Manifest().StreamGarbage; len(g) != wantGarbage || (indexed && g[0].From != 8) {
				t.Fatalf("A's garbage after GC: %+v", g)
			}
			want := segments - 4
			if !indexed {
				want++ // the new process's fence sealing the stream
			}
			if got := len(streamKeys(t, counted)); got != want {
				t.Fatalf("%d stream objects after A's GC, want %d", got, want)
			}
			if err := b.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := gc.Fast(ctx, b, gc.Options{}); err != nil {
				t.Fatal(err)
			}
			left := streamKeys(t, counted)
			if indexed {
				// The live stream's newest segment stays, released by
				// both regions; then the rest is as below.
				if len(left) != 1 || left[0] != layout.StreamKey("dn1/1", 8) {
					t.Fatalf("left after both GCs: %v", left)
				}
				rep2, err := fsck.Check(ctx, counted, fsck.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if rep2.OrphanCount() != 0 || rep2.Streams.AwaitingGC != 1 {
					t.Fatalf("fsck: %d orphans %v, streams %+v", rep2.OrphanCount(), rep2.Orphans, rep2.Streams)
				}
			}
			// What remains is the sealed stream's fence (kept) when a new
			// process sealed it.
			for _, k := range left {
				if indexed {
					break
				}
				data, err := counted.Get(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				_, num, _ := layout.ParseStreamKey(k)
				seg, err := wal.DecodeStream(num, data, nil)
				if err != nil || !seg.Fence {
					t.Fatalf("left after both GCs: %s (fence=%v, err %v); all %v", k, seg != nil && seg.Fence, err, left)
				}
				if !slices.ContainsFunc(b.Manifest().StreamFences, func(f manifest.StreamRef) bool { return f.End == num }) {
					t.Fatalf("fence %s is not recorded by B", k)
				}
			}
			// fsck accounts for every stream object; one no region covers is
			// an orphan.
			rep2, err := fsck.Check(ctx, counted, fsck.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if rep2.OrphanCount() != 0 || rep2.Streams.Listed != len(left) || (!indexed && rep2.Streams.Fences != len(left)) {
				t.Fatalf("fsck: %d orphans %v, streams %+v", rep2.OrphanCount(), rep2.Orphans, rep2.Streams)
			}
			stray := layout.StreamKey("dn9/1", 1)
			if err := counted.Put(ctx, stray, []byte("x")); err != nil {
				t.Fatal(err)
			}
			rep2, err = fsck.Check(ctx, counted, fsck.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep2.Orphans) != 1 || rep2.Orphans[0].Key != stray || rep2.Orphans[0].Kind != gc.KindStream {
				t.Fatalf("fsck orphans %+v, want %s", rep2.Orphans, stray)
			}
			if note := rep2.Orphans[0].Note; !strings.HasPrefix(note, "undecodable") || !strings.HasSuffix(note, "no manifest names the stream") {
				t.Fatalf("fsck explains the stray segment as %q", note)
			}
			if err := a.Close(ctx, region.CloseOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(ctx, region.CloseOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
