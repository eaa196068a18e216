package region

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
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
	sc, err := r.Scan(ctx, ScanRequest{Start: AllTime, End: AllTimeEnd})
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
	if got := scanAll(t, r, ScanRequest{}); len(got) != 0 {
		t.Fatalf("after truncate: %q", got)
	}
	st := r.Manifest()
	if len(st.Files) != 0 || len(st.Removed) != len(before.Files) || st.FlushedSeq != 3 || st.FlushedSegment < before.FlushedSegment+1 {
		t.Fatalf("after truncate: %d files, %d removed, flushed seq %d, segment %d (was %d)", len(st.Files), len(st.Removed), st.FlushedSeq, st.FlushedSegment, before.FlushedSegment)
	}
	if r.MemtableBytes() != 0 {
		t.Fatalf("memtables hold %d bytes after truncate", r.MemtableBytes())
	}
	// Later writes are kept, also across a reopen (which replays only
	// the WAL past the cut).
	mustWrite(t, r, pt("c", 4, fl("v", 4)))
	want := []string{"host=c 4 v=4"}
	if got := scanAll(t, r, ScanRequest{}); !slices.Equal(got, want) {
		t.Fatalf("write after truncate: %q", got)
	}
	closeRegion(t, r, false)
	r = open(t, s, Options{})
	defer closeRegion(t, r, false)
	if got := scanAll(t, r, ScanRequest{}); !slices.Equal(got, want) {
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
	if got := scanAll(t, r, ScanRequest{}); !slices.Equal(got, want) {
		t.Fatalf("after a failed truncate: %q, want %q", got, want)
	}
	// The frozen memtable still flushes.
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := scanAll(t, r, ScanRequest{}); !slices.Equal(got, want) {
		t.Fatalf("after flush: %q", got)
	}
}
