package region

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/scan"
)

func TestTruncate(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	r := open(t, s, Options{})
	mustWrite(t, r, pt("a", 1, fl("v", 1)), pt("b", 2, fl("v", 2)))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, r, pt("a", 3, fl("v", 3))) // in the memtable only
	before := r.Manifest()
	// A scan open across the truncate keeps its snapshot.
	sc, err := r.Scan(ctx, scan.Request{Start: AllTime, End: AllTimeEnd})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Truncate(ctx); err != nil {
		t.Fatal(err)
	}
	n := 0
	for sc.Next() {
		n += len(sc.Batch())
	}
	if err := sc.Err(); err != nil || n != 3 {
		t.Fatalf("scan open across truncate: %d rows, %v", n, err)
	}
	sc.Close()
	if got := scanAll(t, r, scan.Request{}); len(got) != 0 {
		t.Fatalf("after truncate: %q", got)
	}
	st := r.Manifest()
	if len(st.Files) != 0 || len(st.Removed) != len(before.Files) || st.FlushedSeq != 3 {
		t.Fatalf("after truncate: %d files, %d removed, flushed seq %d", len(st.Files), len(st.Removed), st.FlushedSeq)
	}
	// The WAL up to the cut is released: the stream's reference moves
	// past it, and what it covered is garbage.
	if len(st.Streams) != 1 || len(before.Streams) != 1 || st.Streams[0].From <= before.Streams[0].From ||
		!slices.Contains(st.StreamGarbage, manifest.StreamRef{Stream: st.Streams[0].Stream, From: before.Streams[0].From, End: st.Streams[0].From}) {
		t.Fatalf("after truncate: streams %+v (were %+v), garbage %+v", st.Streams, before.Streams, st.StreamGarbage)
	}
	if r.MemtableBytes() != 0 {
		t.Fatalf("memtables hold %d bytes after truncate", r.MemtableBytes())
	}
	// Later writes are kept, also across a reopen (which replays only
	// the WAL past the cut).
	mustWrite(t, r, pt("c", 4, fl("v", 4)))
	want := []string{"host=c 4 v=4"}
	if got := scanAll(t, r, scan.Request{}); !slices.Equal(got, want) {
		t.Fatalf("write after truncate: %q", got)
	}
	closeRegion(t, r, false)
	r = open(t, s, Options{})
	defer closeRegion(t, r, false)
	if got := scanAll(t, r, scan.Request{}); !slices.Equal(got, want) {
		t.Fatalf("after reopen: %q, want %q", got, want)
	}
	checkOwned(t, s, r.Manifest())
}

func TestTruncateCommitFailureKeepsData(t *testing.T) {
	ctx := context.Background()
	fs := faultstore.New(objstoretest.Mem(t))
	r := open(t, fs, Options{})
	defer closeRegion(t, r, false)
	mustWrite(t, r, pt("a", 1, fl("v", 1)))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, r, pt("a", 2, fl("v", 2)))
	fs.AddRule(faultstore.Rule{Match: func(c faultstore.Call) bool {
		return c.Op == objstore.OpPut && strings.Contains(c.Key, "/manifest/")
	}, N: 1, Action: faultstore.Fail})
	if err := r.Truncate(ctx); !errors.Is(err, faultstore.ErrInjected) {
		t.Fatalf("truncate with a failing commit: %v", err)
	}
	want := []string{"host=a 1 v=1", "host=a 2 v=2"}
	if got := scanAll(t, r, scan.Request{}); !slices.Equal(got, want) {
		t.Fatalf("after a failed truncate: %q, want %q", got, want)
	}
	// The frozen memtable still flushes.
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := scanAll(t, r, scan.Request{}); !slices.Equal(got, want) {
		t.Fatalf("after flush: %q", got)
	}
}
