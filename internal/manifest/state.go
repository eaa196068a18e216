package manifest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/stratadb/strata/internal/schema"
)

// ErrInvalidAction: an action does not apply to the current state. Nothing
// is committed.
var ErrInvalidAction = errors.New("manifest: invalid action")

// State is the manifest's state at Version. It is a value: Apply works on a
// copy, so a failed commit leaves the state untouched.
type State struct {
	Version    uint64                    `json:"version"`
	Epoch      uint64                    `json:"epoch"`
	Schema     schema.Persisted          `json:"schema"`
	Files      map[string]FileMeta       `json:"files"`
	Removed    map[string]RemovedFile    `json:"removed"`
	Pending    map[string]PendingOutputs `json:"pending"`
	FlushedSeq uint64                    `json:"flushed_seq"`
	// FlushedSegment: WAL segments numbered up to it hold nothing above
	// FlushedSeq.
	FlushedSegment uint64 `json:"flushed_segment,omitempty"`
	// WALPurged: WAL segments numbered below it are deleted, but for
	// Fences.
	WALPurged uint64 `json:"wal_purged,omitempty"`
	// Fences are WAL fence segments, ascending; GC keeps them (WALFences).
	Fences []uint64 `json:"fences,omitempty"`
	// WALSealed is the fence that sealed the region's own WAL for good
	// (WALFences.Sealed); 0: never sealed so.
	WALSealed uint64 `json:"wal_sealed,omitempty"`
	// Streams may hold entries above FlushedSeq (WALStreams), oldest first.
	Streams []StreamRef `json:"streams,omitempty"`
	// StreamGarbage are stream segment ranges [From, End) the region
	// released, for GC to delete where no other region needs them.
	StreamGarbage []StreamRef `json:"stream_garbage,omitempty"`
	// StreamFences are stream fences (Stream, End) written by this
	// region's owners; GC keeps them.
	StreamFences []StreamRef `json:"stream_fences,omitempty"`
}

// NeedsStream reports whether the region may need segment n of stream.
func (s *State) NeedsStream(stream string, n uint64) bool {
	for _, r := range s.Streams {
		if r.Needs(stream, n) {
			return true
		}
	}
	return false
}

// IsFence reports whether WAL segment n is a recorded fence.
func (s *State) IsFence(n uint64) bool {
	_, ok := slices.BinarySearch(s.Fences, n)
	return ok
}

func newState() *State {
	return &State{Files: map[string]FileMeta{}, Removed: map[string]RemovedFile{}, Pending: map[string]PendingOutputs{}}
}

// Clone returns a deep copy.
func (s *State) Clone() *State {
	c := *s
	c.Schema.Columns = slices.Clone(s.Schema.Columns)
	c.Fences = slices.Clone(s.Fences)
	c.Streams = slices.Clone(s.Streams)
	c.StreamGarbage = slices.Clone(s.StreamGarbage)
	c.StreamFences = slices.Clone(s.StreamFences)
	c.Files = maps.Clone(s.Files)
	c.Removed = maps.Clone(s.Removed)
	c.Pending = make(map[string]PendingOutputs, len(s.Pending))
	for k, p := range s.Pending {
		p.FileIDs = slices.Clone(p.FileIDs)
		c.Pending[k] = p
	}
	return &c
}

// apply applies one action in place; at is the delta's time.
func (s *State) apply(a Action, at time.Time) error {
	n := 0
	for _, set := range []bool{a.Schema != nil, a.Edit != nil, a.Pending != nil, a.Resolve != nil, a.Purge != nil, a.Truncate != nil, a.Epoch != nil, a.Fences != nil, a.Streams != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%w: an action sets %d kinds, want exactly 1", ErrInvalidAction, n)
	}
	switch {
	case a.Schema != nil:
		if a.Schema.Schema.Version <= s.Schema.Version {
			return fmt.Errorf("%w: schema version %d is not after %d", ErrInvalidAction, a.Schema.Schema.Version, s.Schema.Version)
		}
		s.Schema = a.Schema.Schema
	case a.Edit != nil:
		return s.applyEdit(a.Edit, at)
	case a.Pending != nil:
		p := a.Pending
		if p.JobID == "" || len(p.FileIDs) == 0 {
			return fmt.Errorf("%w: pending outputs need a job id and file ids", ErrInvalidAction)
		}
		prev, exists := s.Pending[p.JobID]
		for _, id := range p.FileIDs {
			if s.Owns(id) {
				return fmt.Errorf("%w: pending output %s is already owned", ErrInvalidAction, id)
			}
		}
		if exists { // a job that needs more outputs reserves them too
			p = &PendingOutputs{JobID: p.JobID, FileIDs: append(slices.Clone(prev.FileIDs), p.FileIDs...), Epoch: p.Epoch, CreatedAt: p.CreatedAt}
		}
		s.Pending[p.JobID] = *p
	case a.Resolve != nil:
		if _, ok := s.Pending[a.Resolve.JobID]; !ok {
			return fmt.Errorf("%w: no pending outputs for job %q", ErrInvalidAction, a.Resolve.JobID)
		}
		delete(s.Pending, a.Resolve.JobID)
	case a.Purge != nil:
		for _, id := range a.Purge.Files {
			if _, ok := s.Removed[id]; !ok {
				return fmt.Errorf("%w: purge of %s, which is not a removed file", ErrInvalidAction, id)
			}
			delete(s.Removed, id)
		}
		if w := a.Purge.WALBelow; w != 0 {
			if w > s.FlushedSegment+1 || w < s.WALPurged {
				return fmt.Errorf("%w: WAL purge below %d: flushed segment is %d, purged below %d", ErrInvalidAction, w, s.FlushedSegment, s.WALPurged)
			}
			s.WALPurged = w
		}
	case a.Truncate != nil:
		for id, f := range s.Files {
			s.Removed[id] = RemovedFile{FileMeta: f, RemovedAt: at}
			delete(s.Files, id)
		}
		s.FlushedSeq = max(s.FlushedSeq, a.Truncate.FlushedSeq)
		s.FlushedSegment = max(s.FlushedSegment, a.Truncate.FlushedSegment)
	case a.Epoch != nil:
		if a.Epoch.Epoch <= s.Epoch {
			return fmt.Errorf("%w: epoch %d is not after %d", ErrInvalidAction, a.Epoch.Epoch, s.Epoch)
		}
		s.Epoch = a.Epoch.Epoch
	case a.Streams != nil:
		w := a.Streams
		if w.Refs != nil {
			for _, r := range *w.Refs {
				if r.Stream == "" || (r.End != 0 && r.End < r.From) {
					return fmt.Errorf("%w: stream reference %+v", ErrInvalidAction, r)
				}
			}
			s.Streams = slices.Clone(*w.Refs)
		}
		for _, g := range w.Garbage {
			if g.Stream == "" || g.End <= g.From {
				return fmt.Errorf("%w: stream garbage %+v needs From < End", ErrInvalidAction, g)
			}
			if !slices.Contains(s.StreamGarbage, g) {
				s.StreamGarbage = append(s.StreamGarbage, g)
			}
		}
		for _, g := range w.Collected {
			i := slices.Index(s.StreamGarbage, g)
			if i < 0 {
				return fmt.Errorf("%w: collected stream range %+v is not garbage", ErrInvalidAction, g)
			}
			s.StreamGarbage = slices.Delete(s.StreamGarbage, i, i+1)
		}
		for _, f := range w.Fences {
			if !slices.Contains(s.StreamFences, f) {
				s.StreamFences = append(s.StreamFences, f)
			}
		}
	case a.Fences != nil:
		for _, n := range a.Fences.Segments {
			if n == 0 {
				return fmt.Errorf("%w: WAL fence at segment 0", ErrInvalidAction)
			}
			if i, found := slices.BinarySearch(s.Fences, n); !found {
				s.Fences = slices.Insert(s.Fences, i, n)
			}
		}
		if n := a.Fences.Sealed; n != 0 {
			if !s.IsFence(n) {
				return fmt.Errorf("%w: WAL sealed at %d, which is not a fence", ErrInvalidAction, n)
			}
			s.WALSealed = n
		}
	}
	return nil
}

// owns reports whether id is a live, removed or pending file.
// Owns reports whether file id is live, removed (waiting for GC) or
// reserved by a pending-outputs marker: whether it has a cleanup owner.
func (s *State) Owns(id string) bool {
	if _, ok := s.Files[id]; ok {
		return true
	}
	if _, ok := s.Removed[id]; ok {
		return true
	}
	for _, p := range s.Pending {
		if slices.Contains(p.FileIDs, id) {
			return true
		}
	}
	return false
}

func (s *State) applyEdit(e *Edit, at time.Time) error {
	var reserved []string
	if e.Resolves != "" {
		p, ok := s.Pending[e.Resolves]
		if !ok {
			return fmt.Errorf("%w: edit resolves unknown job %q", ErrInvalidAction, e.Resolves)
		}
		reserved = p.FileIDs

	}
	for _, id := range e.Remove {
		f, ok := s.Files[id]
		if !ok {
			return fmt.Errorf("%w: edit removes %s, which is not live", ErrInvalidAction, id)
		}
		delete(s.Files, id)
		s.Removed[id] = RemovedFile{FileMeta: f, RemovedAt: at}
	}
	for _, f := range e.Add {
		if e.Resolves != "" && !slices.Contains(reserved, f.ID) {
			return fmt.Errorf("%w: edit adds %s, which job %q did not reserve", ErrInvalidAction, f.ID, e.Resolves)
		}
		if e.Resolves == "" && s.Owns(f.ID) {
			return fmt.Errorf("%w: edit adds %s, which is already owned", ErrInvalidAction, f.ID)
		}
		if _, ok := s.Files[f.ID]; ok {
			return fmt.Errorf("%w: edit adds %s twice", ErrInvalidAction, f.ID)
		}
		s.Files[f.ID] = f
	}
	if e.Resolves != "" {
		// NB: reserved ids the edit did not add keep their owner: they stay
		// pending under the job's marker for GC to delete.
		var left []string
		for _, id := range reserved {
			if _, added := s.Files[id]; !added {
				left = append(left, id)
			}
		}
		if len(left) > 0 {
			p := s.Pending[e.Resolves]
			p.FileIDs = left
			s.Pending[e.Resolves] = p
		} else {
			delete(s.Pending, e.Resolves)
		}
	}
	if e.FlushedSeq != 0 {
		if e.FlushedSeq < s.FlushedSeq {
			return fmt.Errorf("%w: flushed sequence %d is behind %d", ErrInvalidAction, e.FlushedSeq, s.FlushedSeq)
		}
		s.FlushedSeq = e.FlushedSeq
	}
	if e.FlushedSegment != 0 {
		if e.FlushedSegment < s.FlushedSegment {
			return fmt.Errorf("%w: flushed WAL segment %d is behind %d", ErrInvalidAction, e.FlushedSegment, s.FlushedSegment)
		}
		s.FlushedSegment = e.FlushedSegment
	}
	return nil
}
