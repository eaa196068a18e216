package wal

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
)

// Tests of the region's own WAL, which earlier versions wrote and this one
// replays and seals (legacy.go).

func TestLegacySegmentRoundTripAndCorruption(t *testing.T) {
	entries := []row.Entry{put("s1", 100, 1.5), {Series: "s2", TS: -50, End: 70, Op: row.Delete}, put("", 0, 0)}
	for i := range entries {
		entries[i].Seq = 41 + uint64(i)
	}
	data := encode(nil, false, 9, 41, entries)
	seg, err := decode(12, data)
	if err != nil {
		t.Fatal(err)
	}
	if seg.Number != 12 || seg.Fence || seg.Epoch != 9 || seg.FirstSeq != 41 || len(seg.Entries) != 3 {
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
	fence, err := decode(13, encode(nil, true, 10, 44, nil))
	if err != nil || !fence.Fence || fence.Epoch != 10 || len(fence.Entries) != 0 {
		t.Fatalf("fence %+v %v", fence, err)
	}
	// Every single-byte flip and every truncation is detected.
	for i := range data {
		bad := slices.Clone(data)
		bad[i] ^= 0x40
		if _, err := decode(12, bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip at byte %d: %v", i, err)
		}
	}
	for n := range len(data) {
		if _, err := decode(12, data[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: %v", n, err)
		}
	}
}

// legacySegment writes segment n of region's own WAL as an earlier
// version's writer did: entries from sequence first on, of epoch.
func legacySegment(t *testing.T, s objstore.Bucket, n, epoch, first uint64, es ...row.Entry) {
	t.Helper()
	for i := range es {
		es[i].Seq = first + uint64(i)
	}
	if err := s.Put(context.Background(), region.WALKey(n), encode(nil, false, epoch, first, es)); err != nil {
		t.Fatal(err)
	}
}

func replayAll(t *testing.T, s objstore.Bucket, epoch, flushedSeg, flushedSeq, sealed uint64) (end, nextSeq uint64, got []row.Entry) {
	t.Helper()
	end, nextSeq, err := Recover(context.Background(), s, region, epoch, flushedSeg, flushedSeq, sealed, func(seg *Segment) error {
		got = append(got, seg.Entries...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return end, nextSeq, got
}

// An earlier version's log: the first replay lists it and seals it above
// its last segment, where its writer's next append then fails; a replay
// that knows the seal reads the rest by number and writes nothing.
func TestRecoverSealsTheLogOnce(t *testing.T) {
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	s := objstore.New(inner, objstore.Options{})
	if err := s.Put(ctx, region.WALKey(1), encode(nil, true, 1, 1, nil)); err != nil { // the first owner's fence
		t.Fatal(err)
	}
	legacySegment(t, s, 2, 1, 1, put("a", 1, 1), put("a", 2, 2))
	legacySegment(t, s, 3, 1, 3, put("a", 3, 3))
	legacySegment(t, s, 4, 1, 4, put("a", 4, 4))

	end, nextSeq, got := replayAll(t, s, 2, 2, 2, 0) // segments 1 and 2 flushed
	if end != 5 || nextSeq != 5 || len(got) != 2 || got[0].Seq != 3 || got[1].Seq != 4 {
		t.Fatalf("sealed at %d, next seq %d, replayed %v", end, nextSeq, got)
	}
	// The former owner's next append.
	if err := s.CreateIfAbsent(ctx, region.WALKey(5), encode(nil, false, 1, 5, []row.Entry{put("a", 5, 5)})); !errors.Is(err, objstore.ErrPreconditionFailed) {
		t.Fatalf("a former owner's append at the seal: %v", err)
	}
	before := s.Requests()
	end, nextSeq, got = replayAll(t, s, 3, 2, 2, 5)
	if end != 5 || nextSeq != 5 || len(got) != 2 {
		t.Fatalf("below the seal: end %d, next seq %d, replayed %v", end, nextSeq, got)
	}
	if d := s.Requests().Sub(before); d[objstore.OpList] != 0 || d[objstore.OpPut] != 0 || d[objstore.OpGet] != 2 {
		t.Fatalf("a replay below a known seal made %v, want 2 GETs", d)
	}
	// Everything flushed: nothing to read at all.
	before = s.Requests()
	if end, nextSeq, got = replayAll(t, s, 3, 4, 4, 5); end != 5 || nextSeq != 5 || len(got) != 0 || s.Requests().Sub(before).Total() != 0 {
		t.Fatalf("flushed to the seal: end %d, next seq %d, replayed %v, requests %v", end, nextSeq, got, s.Requests().Sub(before))
	}
	// A region that never had a log: the seal goes at 1.
	if end, nextSeq, got = replayAll(t, objstoretest.Mem(t), 1, 0, 7, 0); end != 1 || nextSeq != 8 || len(got) != 0 {
		t.Fatalf("empty log: sealed at %d, next seq %d, replayed %v", end, nextSeq, got)
	}
}

// A former owner appends after the replay listed the log: the seal finds
// the number taken, replays that segment too and goes above it.
func TestRecoverRacesAFormerOwner(t *testing.T) {
	ctx := context.Background()
	mem := objstoretest.Mem(t)
	legacySegment(t, mem, 1, 1, 1, put("a", 1, 1))
	late := func() {
		if err := mem.CreateIfAbsent(ctx, region.WALKey(2), encode(nil, false, 1, 2, []row.Entry{{Series: "a", TS: 2, Op: row.Put, Seq: 2}})); err != nil {
			t.Errorf("late append: %v", err)
		}
	}
	s := &hookStore{Bucket: mem, afterList: func() {
		if late != nil {
			late()
			late = nil
		}
	}}
	end, nextSeq, got := replayAll(t, s, 2, 0, 0, 0)
	if end != 3 || nextSeq != 3 || len(got) != 2 || got[1].TS != 2 {
		t.Fatalf("sealed at %d, next seq %d, replayed %v", end, nextSeq, got)
	}
	// A segment of a newer owner's epoch: fenced, and nothing written.
	legacySegment(t, mem, 4, 9, 3, put("a", 3, 3))
	if _, _, err := Recover(ctx, mem, region, 3, 3, 2, 0, func(*Segment) error { return nil }); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("a newer owner's segment: %v", err)
	}
	if _, err := mem.Get(ctx, region.WALKey(5)); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a fenced replay wrote a fence: %v", err)
	}
}

func TestRecoverDetectsGapsAndCorruption(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	legacySegment(t, s, 1, 1, 1, put("a", 1, 1))
	legacySegment(t, s, 3, 1, 2, put("a", 2, 1))
	for _, sealed := range []uint64{0, 4} {
		if _, _, err := Recover(ctx, s, region, 2, 0, 0, sealed, func(*Segment) error { return nil }); !errors.Is(err, ErrGap) {
			t.Fatalf("gap (sealed at %d): %v", sealed, err)
		}
	}
	legacySegment(t, s, 2, 1, 5, put("a", 3, 1)) // ok: sequences may skip (an abandoned group)
	legacySegment(t, s, 3, 1, 3, put("a", 4, 1)) // behind segment 2's sequence
	if _, _, err := Recover(ctx, s, region, 2, 0, 0, 0, func(*Segment) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("sequence behind: %v", err)
	}
	if err := s.Put(ctx, region.WALKey(3), []byte("not a segment")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Recover(ctx, s, region, 2, 0, 0, 0, func(*Segment) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("garbage: %v", err)
	}
	// A replay error stops recovery.
	boom := errors.New("boom")
	if _, _, err := Recover(ctx, s, region, 2, 0, 0, 0, func(*Segment) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("replay error: %v", err)
	}
}

func TestRecoverStoreFailures(t *testing.T) {
	ctx := context.Background()
	for _, op := range []objstore.Op{objstore.OpList, objstore.OpGet, objstore.OpPut} {
		inner := objstoretest.Mem(t)
		legacySegment(t, inner, 1, 1, 1, put("a", 1, 1))
		fs := faultstore.New(inner, faultstore.Rule{Match: faultstore.OnOp(op), N: 1, Action: faultstore.Fail})
		if _, _, err := Recover(ctx, fs, region, 2, 0, 0, 0, func(*Segment) error { return nil }); !errors.Is(err, faultstore.ErrInjected) {
			t.Fatalf("%s failure: %v", op, err)
		}
	}
}
