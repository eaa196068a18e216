package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/walstream"
)

// A region's own WAL is the log earlier versions gave a region (on a
// datanode's request, or opened without a stream) under
// layout.RegionID.WALPrefix: one segment object per group commit, at
// consecutive numbers, each holding only that region's entries
// (docs/format/wal.md, "Legacy: a region's own WAL"). Nothing writes one
// any more but the fence that seals it; a region whose manifest may name
// one replays it (Recover), and fast GC deletes its segments once flushed
// past, by number.

const (
	magic         = "STRW"
	formatVersion = 1
	kindFence     = 1                     // the kind byte walstream.AppendHead writes for a fence
	headerLen     = 4 + 1 + 1 + 8 + 8 + 4 // magic, version, kind, first seq, epoch, count
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrGap: a segment of a region's own WAL above the flushed segment is
// missing.
var ErrGap = errors.New("wal: gap in segments")

// Segment is one decoded segment of a region's own WAL.
type Segment struct {
	Number   uint64
	Fence    bool
	Epoch    uint64 // the writer's manifest epoch
	FirstSeq uint64 // sequence of Entries[0]; entries are consecutive
	Entries  []row.Entry
}

// encode appends a segment's bytes to dst: a fence's, or (tests) a data
// segment's. The entries' Seq fields must already be FirstSeq,
// FirstSeq+1, ...
func encode(dst []byte, fence bool, epoch, firstSeq uint64, entries []row.Entry) []byte {
	dst = walstream.AppendHead(dst, magic, formatVersion, fence)
	dst = binary.LittleEndian.AppendUint64(dst, firstSeq)
	dst = binary.LittleEndian.AppendUint64(dst, epoch)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(entries)))
	for i := range entries {
		dst = appendEntry(dst, &entries[i])
	}
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst, castagnoli))
}

// decode parses a segment object.
func decode(number uint64, data []byte) (*Segment, error) {
	body, bad, err := walstream.Envelope(number, data, magic, formatVersion, headerLen)
	if err != nil {
		return nil, err
	}
	s := &Segment{
		Number:   number,
		Fence:    body[5] == kindFence,
		FirstSeq: binary.LittleEndian.Uint64(body[6:]),
		Epoch:    binary.LittleEndian.Uint64(body[14:]),
	}
	count := binary.LittleEndian.Uint32(body[22:])
	d := decoder{buf: body[headerLen:]}
	if uint64(count) > uint64(len(d.buf)) {
		return nil, bad("%d entries in %d bytes", count, len(d.buf))
	}
	s.Entries = make([]row.Entry, count)
	// One string for all series keys and string values of the segment.
	d.str = string(d.buf)
	for i := range s.Entries {
		e := &s.Entries[i]
		e.Seq = s.FirstSeq + uint64(i)
		if err := d.entry(e); err != nil {
			return nil, bad("entry %d: %v", i, err)
		}
	}
	if len(d.buf) != d.off {
		return nil, bad("%d trailing bytes", len(d.buf)-d.off)
	}
	return s, nil
}

// Recover replays a region's own WAL: every segment above flushedSegment,
// in order, passed to replay. It returns the fence that ends the log and
// the region's next sequence (at least flushedSeq+1).
//
// sealed, if not 0, is a fence an owner of this version wrote and
// recorded after the log's last writer opened (manifest.State.WALSealed):
// the log ends there. The segments below it are read by number, and
// nothing is listed or written.
//
// Otherwise Recover lists the log and seals it with a fence segment at the
// next number, so a former owner of an earlier version, however late it
// wakes, lands nothing more in it: its next create finds the number taken.
// A segment that such an owner creates while Recover runs is replayed
// too, and the fence goes above it. A segment of a newer epoch than epoch
// means a newer owner has fenced this one: fence.ErrFenced, and Recover
// writes nothing more.
func Recover(ctx context.Context, store objstore.Bucket, region layout.RegionID, epoch, flushedSegment, flushedSeq, sealed uint64, replay func(*Segment) error) (end, nextSeq uint64, err error) {
	var numbers []uint64
	if sealed != 0 {
		for n := flushedSegment + 1; n < sealed; n++ {
			numbers = append(numbers, n)
		}
	} else {
		objs, err := objstore.ListAll(ctx, store, region.WALPrefix(), 1000)
		if err != nil {
			return 0, 0, fmt.Errorf("wal: list %s: %w", region.WALPrefix(), err)
		}
		for _, o := range objs {
			if n, ok := region.ParseWALKey(o.Key); ok && n > flushedSegment {
				numbers = append(numbers, n)
			}
		}
		slices.Sort(numbers)
	}
	next, nextSeq := flushedSegment+1, flushedSeq+1
	read := func(n uint64) error {
		data, err := store.Get(ctx, region.WALKey(n))
		if errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("%w: region %s: segment %d missing", ErrGap, region, n)
		}
		if err != nil {
			return fmt.Errorf("wal: read segment %s: %w", region.WALKey(n), err)
		}
		seg, err := decode(n, data)
		if err != nil {
			return fmt.Errorf("region %s: %w", region, err)
		}
		if seg.Epoch > epoch {
			return fmt.Errorf("%w: segment %s was written by epoch %d, this owner's is %d", fence.ErrFenced, region.WALKey(n), seg.Epoch, epoch)
		}
		if seg.FirstSeq < nextSeq && len(seg.Entries) > 0 {
			return fmt.Errorf("%w %d of region %s: sequence %d is behind %d", ErrCorrupt, n, region, seg.FirstSeq, nextSeq)
		}
		nextSeq = max(nextSeq, seg.FirstSeq+uint64(len(seg.Entries)))
		return replay(seg)
	}
	for _, n := range numbers {
		if n != next {
			return 0, 0, fmt.Errorf("%w: region %s: segment %d missing, %d exists", ErrGap, region, next, n)
		}
		if err := read(n); err != nil {
			return 0, 0, err
		}
		next++
	}
	if sealed != 0 {
		return sealed, nextSeq, nil
	}
	for {
		fence := encode(nil, true, epoch, nextSeq, nil)
		err := store.CreateIfAbsent(ctx, region.WALKey(next), fence)
		switch {
		case err == nil:
			return next, nextSeq, nil
		case errors.Is(err, objstore.ErrPreconditionFailed):
			// A stale owner appended after our listing; replay it too.
			if err := read(next); err != nil {
				return 0, 0, err
			}
			next++
		default:
			return 0, 0, fmt.Errorf("wal: write fence segment %s: %w", region.WALKey(next), err)
		}
	}
}
