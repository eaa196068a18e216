package wal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/walstream"
)

func TestStreamSegmentRoundTripAndCorruption(t *testing.T) {
	a, b := layout.RegionID{Table: 1, Region: 1}, layout.RegionID{Table: 7, Region: 3}
	blocks := []Block{
		{Region: a, Epoch: 4, FirstSeq: 10, Entries: []row.Entry{put("s1", 1, 1), put("s2", 2, 2)}},
		{Region: b, Epoch: 9, FirstSeq: 1, Entries: []row.Entry{{Series: "x", TS: 5, End: 9, Op: row.Delete}}},
	}
	data := encodeStream(nil, false, blocks)
	seg, err := DecodeStream(3, data)
	if err != nil {
		t.Fatal(err)
	}
	if seg.Number != 3 || seg.Fence || len(seg.Blocks) != 2 {
		t.Fatalf("segment %+v", seg)
	}
	for i, want := range blocks {
		got := seg.Blocks[i]
		if got.Region != want.Region || got.Epoch != want.Epoch || got.FirstSeq != want.FirstSeq || len(got.Entries) != len(want.Entries) {
			t.Fatalf("block %d: %+v, want %+v", i, got, want)
		}
		for j, e := range got.Entries {
			if e.Seq != want.FirstSeq+uint64(j) || e.Series != want.Entries[j].Series || e.TS != want.Entries[j].TS || e.End != want.Entries[j].End {
				t.Fatalf("block %d entry %d: %+v", i, j, e)
			}
		}
	}
	if blk, ok := seg.Block(b); !ok || blk.Region != b {
		t.Fatal("Block(b) not found")
	}
	if _, ok := seg.Block(layout.RegionID{Table: 2}); ok {
		t.Fatal("Block of an absent region found")
	}
	fence, err := DecodeStream(4, encodeStream(nil, true, []Block{{Region: a, Epoch: 5}}))
	if err != nil || !fence.Fence || len(fence.Blocks) != 1 || len(fence.Blocks[0].Entries) != 0 {
		t.Fatalf("fence %+v %v", fence, err)
	}
	for i := range data {
		bad := slices.Clone(data)
		bad[i] ^= 0x20
		if _, err := DecodeStream(3, bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip at byte %d: %v", i, err)
		}
	}
	for n := range len(data) {
		if _, err := DecodeStream(3, data[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
}

// streamIDs names streams s1, s2, ... in order.
func streamIDs() func() string {
	var n atomic.Int64
	return func() string { return fmt.Sprintf("dn/s%d", n.Add(1)) }
}

// memberLog is a region's view of a stream: what its manifest recorded and
// what was applied.
type memberLog struct {
	mu      sync.Mutex
	region  layout.RegionID
	refs    []string // streams recorded, in order
	from    map[string]uint64
	applied []row.Entry
	fenced  bool // Record fails as a fenced region would
	recs    []Recording
}

func newMemberLog(region layout.RegionID) *memberLog {
	return &memberLog{region: region, from: map[string]uint64{}}
}

func (r *memberLog) options(epoch, nextSeq uint64) MemberOptions {
	return MemberOptions{Region: r.region, Epoch: epoch, NextSeq: nextSeq,
		Record: func(_ context.Context, rec Recording) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.fenced {
				return fmt.Errorf("%w: manifest taken", fence.ErrFenced)
			}
			r.refs = append(r.refs, rec.Stream)
			r.from[rec.Stream] = rec.From
			r.recs = append(r.recs, rec)
			return nil
		},
		Apply: func(_ string, _ uint64, appends [][]row.Entry) {
			entries := slices.Concat(appends...)
			r.mu.Lock()
			defer r.mu.Unlock()
			r.applied = append(r.applied, entries...)
		},
	}
}

// replayAll replays the memberLog's streams as a new owner would.
func (r *memberLog) replayAll(t *testing.T, store objstore.Bucket, epoch uint64) []row.Entry {
	t.Helper()
	var got []row.Entry
	for _, s := range r.refs {
		if _, _, err := ReplayStream(context.Background(), store, r.region, epoch, s, r.from[s], false, func(_ uint64, b *Block) error {
			got = append(got, b.Entries...)
			return nil
		}); err != nil {
			t.Fatalf("replay %s: %v", s, err)
		}
	}
	return got
}

func TestStreamCarriesManyRegionsInOneSegment(t *testing.T) {
	store := objstoretest.Mem(t)
	const regions = 4
	write := func(i int) []row.Entry { return []row.Entry{put(fmt.Sprintf("s%d", i), int64(i), float64(i))} }
	total := 0 // the four writes' encoded size: the segment closes when they are in
	for i := range regions {
		enc, _, _ := encodeRequest(write(i))
		total += len(enc)
	}
	// The window never ends by time: the segment closes when the fourth
	// write fills it.
	s := NewStream(store, StreamOptions{Window: time.Hour, MaxSegmentBytes: total, NewID: streamIDs()})
	defer func() { _ = s.Close() }()
	var recs []*memberLog
	var wg sync.WaitGroup
	errs := make(chan error, regions)
	for i := range regions {
		rec := newMemberLog(layout.RegionID{Table: 1, Region: uint32(i)})
		recs = append(recs, rec)
		m, err := s.Attach(rec.options(1, 1))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- m.Append(context.Background(), write(i))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Segments != 1 || st.Entries != regions {
		t.Fatalf("stats %+v: want 1 segment of %d entries", st, regions)
	}
	for i, rec := range recs {
		got := rec.replayAll(t, store, 1)
		if len(got) != 1 || got[0].Series != fmt.Sprintf("s%d", i) || got[0].Seq != 1 || len(rec.applied) != 1 {
			t.Fatalf("region %d: replayed %v, applied %v", i, got, rec.applied)
		}
	}
}

// TestStreamSealedByNewOwner: region A's new owner seals the stream while
// its writer still carries A and B. The writer rolls over: B records the
// new stream and goes on, A's record fails and A acknowledges nothing more.
// Every write acknowledged to either is found by replay.
func TestStreamSealedByNewOwner(t *testing.T) {
	store := objstoretest.Mem(t)
	s := NewStream(store, StreamOptions{NewID: streamIDs()})
	defer func() { _ = s.Close() }()
	a, b := newMemberLog(layout.RegionID{Table: 1, Region: 1}), newMemberLog(layout.RegionID{Table: 1, Region: 2})
	ma, _ := s.Attach(a.options(1, 1))
	mb, _ := s.Attach(b.options(1, 1))
	ctx := context.Background()
	for i := range 3 {
		for _, m := range []*Member{ma, mb} {
			if err := m.Append(ctx, []row.Entry{put("s", int64(i), 1)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A's new owner (epoch 2) replays and seals.
	var replayed []row.Entry
	end, _, err := ReplayStream(ctx, store, a.region, 2, a.refs[0], a.from[a.refs[0]], false, func(_ uint64, blk *Block) error {
		replayed = append(replayed, blk.Entries...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(replayed) != 3 || end != 7 {
		t.Fatalf("replayed %d entries, fence at %d; want 3 and 7", len(replayed), end)
	}
	a.mu.Lock()
	a.fenced = true // A's manifest now has a newer owner
	a.mu.Unlock()
	if err := ma.Append(ctx, []row.Entry{put("s", 9, 9)}); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("former owner's append: %v, want fence.ErrFenced", err)
	}
	if err := mb.Append(ctx, []row.Entry{put("s", 9, 9)}); err != nil {
		t.Fatalf("B after the rollover: %v", err)
	}
	if st := s.Stats(); st.Rollovers != 1 || s.ID() != "dn/s2" {
		t.Fatalf("stats %+v, stream %s", st, s.ID())
	}
	if !slices.Equal(b.refs, []string{"dn/s1", "dn/s2"}) || b.from["dn/s2"] != 1 {
		t.Fatalf("B recorded %v %v", b.refs, b.from)
	}
	if r := b.recs[1]; r.NextSeq != 4 || r.Ended["dn/s1"] != 7 {
		t.Fatalf("B's second recording %+v: want next seq 4, dn/s1 ended at 7", r)
	}
	// B's entries: three in the sealed stream, one in the new; sequences
	// continue across the rollover.
	got := b.replayAll(t, store, 1)
	if len(got) != 4 || got[3].Seq != 4 || got[3].TS != 9 {
		t.Fatalf("B replayed %v", got)
	}
	if err := ma.Append(ctx, []row.Entry{put("s", 10, 9)}); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("fenced member stays fenced: %v", err)
	}
}

// TestStreamReplayRacesTheWriter: the writer lands a segment after the new
// owner listed the stream; the owner's fence finds the number taken,
// replays the segment and seals above it, so the acknowledged write is
// not lost.
func TestStreamReplayRacesTheWriter(t *testing.T) {
	mem := objstoretest.Mem(t)
	var hook func()
	store := &hookStore{Bucket: mem, afterList: func() {
		if hook != nil {
			h := hook
			hook = nil
			h()
		}
	}}
	s := NewStream(store, StreamOptions{NewID: streamIDs()})
	defer func() { _ = s.Close() }()
	a := newMemberLog(layout.RegionID{Table: 1, Region: 1})
	ma, _ := s.Attach(a.options(1, 1))
	ctx := context.Background()
	if err := ma.Append(ctx, []row.Entry{put("s", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	hook = func() {
		if err := ma.Append(ctx, []row.Entry{put("s", 2, 2)}); err != nil {
			t.Errorf("late append: %v", err)
		}
	}
	var replayed []int64
	end, _, err := ReplayStream(ctx, store, a.region, 2, "dn/s1", 1, false, func(_ uint64, blk *Block) error {
		for _, e := range blk.Entries {
			replayed = append(replayed, e.TS)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(replayed, []int64{1, 2}) || end != 3 {
		t.Fatalf("replayed %v, fence at %d", replayed, end)
	}
}

// TestStreamAmbiguousCreate: a create whose outcome is lost is resolved by
// the next group: a segment that landed is applied once, one that did not
// is voided and its sequences reused. Replay skips the void.
func TestStreamAmbiguousCreate(t *testing.T) {
	for _, action := range []faultstore.Action{faultstore.FailAfter, faultstore.Fail} {
		t.Run(action.String(), func(t *testing.T) {
			fs := faultstore.New(objstoretest.Mem(t), faultstore.Rule{Match: faultstore.KeyContains(layout.StreamsPrefix), N: 2, Action: action})
			s := NewStream(fs, StreamOptions{NewID: streamIDs()})
			defer func() { _ = s.Close() }()
			a := newMemberLog(layout.RegionID{Table: 1, Region: 1})
			ma, _ := s.Attach(a.options(1, 1))
			ctx := context.Background()
			if err := ma.Append(ctx, []row.Entry{put("s", 1, 1)}); err != nil {
				t.Fatal(err)
			}
			if err := ma.Append(ctx, []row.Entry{put("s", 2, 2)}); !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("ambiguous append: %v", err)
			}
			if err := ma.Append(ctx, []row.Entry{put("s", 3, 3)}); err != nil {
				t.Fatal(err)
			}
			got := a.replayAll(t, fs, 1)
			var ts []int64
			var seqs []uint64
			for _, e := range got {
				ts, seqs = append(ts, e.TS), append(seqs, e.Seq)
			}
			want, wantSeq := []int64{1, 2, 3}, []uint64{1, 2, 3}
			if action == faultstore.Fail {
				want, wantSeq = []int64{1, 3}, []uint64{1, 2}
			}
			if !slices.Equal(ts, want) || !slices.Equal(seqs, wantSeq) {
				t.Fatalf("replayed ts %v seq %v, want %v %v", ts, seqs, want, wantSeq)
			}
			if len(a.applied) != len(want) {
				t.Fatalf("applied %d entries, want %d", len(a.applied), len(want))
			}
		})
	}
}

// TestStreamAmbiguousCreateCollected: the ambiguous create landed; while
// its writer did not know, a region's new owner replayed it, sealed the
// stream above it and GC deleted it (what a paused datanode wakes up to).
// Resolving it then claims nothing (an empty segment there would be owned
// by no one): the writer rolls over, and the stream holds only the fence.
func TestStreamAmbiguousCreateCollected(t *testing.T) {
	inner := objstoretest.Mem(t)
	fs := faultstore.New(inner, faultstore.Rule{Match: faultstore.KeyContains(layout.StreamsPrefix), N: 2, Action: faultstore.FailAfter})
	s := NewStream(fs, StreamOptions{NewID: streamIDs()})
	defer func() { _ = s.Close() }()
	a := newMemberLog(layout.RegionID{Table: 1, Region: 1})
	ma, _ := s.Attach(a.options(1, 1))
	ctx := context.Background()
	if err := ma.Append(ctx, []row.Entry{put("s", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	stream := s.ID()
	if err := ma.Append(ctx, []row.Entry{put("s", 2, 2)}); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("ambiguous append: %v", err)
	}
	// The new owner of another region in segment 2 seals at 3, flushes,
	// and GC deletes 1 and 2.
	other := layout.RegionID{Table: 1, Region: 2}
	end, seal, err := ReplayStream(ctx, inner, other, 1, stream, 1, false, func(uint64, *Block) error { return nil })
	if err != nil || seal != walstream.SealWritten || end != 3 {
		t.Fatalf("seal: %d %v %v", end, seal, err)
	}
	for n := uint64(1); n < end; n++ {
		if err := inner.Delete(ctx, layout.StreamKey(stream, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ma.Append(ctx, []row.Entry{put("s", 3, 3)}); err != nil {
		t.Fatal(err)
	}
	if s.ID() == stream || s.Stats().Rollovers != 1 {
		t.Fatalf("no rollover: stream %s, stats %+v", s.ID(), s.Stats())
	}
	left, err := objstore.ListAll(ctx, inner, layout.StreamPrefix(stream), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Key != layout.StreamKey(stream, 3) {
		t.Fatalf("sealed stream holds %v, want only its fence", left)
	}
	if rec := a.recs[len(a.recs)-1]; rec.Ended[stream] != 3 {
		t.Fatalf("the new stream's recording ends the old at %d, want 3", rec.Ended[stream])
	}
}

func TestStreamMemberClose(t *testing.T) {
	store := objstoretest.Mem(t)
	s := NewStream(store, StreamOptions{NewID: streamIDs()})
	a := newMemberLog(layout.RegionID{Table: 1, Region: 1})
	ma, _ := s.Attach(a.options(1, 1))
	if _, err := s.Attach(a.options(1, 1)); !errors.Is(err, ErrAttached) {
		t.Fatalf("second attach: %v", err)
	}
	ma.Close()
	if err := ma.Append(context.Background(), []row.Entry{put("s", 1, 1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if _, err := s.Attach(a.options(2, 1)); err != nil {
		t.Fatalf("reattach after close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Attach(a.options(3, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("attach after stream close: %v", err)
	}
}

type hookStore struct {
	objstore.Bucket
	afterList func()
}

func (h *hookStore) List(ctx context.Context, prefix string, token []byte, n int) (objstore.Page, error) {
	p, err := h.Bucket.List(ctx, prefix, token, n)
	h.afterList()
	return p, err
}

// Appends of one region that share a segment reach it in one Apply call,
// in their order, with consecutive sequences: a region's flush cuts
// between segments, never inside one.
func TestStreamAppliesABlockAtOnce(t *testing.T) {
	store := objstoretest.Mem(t)
	const appends = 4
	write := func(i int) []row.Entry {
		return []row.Entry{put(fmt.Sprintf("s%d", i), int64(i), float64(i)), put(fmt.Sprintf("t%d", i), int64(i), float64(i))}
	}
	total := 0
	for i := range appends {
		enc, _, _ := encodeRequest(write(i))
		total += len(enc)
	}
	s := NewStream(store, StreamOptions{Window: time.Hour, MaxSegmentBytes: total, NewID: streamIDs()})
	defer func() { _ = s.Close() }()
	rec := newMemberLog(layout.RegionID{Table: 1, Region: 0})
	opts := rec.options(1, 1)
	var calls [][][]row.Entry
	apply := opts.Apply
	opts.Apply = func(stream string, n uint64, lists [][]row.Entry) {
		calls = append(calls, lists) // on the stream's goroutine, before the acknowledgements
		apply(stream, n, lists)
	}
	m, err := s.Attach(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var wg sync.WaitGroup
	errs := make(chan error, appends)
	for i := range appends {
		wg.Go(func() { errs <- m.Append(context.Background(), write(i)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Segments != 1 || len(calls) != 1 || len(calls[0]) != appends {
		t.Fatalf("stats %+v, %d apply calls: want one segment applied in one call of %d appends", st, len(calls), appends)
	}
	seq := uint64(1)
	for _, list := range calls[0] {
		for _, e := range list {
			if e.Seq != seq {
				t.Fatalf("applied %v: sequence %d, want %d", calls[0], e.Seq, seq)
			}
			seq++
		}
	}
	if got := rec.replayAll(t, store, 1); len(got) != 2*appends {
		t.Fatalf("replayed %v", got)
	}
}
