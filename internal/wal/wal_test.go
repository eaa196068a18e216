package wal

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
)

var region = layout.RegionID{Table: 1, Region: 2}

func put(series string, ts int64, v float64) row.Entry {
	return row.Entry{Series: series, TS: ts, Op: row.Put, Fields: []row.Value{row.FloatValue(v), {}, row.StringValue("x"), row.UintValue(1 << 63), row.BoolValue(true), row.IntValue(-5)}}
}

func TestSegmentRoundTripAndCorruption(t *testing.T) {
	entries := []row.Entry{put("s1", 100, 1.5), {Series: "s2", TS: -50, End: 70, Op: row.Delete}, put("", 0, 0)}
	for i := range entries {
		entries[i].Seq = 41 + uint64(i)
	}
	data := encode(nil, false, 9, 41, entries)
	seg, err := Decode(12, data)
	if err != nil {
		t.Fatal(err)
	}
	if seg.Number != 12 || seg.Fence || seg.Epoch != 9 || seg.FirstSeq != 41 || seg.LastSeq() != 43 || len(seg.Entries) != 3 {
		t.Fatalf("segment %+v", seg)
	}
	for i, e := range seg.Entries {
		w := entries[i]
		if e.Series != w.Series || e.TS != w.TS || e.End != w.End || e.Op != w.Op || e.Seq != w.Seq || len(e.Fields) != len(w.Fields) {
			t.Fatalf("entry %d: got %v, want %v", i, e, w)
		}
		for j := range w.Fields {
			if !e.Fields[j].Equal(w.Fields[j]) {
				t.Fatalf("entry %d field %d: %v != %v", i, j, e.Fields[j], w.Fields[j])
			}
		}
	}
	fence, err := Decode(13, encode(nil, true, 10, 44, nil))
	if err != nil || !fence.Fence || fence.Epoch != 10 || len(fence.Entries) != 0 {
		t.Fatalf("fence %+v %v", fence, err)
	}
	// Every single-byte flip and every truncation is detected.
	for i := range data {
		bad := slices.Clone(data)
		bad[i] ^= 0x40
		if _, err := Decode(12, bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip at byte %d: %v", i, err)
		}
	}
	for n := range len(data) {
		if _, err := Decode(12, data[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
}

// recorder collects applied segments.
type recorder struct {
	mu   sync.Mutex
	segs []uint64
	n    int
}

func (r *recorder) apply(seg uint64, es []row.Entry) {
	r.mu.Lock()
	r.segs = append(r.segs, seg)
	r.n += len(es)
	r.mu.Unlock()
}

func replayAll(t *testing.T, s objstore.Bucket, epoch, flushedSeg, flushedSeq uint64) (next, nextSeq uint64, got []row.Entry) {
	t.Helper()
	next, nextSeq, err := Recover(context.Background(), s, region, epoch, flushedSeg, flushedSeq, func(seg *Segment) error {
		got = append(got, seg.Entries...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return next, nextSeq, got
}

func TestGroupCommitReplayAndFence(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	next, nextSeq, got := replayAll(t, s, 1, 0, 0)
	if next != 2 || nextSeq != 1 || len(got) != 0 {
		t.Fatalf("empty recover: next %d seq %d, %d entries", next, nextSeq, len(got))
	}
	rec := &recorder{}
	w := NewWriter(s, region, 1, next, nextSeq, Options{}, rec.apply)
	const writers, each = 8, 50
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				es := []row.Entry{put(fmt.Sprintf("g%d", g), int64(i), 1), put(fmt.Sprintf("g%d", g), int64(i), 2)}
				if err := w.Append(ctx, es); err != nil {
					t.Error(err)
					return
				}
				if es[1].Seq != es[0].Seq+1 {
					t.Errorf("a batch's sequences are not consecutive: %d, %d", es[0].Seq, es[1].Seq)
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.Entries != writers*each*2 || rec.n != writers*each*2 {
		t.Fatalf("stats %+v, applied %d", st, rec.n)
	}
	if !slices.IsSorted(rec.segs) || rec.segs[0] != 2 {
		t.Fatalf("segments applied out of order: %v", rec.segs)
	}
	if err := w.Append(ctx, []row.Entry{put("x", 1, 1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}

	// A new owner replays everything, in sequence order, and fences.
	next2, nextSeq2, got := replayAll(t, s, 2, 0, 0)
	if len(got) != writers*each*2 {
		t.Fatalf("replayed %d entries", len(got))
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) {
			t.Fatalf("entry %d has seq %d", i, e.Seq)
		}
	}
	if nextSeq2 != uint64(len(got)+1) || next2 != 2+st.Segments+1 {
		t.Fatalf("after replay: next %d seq %d (segments %d)", next2, nextSeq2, st.Segments)
	}
	// Replay above a flushed segment skips what is below it.
	_, _, part := replayAll(t, s, 3, 2, got[0].Seq)
	if len(part) == len(got) {
		t.Fatalf("flushed segment not skipped")
	}
}

func TestStaleWriterIsFenced(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	next, seq, _ := replayAll(t, s, 1, 0, 0)
	old := NewWriter(s, region, 1, next, seq, Options{}, func(uint64, []row.Entry) {})
	defer func() { _ = old.Close() }()
	if err := old.Append(ctx, []row.Entry{put("a", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	// A new owner takes over: replays the acknowledged write, fences.
	_, _, got := replayAll(t, s, 2, 0, 0)
	if len(got) != 1 {
		t.Fatalf("replayed %d", len(got))
	}
	err := old.Append(ctx, []row.Entry{put("a", 2, 2)})
	if !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("stale append: %v", err)
	}
	if err := old.Append(ctx, []row.Entry{put("a", 3, 3)}); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("fenced writer keeps failing: %v", err)
	}
	// The stale writer's rejected writes are not in the log.
	_, _, got = replayAll(t, s, 3, 0, 0)
	if len(got) != 1 {
		t.Fatalf("after fence, replay has %d entries", len(got))
	}
}

func TestAmbiguousSegmentIsResolved(t *testing.T) {
	for _, action := range []faultstore.Action{faultstore.Fail, faultstore.FailAfter} {
		t.Run(action.String(), func(t *testing.T) {
			ctx := context.Background()
			inner := objstoretest.Mem(t)
			next, seq, _ := replayAll(t, inner, 1, 0, 0)
			fs := faultstore.New(inner, faultstore.Rule{Match: faultstore.KeyContains(".wal"), N: 1, Action: action})
			rec := &recorder{}
			w := NewWriter(fs, region, 1, next, seq, Options{}, rec.apply)
			defer func() { _ = w.Close() }()
			err := w.Append(ctx, []row.Entry{put("a", 1, 1)})
			if !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("first append: %v", err)
			}
			if err := w.Append(ctx, []row.Entry{put("a", 2, 2)}); err != nil {
				t.Fatal(err)
			}
			_, _, got := replayAll(t, inner, 2, 0, 0)
			want := 1
			if action == faultstore.FailAfter {
				want = 2 // the ambiguous segment did land and is applied once
			}
			if len(got) != want || rec.n != want {
				t.Fatalf("replayed %d, applied %d, want %d", len(got), rec.n, want)
			}
			for i, e := range got {
				if e.Seq != uint64(i+1) {
					t.Fatalf("seq gap: %v", got)
				}
			}
		})
	}
}

// TestAmbiguousSegmentCollected: the ambiguous segment landed, a new owner
// replayed it and wrote its fence above, and GC deleted it. The writer
// claims nothing (an empty segment there would be owned by no one); it is
// fenced.
func TestAmbiguousSegmentCollected(t *testing.T) {
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	next, seq, _ := replayAll(t, inner, 1, 0, 0)
	fs := faultstore.New(inner, faultstore.Rule{Match: faultstore.KeyContains(".wal"), N: 1, Action: faultstore.FailAfter})
	w := NewWriter(fs, region, 1, next, seq, Options{}, (&recorder{}).apply)
	defer func() { _ = w.Close() }()
	if err := w.Append(ctx, []row.Entry{put("a", 1, 1)}); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("first append: %v", err)
	}
	_, _, got := replayAll(t, inner, 2, 0, 0)
	if len(got) != 1 {
		t.Fatalf("the new owner replayed %d entries, want 1", len(got))
	}
	if err := inner.Delete(ctx, region.WALKey(next)); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, []row.Entry{put("a", 2, 2)}); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("append after the collection: %v, want fence.ErrFenced", err)
	}
	if _, err := inner.Get(ctx, region.WALKey(next)); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("segment %d after the resolve: %v, want it absent", next, err)
	}
}

func TestRecoverDetectsGapsAndCorruption(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	seg := func(n, first uint64, es ...row.Entry) {
		for i := range es {
			es[i].Seq = first + uint64(i)
		}
		if err := s.Put(ctx, region.WALKey(n), encode(nil, false, 1, first, es)); err != nil {
			t.Fatal(err)
		}
	}
	seg(1, 1, put("a", 1, 1))
	seg(3, 2, put("a", 2, 1))
	if _, _, err := Recover(ctx, s, region, 2, 0, 0, func(*Segment) error { return nil }); !errors.Is(err, ErrGap) {
		t.Fatalf("gap: %v", err)
	}
	seg(2, 5, put("a", 3, 1)) // ok: sequences may skip (an abandoned group)
	seg(3, 3, put("a", 4, 1)) // behind segment 2's sequence
	if _, _, err := Recover(ctx, s, region, 2, 0, 0, func(*Segment) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("sequence behind: %v", err)
	}
	if err := s.Put(ctx, region.WALKey(3), []byte("not a segment")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Recover(ctx, s, region, 2, 0, 0, func(*Segment) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("garbage: %v", err)
	}
	// A replay error stops recovery.
	boom := errors.New("boom")
	if _, _, err := Recover(ctx, s, region, 2, 0, 0, func(*Segment) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("replay error: %v", err)
	}
}

func TestRecoverStoreFailures(t *testing.T) {
	ctx := context.Background()
	for _, op := range []objstore.Op{objstore.OpList, objstore.OpGet, objstore.OpPut} {
		inner := objstoretest.Mem(t)
		w := NewWriter(inner, region, 1, 1, 1, Options{}, func(uint64, []row.Entry) {})
		if err := w.Append(ctx, []row.Entry{put("a", 1, 1)}); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		fs := faultstore.New(inner, faultstore.Rule{Match: faultstore.OnOp(op), N: 1, Action: faultstore.Fail})
		if _, _, err := Recover(ctx, fs, region, 2, 0, 0, func(*Segment) error { return nil }); !errors.Is(err, faultstore.ErrInjected) {
			t.Fatalf("%s failure: %v", op, err)
		}
	}
}

// While a segment is being written, the appends that queue behind it go
// into the next segment together.
func TestAppendsQueuedBehindASegmentShareTheNext(t *testing.T) {
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	fs := faultstore.New(inner)
	const writers = 16
	var once sync.Once
	fs.Hook = func(c faultstore.Call) {
		if c.Op == objstore.OpPut {
			// Hold the first segment's write until every writer's append
			// is in (queued, or in this segment).
			once.Do(func() { waitQueued(t, writers, "(*Writer).Append") })
		}
	}
	rec := &recorder{}
	w := NewWriter(fs, region, 1, 1, 1, Options{}, rec.apply)
	defer func() { _ = w.Close() }()
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Append(ctx, []row.Entry{put("s", int64(g), 1)}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if st := w.Stats(); st.Segments >= writers || st.Entries != writers {
		t.Fatalf("%d appends took %d segments", writers, st.Segments)
	} else {
		t.Logf("%d appends in %d segments", writers, st.Segments)
	}
}

func TestWindowAndSegmentSizeBoundGroups(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	// A tiny segment cap: each append needs its own segment even though
	// the window would group them.
	rec := &recorder{}
	w := NewWriter(s, region, 1, 1, 1, Options{Window: 2 * time.Millisecond, MaxSegmentBytes: 1}, rec.apply)
	var wg sync.WaitGroup
	for g := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Append(ctx, []row.Entry{put("s", int64(g), 1)}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Segments != 10 {
		t.Fatalf("10 appends over a 1-byte cap took %d segments", st.Segments)
	}
	// A cancelled context before queuing fails fast and writes nothing.
	w2 := NewWriter(s, region, 1, 11, 11, Options{}, rec.apply)
	defer func() { _ = w2.Close() }()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	// NB: the send may still win the race with ctx.Done; both outcomes
	// are valid, but an error must be the context's.
	if err := w2.Append(cctx, []row.Entry{put("s", 99, 1)}); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled append: %v", err)
	}
}

// lateCreate holds the first segment create at the client (an error) and
// can land it later, as a store may commit a PUT its client gave up on.
type lateCreate struct {
	objstore.Bucket
	key   string
	held  []byte
	early bool // land the held create just before the next create of its key
}

func (s *lateCreate) CreateIfAbsent(ctx context.Context, key string, data []byte) error {
	if s.held == nil && strings.HasSuffix(key, ".wal") {
		s.key, s.held = key, append([]byte(nil), data...)
		return errors.New("connection reset after the body was sent")
	}
	if s.early && key == s.key {
		s.early = false
		_ = s.Bucket.CreateIfAbsent(ctx, key, s.held)
	}
	return s.Bucket.CreateIfAbsent(ctx, key, data)
}

// A segment create that failed at the client and was not found on read-back
// may still land: the writer claims its number with an empty segment, so the
// late landing is refused and no sequence is used twice.
func TestLateLandingSegmentIsRefused(t *testing.T) {
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	next, seq, _ := replayAll(t, inner, 1, 0, 0)
	ls := &lateCreate{Bucket: inner}
	rec := &recorder{}
	w := NewWriter(ls, region, 1, next, seq, Options{}, rec.apply)
	defer func() { _ = w.Close() }()
	if err := w.Append(ctx, []row.Entry{put("a", 1, 1)}); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("first append: %v", err)
	}
	if err := w.Append(ctx, []row.Entry{put("a", 2, 2)}); err != nil {
		t.Fatal(err)
	}
	// The held create lands now, late: refused.
	if err := inner.CreateIfAbsent(ctx, ls.key, ls.held); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("a late landing after the claim: %v", err)
	}
	_, _, got := replayAll(t, inner, 2, 0, 0)
	if len(got) != 1 || got[0].TS != 2 || got[0].Seq != 1 || rec.n != 1 {
		t.Fatalf("replayed %v, applied %d: want only the second write, at sequence 1", got, rec.n)
	}

	// Landing between the read-back and the claim: the claim finds the
	// original, which is applied once; nothing is fenced.
	inner2 := objstoretest.Mem(t)
	next, seq, _ = replayAll(t, inner2, 1, 0, 0)
	ls2 := &lateCreate{Bucket: inner2, early: true}
	rec2 := &recorder{}
	w2 := NewWriter(ls2, region, 1, next, seq, Options{}, rec2.apply)
	defer func() { _ = w2.Close() }()
	if err := w2.Append(ctx, []row.Entry{put("a", 1, 1)}); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("first append: %v", err)
	}
	if err := w2.Append(ctx, []row.Entry{put("a", 2, 2)}); err != nil {
		t.Fatalf("second append after an early late landing: %v", err)
	}
	_, _, got = replayAll(t, inner2, 2, 0, 0)
	if len(got) != 2 || rec2.n != 2 {
		t.Fatalf("replayed %v, applied %d: want both writes", got, rec2.n)
	}
}

// leaseRunsOut is a store whose create of a segment outlives the writer's
// lease: the lease passes while the request is in flight.
type leaseRunsOut struct {
	objstore.Bucket
	expire func()
}

func (s leaseRunsOut) CreateIfAbsent(ctx context.Context, key string, data []byte) error {
	s.expire()
	return s.Bucket.CreateIfAbsent(ctx, key, data)
}

// A segment that lands after the lease passed is never acknowledged: a new
// owner may already serve the region. The writer is fenced from then on,
// and refuses before writing anything once the lease has passed.
func TestNoAcknowledgementAfterTheLease(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	next, seq, _ := replayAll(t, s, 1, 0, 0)
	var mu sync.Mutex
	expired := false
	lease := func() error {
		mu.Lock()
		defer mu.Unlock()
		if expired {
			return errors.New("deadline passed")
		}
		return nil
	}
	applied := 0
	w := NewWriter(leaseRunsOut{s, func() { mu.Lock(); expired = true; mu.Unlock() }}, region, 1, next, seq, Options{Lease: lease}, func(uint64, []row.Entry) { applied++ })
	defer func() { _ = w.Close() }()
	err := w.Append(ctx, []row.Entry{put("a", 1, 1)})
	if !errors.Is(err, ErrLeaseExpired) || !errors.Is(err, fence.ErrFenced) || !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("an append that landed after the lease: %v", err)
	}
	if applied != 0 {
		t.Fatal("a segment landed after the lease was applied")
	}
	objs, _ := objstore.ListAll(ctx, s, region.WALPrefix(), 100)
	if err := w.Append(ctx, []row.Entry{put("a", 2, 2)}); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("an append after the lease: %v", err)
	}
	if after, _ := objstore.ListAll(ctx, s, region.WALPrefix(), 100); len(after) != len(objs) {
		t.Fatalf("a writer past its lease wrote a segment: %d objects, then %d", len(objs), len(after))
	}
}

// waitQueued waits until n goroutines are blocked in fn: handing their
// append to the writer's loop, or waiting for its outcome.
func waitQueued(t *testing.T, n int, fn string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	buf := make([]byte, 1<<20)
	for {
		stacks := string(buf[:runtime.Stack(buf, true)])
		queued := 0
		for _, g := range strings.Split(stacks, "\n\n") {
			if (strings.Contains(g, "[select") || strings.Contains(g, "[chan receive")) && strings.Contains(g, fn) {
				queued++
			}
		}
		if queued >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d of %d appends queued after a minute", queued, n)
			return
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}
