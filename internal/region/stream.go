package region

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/memtable"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/wal"
	"github.com/stratadb/strata/internal/walstream"
)

// A region writes its WAL as a member of a stream (wal.Stream): its
// datanode's, shared by the regions it hosts (Options.Stream), or one of
// its own, which Open starts and Close stops. Either way a new owner
// replays and seals every stream the manifest names (State.Streams), and
// the region's own WAL an earlier version may have left (legacy.go).
//
// Stream references are kept by the manifest (manifest.WALStreams):
//
//   - the stream writer records a stream before the region's first entry
//     goes into it (recordStream), and marks the streams it wrote before
//     as ended at their fence, with the region's last sequence in them;
//   - a new owner seals each stream it replays (wal.ReplayStream) and
//     records the fence, which GC keeps, as it keeps WAL fences;
//   - a flush moves the live stream's From up to the oldest unflushed
//     entry and drops ended streams it has flushed past: what it releases
//     becomes StreamGarbage, which GC deletes where no other region's
//     references cover it (gc.Fast).

// openStreams replays the streams the manifest names into the active
// memtable, seals each (but this process's live stream), and commits what
// it learnt: each stream's end and the region's last sequence in it, the
// fences it wrote, and the ranges it no longer needs. It returns the
// region's next sequence as far as the streams know.
func (r *Region) openStreams(ctx context.Context, st *manifest.State) (uint64, error) {
	if len(st.Streams) == 0 {
		return 0, nil
	}
	live, _ := r.stream.Position()
	var next uint64
	var sealed []manifest.StreamRef // fences this open wrote
	change := &manifest.WALStreams{}
	refs := []manifest.StreamRef{}
	for _, ref := range st.Streams {
		isLive := ref.Stream == live && ref.End == 0
		if ref.End != 0 && ref.LastSeq != 0 && ref.LastSeq <= st.FlushedSeq {
			change.Garbage = append(change.Garbage, manifest.StreamRef{Stream: ref.Stream, From: ref.From, End: ref.End})
			continue
		}
		var last uint64
		end, seal, err := wal.ReplayStream(ctx, r.store, r.id, st.Epoch, ref.Stream, ref.From, isLive, r.forwarded(), func(n uint64, b *wal.Block) error {
			if len(b.Entries) == 0 {
				return nil
			}
			last = max(last, b.Entries[len(b.Entries)-1].Seq)
			entries := b.Entries
			for len(entries) > 0 && entries[0].Seq <= st.FlushedSeq {
				entries = entries[1:]
			}
			if len(entries) > 0 {
				r.makeRoom(entries[len(entries)-1].Seq)
				r.notePos(r.active, ref.Stream, n)
				r.active.Insert(0, entries)
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("replay stream %s: %w", ref.Stream, err)
		}
		next = max(next, last+1)
		// A fence in this process's own stream: an earlier open elsewhere
		// sealed it and did not record the fence. The stream has ended
		// for this region too (its writer rolls over at the fence), and
		// the fence is recorded like any other.
		isLive = isLive && seal == walstream.Unsealed
		wrote := seal == walstream.SealWritten
		if wrote {
			sealed = append(sealed, manifest.StreamRef{Stream: ref.Stream, End: end})
		}
		r.log.Info("wal stream replayed", "stream", ref.Stream, "from", ref.From, "end", end, "sealed_here", wrote, "live", isLive)
		if isLive {
			refs = append(refs, ref)
			continue
		}
		// The fence that ended the stream is kept while a region records
		// it, whoever wrote it (a fence this open wrote but failed to
		// record is recorded by the next).
		change.Fences = append(change.Fences, manifest.StreamRef{Stream: ref.Stream, End: end})
		ref.End = end
		ref.LastSeq = max(ref.LastSeq, last, 1)
		if ref.LastSeq <= st.FlushedSeq {
			if end > ref.From {
				change.Garbage = append(change.Garbage, manifest.StreamRef{Stream: ref.Stream, From: ref.From, End: end})
			}
			continue
		}
		refs = append(refs, ref)
	}
	if len(change.Garbage) == 0 && len(change.Fences) == 0 && slices.Equal(refs, st.Streams) {
		return next, nil // only this process's live stream: nothing learnt
	}
	change.Refs = &refs
	if err := r.commit(ctx, manifest.Action{Streams: change}); err != nil {
		err = fmt.Errorf("record replayed streams: %w", err)
		if errors.Is(err, fence.ErrFenced) {
			err = errors.Join(err, r.dropOvertakenFences(ctx, sealed))
		}
		return 0, err
	}
	return next, nil
}

// dropOvertakenFences runs when a newer owner overtook this open after it
// sealed streams. A fence it wrote may sit in a number GC had freed (the
// writer landed a segment there after this open listed; the newer owner
// replayed it, sealed above it, flushed and collected it): nothing would
// ever read or delete it. The writer never targets a number below the
// newer seal, so such a fence is deleted (as checkFence does for the
// region's own WAL).
func (r *Region) dropOvertakenFences(ctx context.Context, sealed []manifest.StreamRef) error {
	if len(sealed) == 0 {
		return nil
	}
	cur, err := manifest.Open(ctx, r.store, r.id, manifest.Options{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("read the newer owner's manifest (stream fences left to fsck): %w", err)
	}
	defer cur.Close()
	st := cur.State()
	var errs []error
	for _, f := range sealed {
		// Only a newer seal above ours proves the number was freed: the
		// newer owner then listed a segment of the writer there, so the
		// writer is past it. A newer owner still replaying may stop at our
		// fence, which must then stay.
		above := slices.ContainsFunc(st.StreamFences, func(g manifest.StreamRef) bool { return g.Stream == f.Stream && g.End > f.End })
		if !above {
			continue
		}
		r.log.Warn("deleting an overtaken stream fence", "fence", layout.StreamKey(f.Stream, f.End))
		if err := r.store.Delete(ctx, layout.StreamKey(f.Stream, f.End)); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			errs = append(errs, fmt.Errorf("delete overtaken stream fence: %w", err))
		}
	}
	return errors.Join(errs...)
}

// notePos remembers the first segment of each stream that mt holds
// entries from. Callers hold r.mu or own mt alone.
func (r *Region) notePos(mt *memtable.Memtable, stream string, n uint64) {
	pos := r.memPos[mt]
	if pos == nil {
		pos = map[string]uint64{}
		r.memPos[mt] = pos
	}
	if _, ok := pos[stream]; !ok {
		pos[stream] = n
	}
}

// recordStream is the stream writer's Recording callback: the region's
// entries are about to go into rec.Stream from rec.From on. It holds
// r.streamMu until its commit is settled: see Region.streamMu.
func (r *Region) recordStream(ctx context.Context, rec wal.Recording) error {
	r.streamMu.Lock()
	defer r.streamMu.Unlock()
	st := r.man.State()
	refs := slices.Clone(st.Streams)
	if n := len(refs); n > 0 && refs[n-1].Stream == rec.Stream && refs[n-1].End == 0 {
		return nil // reopened in the same process: the ref covers it
	}
	for i := range refs {
		if end, ok := rec.Ended[refs[i].Stream]; ok && refs[i].End == 0 {
			refs[i].End = end
			refs[i].LastSeq = max(rec.NextSeq-1, 1)
		}
	}
	refs = append(refs, manifest.StreamRef{Stream: rec.Stream, From: rec.From})
	err := r.commit(ctx, manifest.Action{Streams: &manifest.WALStreams{Refs: &refs}})
	if err != nil && !r.landed(ctx, func(s *manifest.State) bool { return slices.Equal(s.Streams, refs) }) {
		if errors.Is(err, fence.ErrFenced) {
			return r.setFatal(err)
		}
		return err
	}
	return nil
}

// streamsAfterFlush is the stream change that flushing (or truncating) the
// memtables done, through flushedSeq, commits: ended streams it has passed
// are released, and the live stream's From moves up to the oldest entry of
// the memtables that remain. It returns nil if nothing changes. Callers
// hold r.streamMu from before this call until the change has committed (or
// its outcome is settled): the change replaces the whole list of
// references, so it must not race another (see Region.streamMu).
func (r *Region) streamsAfterFlush(st *manifest.State, flushedSeq uint64, done ...*memtable.Memtable) *manifest.WALStreams {
	if len(st.Streams) == 0 {
		return nil
	}
	// The position is read before the memtables: an entry applied after it
	// is at or above it.
	liveID, liveNext := r.stream.Position()
	r.mu.Lock()
	oldest := map[string]uint64{}
	for _, mt := range append(slices.Clone(r.immutable), r.active) {
		if slices.Contains(done, mt) {
			continue
		}
		for stream, n := range r.memPos[mt] {
			if o, seen := oldest[stream]; !seen || n < o {
				oldest[stream] = n
			}
		}
	}
	r.mu.Unlock()
	change := &manifest.WALStreams{}
	refs := []manifest.StreamRef{}
	changed := false
	for _, ref := range st.Streams {
		switch {
		case ref.End != 0 && ref.LastSeq != 0 && ref.LastSeq <= flushedSeq:
			if ref.End > ref.From {
				change.Garbage = append(change.Garbage, manifest.StreamRef{Stream: ref.Stream, From: ref.From, End: ref.End})
			}
			changed = true
			continue
		case ref.End == 0 && ref.Stream == liveID:
			from := liveNext
			if o, ok := oldest[ref.Stream]; ok {
				from = min(from, o)
			}
			if from > ref.From {
				change.Garbage = append(change.Garbage, manifest.StreamRef{Stream: ref.Stream, From: ref.From, End: from})
				ref.From = from
				changed = true
			}
		}
		refs = append(refs, ref)
	}
	if !changed {
		return nil
	}
	change.Refs = &refs
	return change
}
