package gc

import (
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
)

// Kind is the kind of an object under a region prefix.
type Kind string

// Object kinds.
const (
	KindSST      Kind = "sst"
	KindSeries   Kind = "series" // an SST's series index: owned with its SST
	KindWAL      Kind = "wal"
	KindStream   Kind = "stream" // a shared WAL stream segment
	KindManifest Kind = "manifest"
	KindOther    Kind = "other" // a key Strata never writes
)

// Owner is what answers for an object: who will read it or delete it.
type Owner string

// Owners. The empty Owner means the object is an orphan: nothing will ever
// read or delete it except full-listing GC.
const (
	OwnerNone     Owner = ""
	OwnerLive     Owner = "live"     // a live SST
	OwnerRemoved  Owner = "removed"  // a removed SST: fast GC deletes it after the lingering time
	OwnerPending  Owner = "pending"  // a pending marker's output: its job or fast GC
	OwnerWAL      Owner = "wal"      // a WAL segment above the flushed segment: replayed on open
	OwnerFlushed  Owner = "flushed"  // a WAL segment at or below the flushed segment: fast GC deletes it
	OwnerFence    Owner = "fence"    // a WAL fence segment: kept, so a former owner's late append fails
	OwnerManifest Owner = "manifest" // a manifest delta or checkpoint: the manifest deletes old ones
)

// Classify names the kind and owner of the object at key in region id
// according to st. The rules are the whole ownership invariant: every
// object Strata writes under a region is one of these, and an object with
// no owner can never gain one (file ids and WAL segment numbers are never
// reused), so deleting it is safe.
func Classify(id layout.RegionID, st *manifest.State, key string) (Kind, Owner) {
	if fid, ok := id.ParseSSTKey(key); ok {
		return KindSST, fileOwner(st, fid)
	}
	if fid, ok := id.ParseSeriesKey(key); ok {
		return KindSeries, fileOwner(st, fid)
	}
	if n, ok := id.ParseWALKey(key); ok {
		switch {
		case n > st.FlushedSegment:
			return KindWAL, OwnerWAL
		case st.IsFence(n):
			return KindWAL, OwnerFence
		case n >= st.WALPurged:
			// Fast GC deletes from the watermark up to the flushed segment.
			return KindWAL, OwnerFlushed
		default:
			// Below the watermark fast GC has passed: nothing will
			// delete it again.
			return KindWAL, OwnerNone
		}
	}
	if _, _, ok := id.ParseManifestKey(key); ok {
		return KindManifest, OwnerManifest
	}
	return KindOther, OwnerNone
}

// fileOwner is the owner of file fid's objects (its SST and series index).
func fileOwner(st *manifest.State, fid string) Owner {
	if _, live := st.Files[fid]; live {
		return OwnerLive
	}
	if _, removed := st.Removed[fid]; removed {
		return OwnerRemoved
	}
	if st.Owns(fid) {
		return OwnerPending
	}
	return OwnerNone
}
