package region

import (
	"context"
	"fmt"

	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/memtable"
)

// Truncate removes every row the region acknowledged before the call. Its
// SSTs move to the removed set (GC deletes them after the lingering time,
// so scans already running finish), its memtables are dropped, and the WAL
// up to the cut is marked flushed so a reopen does not replay it. Writes
// acknowledged after Truncate returns are kept; a write concurrent with it
// is either wholly truncated or wholly kept.
//
// The caller cancels the region's compaction first. A compaction that
// commits after the truncate is refused by the manifest (its inputs are no
// longer live) and abandons its outputs.
func (r *Region) Truncate(ctx context.Context) error {
	if err := r.usable(); err != nil {
		return err
	}
	// No flush runs while the live set and flushed sequence change.
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	st := r.man.State()
	cut := manifest.Truncate{FlushedSeq: st.FlushedSeq, FlushedSegment: st.FlushedSegment}
	// The cut is a WAL segment boundary: a segment's entries reach the
	// active memtable at once, under r.mu, so freezing it here puts every
	// applied segment before the cut and every later one after.
	r.mu.Lock()
	if r.active.Stats().Entries > 0 {
		r.active.Freeze()
		r.immutable = append(r.immutable, r.active)
		r.active = memtable.New()
	}
	dropped := append([]*memtable.Memtable(nil), r.immutable...)
	r.mu.Unlock()
	for _, mt := range dropped {
		s := mt.Stats()
		cut.FlushedSeq = max(cut.FlushedSeq, s.MaxSeq)
		cut.FlushedSegment = max(cut.FlushedSegment, s.LastSegment)
	}
	removed := len(st.Files)
	actions := []manifest.Action{{Truncate: &cut}}
	// streamMu is held across the commit, as in a flush: the stream change
	// replaces the whole list of references (see Region.streamMu).
	r.streamMu.Lock()
	if sc := r.streamsAfterFlush(r.man.State(), cut.FlushedSeq, dropped...); sc != nil {
		actions = append(actions, manifest.Action{Streams: sc})
	}
	err := r.commit(ctx, actions...)
	r.streamMu.Unlock()
	if err != nil {
		if !r.landed(ctx, func(s *manifest.State) bool { return s.FlushedSeq >= cut.FlushedSeq && len(s.Files) == 0 }) {
			// The frozen memtables stay and flush as usual.
			return fmt.Errorf("region %s: truncate: %w", r.id, err)
		}
	}
	for _, mt := range dropped {
		r.dropFlushed(mt, mt.Stats())
	}
	r.walReleased()
	r.log.Info("truncated", "files", removed, "memtables", len(dropped), "flushed_seq", cut.FlushedSeq)
	return nil
}
