package walstream_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/walstream"
)

func TestEnvelopeRoundTripsAndRefusesCorruption(t *testing.T) {
	a, b := layout.RegionID{Table: 1, Region: 0}, layout.RegionID{Table: 2, Region: 3}
	blocks := []walstream.Block{{Region: a, Epoch: 4, FirstSeq: 10, Count: 2, Codec: 0}, {Region: b, Epoch: 1, FirstSeq: 7, Count: 1, Codec: 3, Raw: 9}}
	bodies := [][]byte{[]byte("ab"), []byte("xyz")}
	data := walstream.Append(nil, false, blocks, func(dst []byte, i int) []byte { return append(dst, bodies[i]...) })
	seg, err := walstream.Decode(5, data)
	if err != nil {
		t.Fatal(err)
	}
	if seg.Number != 5 || seg.Fence || len(seg.Blocks) != 2 {
		t.Fatalf("decoded %+v", seg)
	}
	for i, got := range seg.Blocks {
		want := blocks[i]
		want.Body = bodies[i]
		if got.Region != want.Region || got.Epoch != want.Epoch || got.FirstSeq != want.FirstSeq || got.Count != want.Count ||
			got.Codec != want.Codec || got.Raw != want.Raw || string(got.Body) != string(want.Body) {
			t.Fatalf("block %d: got %+v, want %+v", i, got, want)
		}
	}
	if h, ok := seg.Has(b); !ok || h.Epoch != 1 {
		t.Fatalf("Has(%s) = %+v, %v", b, h, ok)
	}
	fence, err := walstream.Decode(6, walstream.Fence(a, 9))
	if err != nil || !fence.Fence || len(fence.Blocks) != 1 || fence.Blocks[0].Region != a || fence.Blocks[0].Epoch != 9 {
		t.Fatalf("fence decoded as %+v, %v", fence, err)
	}
	for i := range data {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x40
		if _, err := walstream.Decode(5, bad); !errors.Is(err, walstream.ErrCorrupt) {
			t.Fatalf("byte %d flipped: %v, want ErrCorrupt", i, err)
		}
	}
}

// A drop that a failover interrupts seals again: the second run finds
// the first one's fence at the same number and writes nothing.
func TestReplaySealsOnceAndIsIdempotent(t *testing.T) {
	ctx := context.Background()
	store := objstoretest.Mem(t)
	writer, dropped := layout.RegionID{Table: 1, Region: 0}, layout.RegionID{Table: 2, Region: 0}
	const stream = "dn1/s1"
	for n := uint64(3); n <= 5; n++ {
		seg := walstream.Append(nil, false, []walstream.Block{{Region: writer, Epoch: 1, FirstSeq: n}}, func(dst []byte, _ int) []byte { return dst })
		if err := store.CreateIfAbsent(ctx, layout.StreamKey(stream, n), seg); err != nil {
			t.Fatal(err)
		}
	}
	var read []uint64
	end, seal, err := walstream.Replay(ctx, store, stream, 3, false, dropped, math.MaxUint64, func(s *walstream.Segment) error {
		read = append(read, s.Number)
		return nil
	})
	if err != nil || end != 6 || seal != walstream.SealWritten || len(read) != 3 {
		t.Fatalf("first seal: end %d seal %d read %v err %v; want 6, written, 3 segments", end, seal, read, err)
	}
	end, seal, err = walstream.Replay(ctx, store, stream, 3, false, dropped, math.MaxUint64, nil)
	if err != nil || end != 6 || seal != walstream.SealFound {
		t.Fatalf("second seal: end %d seal %d err %v; want 6, found", end, seal, err)
	}
	if _, err := store.Get(ctx, layout.StreamKey(stream, 7)); err == nil {
		t.Fatal("the second seal wrote another fence")
	}
}
