package walstream

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
	// Unsealed: a live stream with no fence (Replay's live).
	Unsealed Seal = iota
	// SealFound: a fence was there already (another new owner's, or one
	// an earlier open wrote and did not record).
	SealFound
	// SealWritten: this replay wrote the fence.
	SealWritten
)

// Replay reads stream's segments from number from on, in order, passing
// each that is not a fence to read (nil: none), and returns the number
// after the last segment it read, and how the stream ends there. Unless
// live is set it seals the stream: a fence segment at that number (naming
// sealer, of epoch), so the stream's writer, however late it wakes, lands
// nothing more in it. A segment the writer creates while Replay runs is
// read too, and the fence goes above it; a fence already there (another
// region's new owner, or a drop, sealed the stream) ends the stream as
// well.
//
// live is for the caller's own stream, written in this process by a
// writer that no longer carries the region. A fence found in it still
// ends it (SealFound).
//
// Replay is idempotent: run again, it finds its own fence (SealFound).
func Replay(ctx context.Context, store objstore.Bucket, stream string, from uint64, live bool, sealer layout.RegionID, epoch uint64, read func(*Segment) error) (end uint64, seal Seal, err error) {
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
	// next reads segment n; it reports whether n is a fence.
	next := func(n uint64) (bool, error) {
		key := layout.StreamKey(stream, n)
		data, err := store.Get(ctx, key)
		if err != nil {
			return false, fmt.Errorf("wal: read segment %s: %w", key, err)
		}
		seg, err := Decode(n, data)
		if err != nil {
			return false, fmt.Errorf("stream %s: %w", stream, err)
		}
		if seg.Fence {
			return true, nil
		}
		if read == nil {
			return false, nil
		}
		return false, read(seg)
	}
	// Numbers may skip: GC deletes a segment once no region with entries
	// in it needs it, so a gap in a region's range held none of its
	// entries. GC never deletes the newest segment of a stream that is
	// not sealed (Peers.Live), so the seal goes above everything the
	// writer wrote.
	end = from
	for _, n := range numbers {
		fence, err := next(n)
		if err != nil {
			return 0, Unsealed, err
		}
		if fence {
			return n, SealFound, nil
		}
		end = n + 1
	}
	if live {
		return end, Unsealed, nil
	}
	fence := Fence(sealer, epoch)
	for {
		err := store.CreateIfAbsent(ctx, layout.StreamKey(stream, end), fence)
		switch {
		case err == nil:
			return end, SealWritten, nil
		case errors.Is(err, objstore.ErrPreconditionFailed):
			// The writer appended after our listing, or another new
			// owner sealed the stream.
			isFence, err := next(end)
			if err != nil {
				return 0, Unsealed, err
			}
			if isFence {
				return end, SealFound, nil
			}
			end++
		default:
			return 0, Unsealed, fmt.Errorf("wal: seal stream %s at %d: %w", stream, end, err)
		}
	}
}
