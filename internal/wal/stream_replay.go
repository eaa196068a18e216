package wal

import (
	"context"
	"fmt"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/walstream"
)

// ReplayStream replays region's blocks in stream from segment from on, in
// order, passing each to replay, and returns the number after the last
// segment it read, and how the stream ends there. Unless live is set it
// seals the stream (walstream.Replay): a fence segment at that number
// (naming region), so the stream's writer, however late it wakes, lands
// nothing more in it.
//
// live is for the caller's own stream, written in this process by a
// writer that no longer carries the region (its member is closed). A
// fence found in it still ends it (walstream.SealFound).
//
// A block of a newer epoch than epoch means a newer owner of the region
// has written it: fence.ErrFenced. fwd decodes the blocks' forwarded
// chunks (AppendChunk).
func ReplayStream(ctx context.Context, store objstore.Bucket, region layout.RegionID, epoch uint64, stream string, from uint64, live bool, fwd Forwarded, replay func(segment uint64, b *Block) error) (end uint64, seal walstream.Seal, err error) {
	return walstream.Replay(ctx, store, stream, from, live, region, epoch, func(seg *walstream.Segment) error {
		h, ok := seg.Has(region)
		if !ok {
			return nil
		}
		key := layout.StreamKey(stream, seg.Number)
		if h.Epoch > epoch {
			return fmt.Errorf("%w: segment %s holds region %s written by epoch %d, this owner's is %d", fence.ErrFenced, key, region, h.Epoch, epoch)
		}
		b, err := decodeBlock(&h, fwd)
		if err != nil {
			return fmt.Errorf("stream %s: %w %d: %v", stream, ErrCorrupt, seg.Number, err)
		}
		return replay(seg.Number, &b)
	})
}
