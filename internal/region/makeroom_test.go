package region

import (
	"context"
	"slices"
	"testing"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
)

// A memtable holds less than 2^32 sequences from its first (its rows keep
// the difference in 32 bits): entries past that go into a successor, the
// memtable frozen for a flush as if it were full, and the region's
// memory counts both.
func TestSequencesPastAMemtableGoToASuccessor(t *testing.T) {
	ctx := context.Background()
	r := open(t, objstoretest.Mem(t), Options{})
	defer closeRegion(t, r, false)
	mustWrite(t, r, pt("a", 10, fl("cpu", 1)))
	first := r.active
	key, _ := row.EncodeSeries(nil, []row.Tag{{Name: "host", Value: "b"}})
	const far = 1<<32 + 2
	stream, n := r.stream.Position()
	r.applyStream(stream, n, [][]row.Entry{{{Series: string(key), TS: 20, Seq: far, Op: row.Put, Fields: []row.Value{row.FloatValue(2)}}}})
	r.mu.Lock()
	active, frozen := r.active, slices.Contains(r.immutable, first)
	r.mu.Unlock()
	if active == first || active.Stats().MinSeq != far {
		t.Fatalf("the entry of sequence %d went into the memtable from 1", uint64(far))
	}
	if !frozen && r.Manifest().FlushedSeq < 1 {
		t.Fatal("the memtable from 1 is neither frozen nor flushed")
	}
	if got, want := scanAll(t, r, scan.Request{}), []string{"host=a 10 cpu=1", "host=b 20 cpu=2"}; !slices.Equal(got, want) {
		t.Fatalf("scan %q, want %q", got, want)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if st := r.Manifest(); len(st.Files) != 2 || st.FlushedSeq != far {
		t.Fatalf("after the flush: %d files, flushed seq %d", len(st.Files), st.FlushedSeq)
	}
	if b := r.MemtableBytes(); b != 0 {
		t.Fatalf("%d bytes of memtables left after every one flushed", b)
	}
}
