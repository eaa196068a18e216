package wal

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore"
)

// Seal says how a replayed stream ends.
type Seal int

const (
	// Unsealed: a live stream with no fence (ReplayStream's live).
	Unsealed Seal = iota
	// SealFound: a fence was there already (another new owner's, or one
	// an earlier open wrote and did not record).
	SealFound
	// SealWritten: this replay wrote the fence.
	SealWritten
)

// ReplayStream replays region's blocks in stream from segment from on, in
// order, passing each to replay, and returns the number after the last
// segment it read, and how the stream ends there. Unless live is set it
// seals the stream: a fence segment at that number (naming region), so the
// stream's writer, however late it wakes, lands nothing more in it. A
// segment the writer creates while ReplayStream runs is replayed too, and
// the fence goes above it; a fence already there (another region's new
// owner sealed the stream) ends the stream as well.
//
// live is for the caller's own stream, written in this process by a
// writer that no longer carries the region (its member is closed). A
// fence found in it still ends it (SealFound).
//
// A block of a newer epoch than epoch means a newer owner of the region
// has written it: ErrFenced.
func ReplayStream(ctx context.Context, store objstore.Bucket, region layout.RegionID, epoch uint64, stream string, from uint64, live bool, replay func(segment uint64, b *Block) error) (end uint64, seal Seal, err error) {
	prefix := layout.StreamPrefix(stream)
	objs, err := objstore.ListAll(ctx, store, prefix, 1000)
	if err != nil {
		return 0, Unsealed, fmt.Errorf("wal: list %s: %w", prefix, err)
	}
	var numbers []uint64
	for _, o := range objs {
		if s, n, ok := layout.ParseStreamKey(o.Key); ok && s == stream && n >= from {
			numbers = append(numbers, n)
		}
	}
	slices.Sort(numbers)
	// read replays segment n; it reports whether n is a fence.
	read := func(n uint64) (bool, error) {
		key := layout.StreamKey(stream, n)
		data, err := store.Get(ctx, key)
		if err != nil {
			return false, fmt.Errorf("wal: read segment %s: %w", key, err)
		}
		seg, err := DecodeStream(n, data)
		if err != nil {
			return false, fmt.Errorf("stream %s: %w", stream, err)
		}
		if seg.Fence {
			return true, nil
		}
		b, ok := seg.Block(region)
		if !ok {
			return false, nil
		}
		if b.Epoch > epoch {
			return false, fmt.Errorf("%w: segment %s holds region %s written by epoch %d, this owner's is %d", ErrFenced, key, region, b.Epoch, epoch)
		}
		return false, replay(n, b)
	}
	// Numbers may skip: GC deletes a segment once no region with entries
	// in it needs it, so a gap in this region's range held none of its
	// entries. GC never deletes the newest segment of a stream that is
	// not sealed (gc.Peers.Live), so the seal goes above everything the
	// writer wrote.
	next := from
	for _, n := range numbers {
		fence, err := read(n)
		if err != nil {
			return 0, Unsealed, err
		}
		if fence {
			return n, SealFound, nil
		}
		next = n + 1
	}
	if live {
		return next, Unsealed, nil
	}
	fence := encodeStream(nil, true, []Block{{Region: region, Epoch: epoch}})
	for {
		err := store.CreateIfAbsent(ctx, layout.StreamKey(stream, next), fence)
		switch {
		case err == nil:
			return next, SealWritten, nil
		case errors.Is(err, objstore.ErrPreconditionFailed):
			// The writer appended after our listing, or another new
			// owner sealed the stream.
			isFence, err := read(next)
			if err != nil {
				return 0, Unsealed, err
			}
			if isFence {
				return next, SealFound, nil
			}
			next++
		default:
			return 0, Unsealed, fmt.Errorf("wal: seal stream %s at %d: %w", stream, next, err)
		}
	}
}
