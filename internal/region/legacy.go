package region

import (
	"context"
	"errors"
	"fmt"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/wal"
)

// Earlier versions could give a region a WAL of its own (wal.Recover),
// under its prefix. Nothing writes one now but the fence that seals it: a
// new owner replays what it holds above the flushed segment, seals it
// once, and its flushes then carry the flushed segment past it, so fast GC
// deletes its segments by number.

// replayOwnWAL replays the region's own WAL above the flushed segment into
// the active memtable, and returns the region's next sequence as far as
// the log knows (0: the region never had one).
//
// The first open by this version seals the log with a fence and records
// it (manifest.WALFences.Sealed). Later opens read only what is left below
// that fence, by number, without listing or writing, until an owner of an
// earlier version opens the region again: its fence is then above the
// seal, and the log is listed and sealed anew.
func (r *Region) replayOwnWAL(ctx context.Context, st *manifest.State) (uint64, error) {
	if len(st.Fences) == 0 {
		// Every owner that wrote the log recorded a fence first.
		return 0, nil
	}
	sealed := st.WALSealed
	if sealed != st.Fences[len(st.Fences)-1] {
		sealed = 0
	}
	var found []uint64
	end, nextSeq, err := wal.Recover(ctx, r.store, r.id, st.Epoch, st.FlushedSegment, st.FlushedSeq, sealed, func(seg *wal.Segment) error {
		if seg.Fence {
			found = append(found, seg.Number)
		}
		entries := seg.Entries
		for len(entries) > 0 && entries[0].Seq <= st.FlushedSeq {
			entries = entries[1:]
		}
		if len(entries) > 0 {
			r.makeRoom(entries[len(entries)-1].Seq)
		}
		r.active.Insert(seg.Number, entries)
		return nil
	})
	if err != nil {
		return 0, err
	}
	if sealed != 0 {
		return nextSeq, nil
	}
	if err := r.checkFence(ctx, end); err != nil {
		return 0, err
	}
	if err := r.recordFences(ctx, found, end); err != nil {
		return 0, err
	}
	return nextSeq, nil
}

// recordFences commits the fences of the region's own WAL this open found
// in its replay and the one it sealed the log with: the numbers former
// owners' late appends can target.
func (r *Region) recordFences(ctx context.Context, found []uint64, seal uint64) error {
	st := r.man.State()
	var add []uint64
	for _, n := range append(found, seal) {
		if !st.IsFence(n) {
			add = append(add, n)
		}
	}
	err := r.commit(ctx, manifest.Action{Fences: &manifest.WALFences{Segments: add, Sealed: seal}})
	if err != nil && !r.landed(ctx, func(s *manifest.State) bool { return s.WALSealed == seal }) {
		return fmt.Errorf("record WAL fences: %w", err)
	}
	return nil
}

// checkFence runs after this owner's WAL fence landed at segment n: it
// proves no newer owner has committed meanwhile (manifest.Verify). If one
// has, this owner was overtaken while it replayed, and its fence may have
// landed in a number GC had freed below the newer owner's flushed segment
// (a former owner appended there after this one listed, and the newer owner
// replayed, flushed and collected it). Nothing would ever read or delete
// it, so it is deleted here, once the newer state proves it garbage: at or
// below its flushed segment and not a recorded fence. A fence above the
// flushed segment is the newer owner's to replay.
func (r *Region) checkFence(ctx context.Context, n uint64) error {
	verr := r.man.Verify(ctx)
	if verr == nil || !errors.Is(verr, fence.ErrFenced) {
		return verr
	}
	cur, err := manifest.Open(ctx, r.store, r.id, manifest.Options{ReadOnly: true})
	if err != nil {
		return errors.Join(verr, fmt.Errorf("read the newer owner's manifest (fence %s left to full-listing GC): %w", r.id.WALKey(n), err))
	}
	defer cur.Close()
	st := cur.State()
	if n <= st.FlushedSegment && !st.IsFence(n) {
		if err := r.store.Delete(ctx, r.id.WALKey(n)); err != nil {
			return errors.Join(verr, fmt.Errorf("delete overtaken fence %s (left to full-listing GC): %w", r.id.WALKey(n), err))
		}
	}
	return verr
}
