package region

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/wal"
	"github.com/stratadb/strata/internal/walstream"
)

var streamSeq atomic.Int64

// newStream starts a stream as one datanode process would.
func newStream(t testing.TB, s objstore.Bucket, node string) *wal.Stream {
	t.Helper()
	st := wal.NewStream(s, wal.StreamOptions{NewID: func() string { return fmt.Sprintf("%s/%04d", node, streamSeq.Add(1)) }})
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func openAt(t testing.TB, s objstore.Bucket, id layout.RegionID, opts Options) *Region {
	t.Helper()
	opts.Create = true
	opts.Logger = quiet
	r, err := Open(context.Background(), s, id, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestStreamRegionsShareSegments: regions of one datanode write through
// one stream; a new process replays each region's rows from it, exactly.
func TestStreamRegionsShareSegments(t *testing.T) {
	store := objstoretest.Mem(t)
	stream := newStream(t, store, "dn1")
	const regions, writes = 4, 25
	var rs []*Region
	for i := range regions {
		rs = append(rs, openAt(t, store, layout.RegionID{Table: 9, Region: uint32(i)}, Options{Stream: stream}))
	}
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range writes {
				mustWrite(t, r, pt(fmt.Sprintf("h%d", i), int64(w), fl("v", float64(w))))
			}
		}()
	}
	wg.Wait()
	if st := stream.Stats(); st.Entries != regions*writes || st.Segments > regions*writes {
		t.Fatalf("stream stats %+v", st)
	}
	for _, r := range rs {
		if n := len(r.Manifest().Streams); n != 1 {
			t.Fatalf("region %s records %d streams, want 1", r.ID(), n)
		}
		closeRegion(t, r, false)
	}
	// Another process: its own stream; the old one is replayed and sealed.
	stream2 := newStream(t, store, "dn2")
	for i := range regions {
		r := openAt(t, store, layout.RegionID{Table: 9, Region: uint32(i)}, Options{Stream: stream2})
		got := scanAll(t, r, scan.Request{})
		if len(got) != writes {
			t.Fatalf("region %d: %d rows after reopen, want %d", i, len(got), writes)
		}
		st := r.Manifest()
		if len(st.Streams) != 1 || st.Streams[0].End == 0 || st.Streams[0].LastSeq != writes {
			t.Fatalf("region %d streams %+v", i, st.Streams)
		}
		mustWrite(t, r, pt("x", 1000, fl("v", 1)))
		if st := r.Manifest(); len(st.Streams) != 2 || st.Streams[1].Stream != stream2.ID() {
			t.Fatalf("region %d after a write: streams %+v", i, st.Streams)
		}
		closeRegion(t, r, false)
	}
}

// TestStreamNewOwnerWhileFormerRuns: region A moves to a second datanode
// while the first still runs and carries region B on the same stream. The
// new owner seals the stream; the former owner of A acknowledges nothing
// more, B rolls over to a new stream and loses nothing; every acknowledged
// row of both is found by their next owners. The same with every write a
// forwarded batch that the WAL holds as it came (Batch.Encoded).
func TestStreamNewOwnerWhileFormerRuns(t *testing.T) {
	for _, forwarded := range []bool{false, true} {
		t.Run(fmt.Sprint("forwarded=", forwarded), func(t *testing.T) { testNewOwnerWhileFormerRuns(t, forwarded) })
	}
}

func testNewOwnerWhileFormerRuns(t *testing.T, forwarded bool) {
	store := objstoretest.Mem(t)
	ctx := context.Background()
	var dec func([]byte) ([]row.Point, [][]byte, error)
	if forwarded {
		dec = decodeForwarded
	}
	write := func(r *Region, p row.Point) error {
		var err error
		if forwarded {
			_, err = r.WriteBatch(ctx, forwardedBatch(t, []row.Point{p}))
		} else {
			_, err = r.Write(ctx, []row.Point{p})
		}
		return err
	}
	mustWrite := func(t *testing.T, r *Region, p row.Point) {
		t.Helper()
		if err := write(r, p); err != nil {
			t.Fatal(err)
		}
	}
	ida, idb := layout.RegionID{Table: 9, Region: 1}, layout.RegionID{Table: 9, Region: 2}
	s1 := newStream(t, store, "dn1")
	a1 := openAt(t, store, ida, Options{Stream: s1, DecodeForwarded: dec})
	b1 := openAt(t, store, idb, Options{Stream: s1, DecodeForwarded: dec})
	for i := range 5 {
		mustWrite(t, a1, pt("a", int64(i), fl("v", 1)))
		mustWrite(t, b1, pt("b", int64(i), fl("v", 1)))
	}
	// A's new owner on dn2, with dn1 still running.
	s2 := newStream(t, store, "dn2")
	a2 := openAt(t, store, ida, Options{Stream: s2, DecodeForwarded: dec})
	if got := scanAll(t, a2, scan.Request{}); len(got) != 5 {
		t.Fatalf("new owner of A sees %d rows, want 5", len(got))
	}
	if err := write(a1, pt("a", 99, fl("v", 1))); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("former owner's write: %v, want fence.ErrFenced", err)
	}
	// B goes on, in a new stream of dn1.
	for i := 5; i < 8; i++ {
		mustWrite(t, b1, pt("b", int64(i), fl("v", 1)))
	}
	if s1.Stats().Rollovers != 1 {
		t.Fatalf("dn1 stream stats %+v: want one rollover", s1.Stats())
	}
	st := b1.Manifest()
	if len(st.Streams) != 2 || st.Streams[0].End == 0 || st.Streams[0].LastSeq != 5 || st.Streams[1].Stream != s1.ID() {
		t.Fatalf("B's streams after the rollover: %+v", st.Streams)
	}
	mustWrite(t, a2, pt("a", 100, fl("v", 1)))
	// A third process takes both: every acknowledged row is there.
	s3 := newStream(t, store, "dn3")
	a3 := openAt(t, store, ida, Options{Stream: s3, DecodeForwarded: dec})
	b3 := openAt(t, store, idb, Options{Stream: s3, DecodeForwarded: dec})
	if got := scanAll(t, a3, scan.Request{}); len(got) != 6 {
		t.Fatalf("A: %d rows, want 6: %v", len(got), got)
	}
	if got := scanAll(t, b3, scan.Request{}); len(got) != 8 {
		t.Fatalf("B: %d rows, want 8: %v", len(got), got)
	}
	for _, r := range []*Region{a1, b1, a2, a3, b3} {
		if err := r.Close(ctx, CloseOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStreamOpenRecordsFenceInOwnStream: an open elsewhere sealed this
// process's stream and crashed before recording the fence; the region then
// comes back to this process. Its open finds the fence in its own (live)
// stream and records it, so the fence has an owner, and the region's
// writes roll over to a new stream.
func TestStreamOpenRecordsFenceInOwnStream(t *testing.T) {
	store := objstoretest.Mem(t)
	ctx := context.Background()
	s1 := newStream(t, store, "dn1")
	r := openAt(t, store, testRegion, Options{Stream: s1})
	for i := range 3 {
		mustWrite(t, r, pt("a", int64(i), fl("v", 1)))
	}
	st := r.Manifest()
	closeRegion(t, r, false)
	// The other open: it seals and records nothing.
	fence, seal, err := wal.ReplayStream(ctx, store, testRegion, st.Epoch+1, s1.ID(), st.Streams[0].From, false, nil, func(uint64, *wal.Block) error { return nil })
	if err != nil || seal != walstream.SealWritten {
		t.Fatalf("seal: %v %v", seal, err)
	}
	r = openAt(t, store, testRegion, Options{Stream: s1})
	if got := scanAll(t, r, scan.Request{}); len(got) != 3 {
		t.Fatalf("%d rows after reopen, want 3", len(got))
	}
	want := manifest.StreamRef{Stream: s1.ID(), End: fence}
	if st := r.Manifest(); !slices.Contains(st.StreamFences, want) || st.Streams[0].End != fence {
		t.Fatalf("the fence %d in the live stream is not recorded: fences %+v, streams %+v", fence, st.StreamFences, st.Streams)
	}
	sealed := s1.ID()
	mustWrite(t, r, pt("a", 10, fl("v", 1)))
	if s1.ID() == sealed || s1.Stats().Rollovers != 1 {
		t.Fatalf("the write did not roll over: stream %s, stats %+v", s1.ID(), s1.Stats())
	}
	closeRegion(t, r, false)
	r = openAt(t, store, testRegion, Options{Stream: newStream(t, store, "dn2")})
	if got := scanAll(t, r, scan.Request{}); len(got) != 4 {
		t.Fatalf("%d rows at the next owner, want 4", len(got))
	}
	closeRegion(t, r, false)
}

// TestStreamFlushReleasesSegments: a flush moves the live stream's From
// past what it made durable and hands the range to GC; a stream that ended
// is dropped once flushed past.
func TestStreamFlushReleasesSegments(t *testing.T) {
	store := objstoretest.Mem(t)
	s1 := newStream(t, store, "dn1")
	var released []*Region // OnWALReleased runs on the flushing goroutine
	r := openAt(t, store, testRegion, Options{Stream: s1, OnWALReleased: func(r *Region) { released = append(released, r) }})
	for i := range 3 {
		mustWrite(t, r, pt("a", int64(i), fl("v", 1)))
	}
	if len(released) != 0 {
		t.Fatalf("released before a flush: %d", len(released))
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(released) != 1 || released[0] != r {
		t.Fatalf("OnWALReleased after the flush: %d calls", len(released))
	}
	st := r.Manifest()
	_, next := s1.Position()
	if len(st.Streams) != 1 || st.Streams[0].From != next {
		t.Fatalf("after flush: streams %+v, stream next %d", st.Streams, next)
	}
	if !slices.Equal(st.StreamGarbage, []manifest.StreamRef{{Stream: s1.ID(), From: 1, End: next}}) {
		t.Fatalf("garbage %+v", st.StreamGarbage)
	}
	mustWrite(t, r, pt("a", 10, fl("v", 1)))
	closeRegion(t, r, false)
	// The next owner seals the stream; after its flush nothing of the old
	// stream is needed.
	s2 := newStream(t, store, "dn2")
	r2 := openAt(t, store, testRegion, Options{Stream: s2})
	if got := scanAll(t, r2, scan.Request{}); len(got) != 4 {
		t.Fatalf("%d rows, want 4", len(got))
	}
	if err := r2.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	st = r2.Manifest()
	if len(st.Streams) != 0 {
		t.Fatalf("streams after the new owner's flush: %+v", st.Streams)
	}
	if len(st.StreamFences) != 1 || st.StreamFences[0].Stream != s1.ID() {
		t.Fatalf("stream fences %+v", st.StreamFences)
	}
	closeRegion(t, r2, false)
}

// TestWALMetricsCountSegments: strata_wal_segments_total, _bytes_total and
// the PUT latency histogram count what each WAL writes, in both modes.
func TestWALMetricsCountSegments(t *testing.T) {
	for _, mode := range []string{"own", "stream"} {
		t.Run(mode, func(t *testing.T) {
			store := objstoretest.Mem(t)
			m := NewMetrics(nil)
			opts := Options{Metrics: m}
			if mode == "stream" {
				s := wal.NewStream(store, wal.StreamOptions{NewID: func() string { return "dn/1" }, OnPut: m.ObserveWALPut})
				t.Cleanup(func() { _ = s.Close() })
				opts.Stream = s
			}
			r := openAt(t, store, testRegion, opts)
			defer closeRegion(t, r, false)
			for i := range 3 {
				mustWrite(t, r, pt("a", int64(i), fl("v", 1)))
			}
			if got := testutil.ToFloat64(m.WALSegments); got != 3 {
				t.Fatalf("strata_wal_segments_total %v, want 3", got)
			}
			if testutil.ToFloat64(m.WALBytes) <= 0 {
				t.Fatal("strata_wal_bytes_total did not move")
			}
			if n := testutil.CollectAndCount(m.WALPut); n != 1 {
				t.Fatalf("histogram series %d", n)
			}
		})
	}
}
