package region

import (
	"context"
	"time"

	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/sst"
	"github.com/stratadb/strata/internal/wal"
)

// The methods here are what a compaction job (internal/compact) needs from
// the region it compacts.

// Store is the region's object store.
func (r *Region) Store() objstore.Bucket { return r.store }

// WALStream is the WAL stream the region writes through: its datanode's,
// or its own.
func (r *Region) WALStream() *wal.Stream { return r.stream }

// Epoch is the manifest epoch this owner opened the region with.
func (r *Region) Epoch() uint64 { return r.epoch }

// UploadWindow bounds an output's upload after its reservation
// (manifest.UploadWindow unless Options.UploadWindow sets it).
func (r *Region) UploadWindow() time.Duration {
	if r.opts.UploadWindow > 0 {
		return r.opts.UploadWindow
	}
	return manifest.UploadWindow
}

// Now is the region's clock.
func (r *Region) Now() func() time.Time { return r.opts.Now }

// DropSeries reports series whose rows a compaction drops (nil: none;
// Options.DropSeries).
func (r *Region) DropSeries() func(series string) bool { return r.opts.DropSeries }

// TTLCutoff is the oldest timestamp still alive (math.MinInt64 without a
// TTL).
func (r *Region) TTLCutoff() int64 { return r.ttlCutoff() }

// OpenSST opens a live file of the region for reading.
func (r *Region) OpenSST(ctx context.Context, f manifest.FileMeta) (*sst.Reader, error) {
	return r.opts.Cache.Open(ctx, r.store, r.id.SSTKey(f.ID), f.Size)
}

// Commit commits manifest actions for a job of the region. A fenced
// manifest fences the region.
func (r *Region) Commit(ctx context.Context, actions ...manifest.Action) error {
	if err := r.usable(); err != nil {
		return err
	}
	if err := r.commit(ctx, actions...); err != nil {
		return r.setFatal(err)
	}
	r.warmCardinality()
	return nil
}

// Settle resolves an ambiguous manifest commit, if any: afterwards Manifest
// is the persisted state. It fails (ErrAmbiguous) while the store cannot
// tell; a caller that deletes by the manifest (GC) must then not act on it,
// since the state it sees may lack a commit that landed.
func (r *Region) Settle(ctx context.Context) error { return r.man.Settle(ctx) }

// FlushRunning reports whether job is this region's flush in progress.
func (r *Region) FlushRunning(job string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return job != "" && r.flushJob == job
}

// CompactionWindow is the table's TWCS window (0: inferred from the files).
func (r *Region) CompactionWindow() time.Duration { return r.opts.CompactionWindow }
