package wal

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/walstream"
)

var region = layout.RegionID{Table: 1, Region: 2}

func put(series string, ts int64, v float64) row.Entry {
	return row.Entry{Series: series, TS: ts, Op: row.Put, Fields: []row.Value{row.FloatValue(v), {}, row.StringValue("x"), row.UintValue(1 << 63), row.BoolValue(true), row.IntValue(-5)}}
}

func TestStreamSegmentRoundTripAndCorruption(t *testing.T) {
	a, b := layout.RegionID{Table: 1, Region: 1}, layout.RegionID{Table: 7, Region: 3}
	blocks := []Block{
		{Region: a, Epoch: 4, FirstSeq: 10, Entries: []row.Entry{put("s1", 1, 1), put("s2", 2, 2)}},
		{Region: b, Epoch: 9, FirstSeq: 1, Entries: []row.Entry{{Series: "x", TS: 5, End: 9, Op: row.Delete}}},
	}
	data := encodeStream(nil, false, blocks)
	seg, err := DecodeStream(3, data, nil)
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
	fence, err := DecodeStream(4, encodeStream(nil, true, []Block{{Region: a, Epoch: 5}}), nil)
	if err != nil || !fence.Fence || len(fence.Blocks) != 1 || len(fence.Blocks[0].Entries) != 0 {
		t.Fatalf("fence %+v %v", fence, err)
	}
	for i := range data {
		bad := slices.Clone(data)
		bad[i] ^= 0x20
		if _, err := DecodeStream(3, bad, nil); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip at byte %d: %v", i, err)
		}
	}
	for n := range len(data) {
		if _, err := DecodeStream(3, data[:n], nil); !errors.Is(err, ErrCorrupt) {
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
		if _, _, err := ReplayStream(context.Background(), store, r.region, epoch, s, r.from[s], false, nil, func(_ uint64, b *Block) error {
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
	end, _, err := ReplayStream(ctx, store, a.region, 2, a.refs[0], a.from[a.refs[0]], false, nil, func(_ uint64, blk *Block) error {
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
	end, _, err := ReplayStream(ctx, store, a.region, 2, "dn/s1", 1, false, nil, func(_ uint64, blk *Block) error {
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

// TestStreamAmbiguousCreateKeepsItsOwnEntries: a writer told the outcome
// is unknown has its Append back and reuses its memory (the write path
// hands the stream keys that point into request buffers). The stream
// keeps the group until it resolves it, and applies the segment that had
// landed as it was written, not as the writer's buffers read now.
func TestStreamAmbiguousCreateKeepsItsOwnEntries(t *testing.T) {
	fs := faultstore.New(objstoretest.Mem(t), faultstore.Rule{Match: faultstore.KeyContains(layout.StreamsPrefix), N: 1, Action: faultstore.FailAfter})
	s := NewStream(fs, StreamOptions{NewID: streamIDs()})
	defer func() { _ = s.Close() }()
	a := newMemberLog(layout.RegionID{Table: 1, Region: 1})
	ma, _ := s.Attach(a.options(1, 1))
	ctx := context.Background()
	key, str := []byte("series-a"), []byte("value-a")
	entries := []row.Entry{{Series: unsafe.String(&key[0], len(key)), TS: 1, Op: row.Put,
		Fields: []row.Value{row.FloatValue(1), row.StringValue(unsafe.String(&str[0], len(str)))}}}
	if err := ma.Append(ctx, entries); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("ambiguous append: %v", err)
	}
	copy(key, "series-b")
	copy(str, "value-b")
	entries[0].TS, entries[0].Fields[0] = 99, row.FloatValue(99)
	if err := ma.Append(ctx, []row.Entry{put("s", 2, 2)}); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.applied) != 2 {
		t.Fatalf("applied %v, want the resolved entry and the next", a.applied)
	}
	got := a.applied[0]
	if got.Series != "series-a" || got.TS != 1 || got.Fields[0] != row.FloatValue(1) || got.Fields[1].Str() != "value-a" || got.Seq != 1 {
		t.Fatalf("the resolved segment applied %+v, want series-a at 1 with 1 and value-a", got)
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
	end, seal, err := ReplayStream(ctx, inner, other, 1, stream, 1, false, nil, func(uint64, *Block) error { return nil })
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

// One member, many writers: appends group-commit into segments applied in
// order, each append's sequences consecutive; a new owner replays every
// entry in sequence order; appends after Close fail.
func TestStreamGroupCommitReplay(t *testing.T) {
	ctx := context.Background()
	store := objstoretest.Mem(t)
	s := NewStream(store, StreamOptions{NewID: streamIDs()})
	a := newMemberLog(region)
	opts := a.options(1, 1)
	var segs []uint64
	apply := opts.Apply
	opts.Apply = func(stream string, n uint64, lists [][]row.Entry) {
		segs = append(segs, n) // on the stream's goroutine
		apply(stream, n, lists)
	}
	m, err := s.Attach(opts)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 50
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				es := []row.Entry{put(fmt.Sprintf("g%d", g), int64(i), 1), put(fmt.Sprintf("g%d", g), int64(i), 2)}
				if err := m.Append(ctx, es); err != nil {
					t.Error(err)
					return
				}
				if es[1].Seq != es[0].Seq+1 {
					t.Errorf("an append's sequences are not consecutive: %d, %d", es[0].Seq, es[1].Seq)
				}
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Entries != writers*each*2 || len(a.applied) != writers*each*2 {
		t.Fatalf("stats %+v, applied %d", st, len(a.applied))
	}
	if !slices.IsSorted(segs) || segs[0] != 1 || uint64(len(segs)) != st.Segments {
		t.Fatalf("segments applied out of order: %v", segs)
	}
	if err := m.Append(ctx, []row.Entry{put("x", 1, 1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	got := a.replayAll(t, store, 2)
	if len(got) != writers*each*2 {
		t.Fatalf("replayed %d entries", len(got))
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) {
			t.Fatalf("entry %d has seq %d", i, e.Seq)
		}
	}
}

// A region's own stream, its one member fenced: a new owner replays and
// seals; the former owner's appends fail from then on (its record of the
// new stream fails on its manifest), and none of them is in any stream.
func TestStreamStaleMemberIsFenced(t *testing.T) {
	ctx := context.Background()
	store := objstoretest.Mem(t)
	s := NewStream(store, StreamOptions{NewID: streamIDs()})
	defer func() { _ = s.Close() }()
	a := newMemberLog(region)
	old, _ := s.Attach(a.options(1, 1))
	if err := old.Append(ctx, []row.Entry{put("a", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	if got := a.replayAll(t, store, 2); len(got) != 1 {
		t.Fatalf("the new owner replayed %d entries", len(got))
	}
	a.mu.Lock()
	a.fenced = true
	a.mu.Unlock()
	for i := range 2 {
		if err := old.Append(ctx, []row.Entry{put("a", int64(2+i), 2)}); !errors.Is(err, fence.ErrFenced) {
			t.Fatalf("stale append %d: %v", i, err)
		}
	}
	objs, err := objstore.ListAll(ctx, store, layout.StreamsPrefix, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		stream, n, _ := layout.ParseStreamKey(o.Key)
		data, _ := store.Get(ctx, o.Key)
		seg, err := DecodeStream(n, data, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range seg.Blocks {
			if len(b.Entries) > 0 && (stream != "dn/s1" || n != 1) {
				t.Fatalf("%s holds %d entries after the fence", o.Key, len(b.Entries))
			}
		}
	}
}

// While a segment is being written, the appends that queue behind it go
// into the next segment together.
func TestStreamAppendsQueuedBehindASegmentShareTheNext(t *testing.T) {
	ctx := context.Background()
	fs := faultstore.New(objstoretest.Mem(t))
	const writers = 16
	var once sync.Once
	fs.Hook = func(c faultstore.Call) {
		if c.Op == objstore.OpPut {
			// Hold the first segment's write until every writer's append
			// is in (queued, or in this segment).
			once.Do(func() { waitQueued(t, writers, "(*Member).Append") })
		}
	}
	s := NewStream(fs, StreamOptions{NewID: streamIDs()})
	defer func() { _ = s.Close() }()
	m, _ := s.Attach(newMemberLog(region).options(1, 1))
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			if err := m.Append(ctx, []row.Entry{put("s", int64(g), 1)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if st := s.Stats(); st.Segments >= writers || st.Entries != writers {
		t.Fatalf("%d appends took %d segments", writers, st.Segments)
	} else {
		t.Logf("%d appends in %d segments", writers, st.Segments)
	}
}

func TestStreamWindowAndSegmentSizeBoundGroups(t *testing.T) {
	ctx := context.Background()
	store := objstoretest.Mem(t)
	// A tiny segment cap: each append needs its own segment even though
	// the window would group them.
	s := NewStream(store, StreamOptions{Window: 2 * time.Millisecond, MaxSegmentBytes: 1, NewID: streamIDs()})
	m, _ := s.Attach(newMemberLog(region).options(1, 1))
	var wg sync.WaitGroup
	for g := range 10 {
		wg.Go(func() {
			if err := m.Append(ctx, []row.Entry{put("s", int64(g), 1)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Segments != 10 {
		t.Fatalf("10 appends over a 1-byte cap took %d segments", st.Segments)
	}
	// A cancelled context before queuing fails fast and writes nothing.
	s2 := NewStream(store, StreamOptions{NewID: streamIDs()})
	defer func() { _ = s2.Close() }()
	m2, _ := s2.Attach(newMemberLog(region).options(1, 11))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	// NB: the send may still win the race with ctx.Done; both outcomes
	// are valid, but an error must be the context's.
	if err := m2.Append(cctx, []row.Entry{put("s", 99, 1)}); err != nil && !errors.Is(err, context.Canceled) {
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
		_ = s.Bucket.CreateIfAbsent(ctx, key, s.held) // the held create lands now, or already did
	}
	return s.Bucket.CreateIfAbsent(ctx, key, data)
}

// A segment create that failed at the client and was not found on read-back
// may still land: the writer claims its number with a void segment, so the
// late landing is refused and no sequence is used twice.
func TestStreamLateLandingSegmentIsRefused(t *testing.T) {
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	ls := &lateCreate{Bucket: inner}
	s := NewStream(ls, StreamOptions{NewID: streamIDs()})
	defer func() { _ = s.Close() }()
	a := newMemberLog(region)
	m, _ := s.Attach(a.options(1, 1))
	if err := m.Append(ctx, []row.Entry{put("a", 1, 1)}); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("first append: %v", err)
	}
	if err := m.Append(ctx, []row.Entry{put("a", 2, 2)}); err != nil {
		t.Fatal(err)
	}
	// The held create lands now, late: refused.
	if err := inner.CreateIfAbsent(ctx, ls.key, ls.held); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("a late landing after the claim: %v", err)
	}
	got := a.replayAll(t, inner, 2)
	if len(got) != 1 || got[0].TS != 2 || got[0].Seq != 1 || len(a.applied) != 1 {
		t.Fatalf("replayed %v, applied %d: want only the second write, at sequence 1", got, len(a.applied))
	}

	// Landing between the read-back and the claim: the claim finds the
	// original, which is applied once; nothing is fenced.
	inner2 := objstoretest.Mem(t)
	ls2 := &lateCreate{Bucket: inner2, early: true}
	s2 := NewStream(ls2, StreamOptions{NewID: streamIDs()})
	defer func() { _ = s2.Close() }()
	a2 := newMemberLog(region)
	m2, _ := s2.Attach(a2.options(1, 1))
	if err := m2.Append(ctx, []row.Entry{put("a", 1, 1)}); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("first append: %v", err)
	}
	if err := m2.Append(ctx, []row.Entry{put("a", 2, 2)}); err != nil {
		t.Fatalf("second append after an early late landing: %v", err)
	}
	got = a2.replayAll(t, inner2, 2)
	if len(got) != 2 || len(a2.applied) != 2 {
		t.Fatalf("replayed %v, applied %d: want both writes", got, len(a2.applied))
	}
}

// leaseRunsOut is a store whose create of a segment outlives the member's
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
// owner may already serve the region. The member is fenced from then on,
// and refuses before writing anything once the lease has passed.
func TestStreamNoAcknowledgementAfterTheLease(t *testing.T) {
	ctx := context.Background()
	store := objstoretest.Mem(t)
	var mu sync.Mutex
	deadline := time.Now().Add(time.Hour)
	lease := func() time.Time { mu.Lock(); defer mu.Unlock(); return deadline }
	expire := func() { mu.Lock(); deadline = time.Now(); mu.Unlock() }
	s := NewStream(leaseRunsOut{store, expire}, StreamOptions{NewID: streamIDs()})
	defer func() { _ = s.Close() }()
	a := newMemberLog(region)
	opts := a.options(1, 1)
	opts.Lease = lease
	m, _ := s.Attach(opts)
	err := m.Append(ctx, []row.Entry{put("a", 1, 1)})
	if !errors.Is(err, ErrLeaseExpired) || !errors.Is(err, fence.ErrFenced) || !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("an append that landed after the lease: %v", err)
	}
	if len(a.applied) != 0 {
		t.Fatal("a segment landed after the lease was applied")
	}
	objs, _ := objstore.ListAll(ctx, store, layout.StreamsPrefix, 100)
	if err := m.Append(ctx, []row.Entry{put("a", 2, 2)}); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("an append after the lease: %v", err)
	}
	if after, _ := objstore.ListAll(ctx, store, layout.StreamsPrefix, 100); len(after) != len(objs) {
		t.Fatalf("a member past its lease wrote a segment: %d objects, then %d", len(objs), len(after))
	}
}

// waitQueued waits until n goroutines are blocked in fn: handing their
// append to the stream's loop, or waiting for its outcome.
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

// A write that queued while a segment was written has waited: its window
// counts from its arrival, so it goes out once that segment is done, not
// a whole window later. Segments stay a window apart all the same.
func TestStreamWindowCountsFromArrival(t *testing.T) {
	ctx := context.Background()
	const window = time.Second
	fs := faultstore.New(objstoretest.Mem(t))
	var (
		mu      sync.Mutex
		puts    []time.Time
		release = make(chan struct{})
	)
	fs.Hook = func(c faultstore.Call) {
		if c.Op != objstore.OpPut {
			return
		}
		mu.Lock()
		puts = append(puts, time.Now())
		first := len(puts) == 1
		mu.Unlock()
		if first {
			<-release // the first segment is slow
		}
	}
	s := NewStream(fs, StreamOptions{Window: window, NewID: streamIDs()})
	defer func() { _ = s.Close() }()
	m, _ := s.Attach(newMemberLog(region).options(1, 1))
	firstDone := make(chan error, 1)
	go func() { firstDone <- m.Append(ctx, []row.Entry{put("s", 1, 1)}) }()
	// Once the first segment is being written, a second write queues
	// behind it and waits there longer than a window.
	for {
		mu.Lock()
		n := len(puts)
		mu.Unlock()
		if n == 1 {
			break
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
	secondDone := make(chan error, 1)
	go func() { secondDone <- m.Append(ctx, []row.Entry{put("s", 2, 1)}) }()
	waitQueued(t, 2, "(*Member).Append")
	time.Sleep(window + window/4) // the queued write's window passes while the first PUT is held
	released := time.Now()
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if err := <-secondDone; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(released); took > window/2 {
		t.Fatalf("the write queued behind a slow segment took %v after it, a window again (%v)", took, window)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(puts) != 2 {
		t.Fatalf("%d segments, want 2", len(puts))
	}
	if gap := puts[1].Sub(puts[0]); gap < window {
		t.Fatalf("segments %v apart, less than the window %v", gap, window)
	}
}
