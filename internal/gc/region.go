package gc

import (
	"context"
	"time"

	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/wal"
)

// Region is what GC needs of an open region: its identity, store and
// clock, its settled manifest, what of it is in use (pinned files, its
// running flush), and its owner's checks and commits. *region.Region is
// one; GC does not link the region engine (memtables, SSTs, scans).
type Region interface {
	// ID is the region's id; its keys are derived from it.
	ID() layout.RegionID
	// Store is the object store the region lives in.
	Store() objstore.Bucket
	// Now is the region's clock.
	Now() func() time.Time
	// Epoch is the manifest epoch this owner opened the region with.
	Epoch() uint64
	// UploadWindow bounds an output's upload after its reservation.
	UploadWindow() time.Duration
	// Settle resolves a manifest commit whose outcome is unknown.
	Settle(ctx context.Context) error
	// Manifest is the region's current manifest state.
	Manifest() *manifest.State
	// Pinned reports whether a scan holds the file with this id.
	Pinned(id string) bool
	// FlushRunning reports whether job is the region's flush in progress.
	FlushRunning(job string) bool
	// Verify proves that this instance still owns the region.
	Verify(ctx context.Context) error
	// Commit commits manifest actions as the region's owner.
	Commit(ctx context.Context, actions ...manifest.Action) error
	// WALStream is the WAL stream the region writes through, whose index
	// answers for the segments it wrote.
	WALStream() *wal.Stream
}
