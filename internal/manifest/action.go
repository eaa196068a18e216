// Package manifest is a region's manifest: the log of action lists (deltas)
// and periodic checkpoints that records which objects the region owns.
//
// A delta at version N+1 is written with create-if-absent; that write is the
// commit point of every state change and fences concurrent writers. The
// format is specified in docs/format/manifest.md.
package manifest

import (
	"time"

	"github.com/stratadb/strata/internal/schema"
)

// FileMeta describes one SST.
type FileMeta struct {
	ID    string `json:"id"`
	Level int    `json:"level"`
	MinTS int64  `json:"min_ts"`
	MaxTS int64  `json:"max_ts"`
	Rows  int64  `json:"rows"`
	Size  int64  `json:"size"`
	// Series: the file has a series index (layout.SeriesKey), written
	// with it under the same reservation. Files written before series
	// indexes existed have none.
	Series bool `json:"series,omitempty"`
}

// RemovedFile is a file no longer live, waiting for GC past the lingering time.
type RemovedFile struct {
	FileMeta
	RemovedAt time.Time `json:"removed_at"`
}

// Action is one state change. Exactly one field is set.
type Action struct {
	Schema   *SchemaChange   `json:"schema,omitempty"`
	Edit     *Edit           `json:"edit,omitempty"`
	Pending  *PendingOutputs `json:"pending,omitempty"`
	Resolve  *ResolvePending `json:"resolve,omitempty"`
	Purge    *GCPurge        `json:"purge,omitempty"`
	Truncate *Truncate       `json:"truncate,omitempty"`
	Epoch    *WriterEpoch    `json:"epoch,omitempty"`
	Fences   *WALFences      `json:"fences,omitempty"`
	Streams  *WALStreams     `json:"streams,omitempty"`
}

// SchemaChange replaces the schema with a later version.
type SchemaChange struct {
	Schema schema.Persisted `json:"schema"`
}

// Edit adds and removes files and may advance the flushed sequence. Removed
// files move to the removed set with the delta's time. Resolves, if set,
// names the pending-outputs marker this edit completes; every file it adds
// must have been reserved by that marker.
type Edit struct {
	Add        []FileMeta `json:"add,omitempty"`
	Remove     []string   `json:"remove,omitempty"`
	FlushedSeq uint64     `json:"flushed_seq,omitempty"` // 0: unchanged
	// FlushedSegment is the highest WAL segment whose entries are all at or
	// below the flushed sequence (0: unchanged). Segments up to it are
	// garbage for GC and skipped by replay.
	FlushedSegment uint64 `json:"flushed_segment,omitempty"`
	Resolves       string `json:"resolves,omitempty"`
}

// PendingOutputs reserves the ids of files a job is about to upload. It is
// committed before the first byte of any of them is written, so each of them
// has a cleanup owner from the start. A job that reserves more outputs
// commits another PendingOutputs with its job id: the ids are added and
// CreatedAt becomes the later reservation's time.
//
// INVARIANT: every upload of a reserved output ends (lands or is abandoned)
// before CreatedAt + UploadWindow on its writer's clock (see
// region.UploadContext). So once that time, plus MaxClockSkew, has passed on
// any clock, no upload of the marker's outputs can still land, and a newer
// owner may delete them and resolve the marker.
type PendingOutputs struct {
	JobID     string    `json:"job_id"`
	FileIDs   []string  `json:"file_ids"`
	Epoch     uint64    `json:"epoch"`
	CreatedAt time.Time `json:"created_at"`
}

// UploadWindow bounds how long after its reservation an output's upload
// may land; MaxClockSkew is the clock difference between processes that
// the ownership rules tolerate.
const (
	UploadWindow = time.Hour
	MaxClockSkew = time.Minute
)

// WALFences records fence segments of the region's own WAL (the log of
// its own earlier versions wrote, wal.Recover): those an owner found in
// its replay and the one it wrote after it. GC never deletes them. A
// former owner's next WAL append (and a former owner's fence walk) targets
// exactly such a number, so keeping them makes every late append of a
// former owner fail, at any delay.
//
// Sealed, if set, is one of Segments (or a fence already recorded): the
// fence an owner of a version that no longer writes the region's own WAL
// wrote. While it is the highest fence, no owner has written the log
// since, and a new owner replays what is left below it without sealing
// again (State.WALSealed).
type WALFences struct {
	Segments []uint64 `json:"segments"`
	Sealed   uint64   `json:"sealed,omitempty"`
}

// StreamRef names a WAL stream (wal.Stream) that may hold the region's
// entries above the flushed sequence: those in segments From and up, below
// End if End is set (the stream's fence, written when it was sealed).
// LastSeq, once set, is the region's last sequence in the stream: when the
// flushed sequence reaches it, the stream holds nothing the region needs.
type StreamRef struct {
	Stream  string `json:"stream"`
	From    uint64 `json:"from"`
	End     uint64 `json:"end,omitempty"`
	LastSeq uint64 `json:"last_seq,omitempty"`
}

// Needs reports whether the ref covers segment n of stream.
func (r StreamRef) Needs(stream string, n uint64) bool {
	return r.Stream == stream && n >= r.From && (r.End == 0 || n < r.End)
}

// WALStreams replaces the region's stream references (if Refs is set;
// an empty list forgets them all). Garbage adds
// segment ranges the region no longer needs: GC deletes each segment of
// them that no other region needs either, and then forgets the range
// (Collected). Fences adds stream fences this region's owners wrote; GC
// keeps them, as it keeps WALFences.
type WALStreams struct {
	Refs      *[]StreamRef `json:"refs,omitempty"`
	Garbage   []StreamRef  `json:"garbage,omitempty"`
	Collected []StreamRef  `json:"collected,omitempty"`
	Fences    []StreamRef  `json:"fences,omitempty"`
}

// ResolvePending forgets a marker whose outputs were deleted (or were never
// written).
type ResolvePending struct {
	JobID string `json:"job_id"`
}

// GCPurge forgets removed files that GC has deleted, and records that WAL
// segments numbered below WALBelow are deleted (0: unchanged).
type GCPurge struct {
	Files    []string `json:"files,omitempty"`
	WALBelow uint64   `json:"wal_below,omitempty"`
}

// Truncate moves every live file to the removed set and sets the flushed
// sequence: all data at or below it is gone. FlushedSegment, if set, moves
// the flushed WAL segment too, so GC can delete the truncated segments.
type Truncate struct {
	FlushedSeq     uint64 `json:"flushed_seq"`
	FlushedSegment uint64 `json:"flushed_segment,omitempty"`
}

// WriterEpoch records that a new owner opened the region. Epochs only grow.
type WriterEpoch struct {
	Epoch uint64 `json:"epoch"`
}
