package region

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/wal"
)

// Ownership across owners (docs/design-decisions.md, "Ownership across
// owners"). A region instance may outlive its ownership: paused, cut off or
// just slow, it can wake with calls in flight. What keeps a former owner
// harmless:
//
//   - its acknowledgements: a WAL segment is acknowledged only if the lease
//     is still valid after it landed (wal.MemberOptions.Lease);
//   - its WAL appends: they target the number of a newer owner's fence in
//     the stream, which GC keeps (manifest.WALStreams.Fences); the
//     stream's writer rolls over, and the region's record of the new
//     stream fails on its manifest (a region's own WAL, which earlier
//     versions wrote, is fenced the same way: manifest.WALFences);
//   - its manifest commits: create-if-absent on the next version, checked
//     against a later checkpoint;
//   - its uploads: each lands before its marker's CreatedAt + UploadWindow
//     (UploadContext), and a newer owner takes an older epoch's marker only
//     after that (gc.Fast);
//   - its GC: it deletes only what its own manifest calls garbage, which a
//     newer owner can never make owned again, and full-listing GC deletes
//     only after Verify proves it still owned the region after listing;
//   - its WAL and manifest writes carry the lease's deadline
//     (leaseBucket), so once the lease and the upload window have passed
//     nothing of it can land (what a table drop's final sweep relies on).

// ErrLeaseExpired: the region's lease (Options.Lease) has passed.
var ErrLeaseExpired = wal.ErrLeaseExpired

// leaseErr reports whether the lease still allows writing.
func (r *Region) leaseErr() error {
	if r.opts.Lease == nil {
		return nil
	}
	if d := r.opts.Lease(); !time.Now().Before(d) {
		return fmt.Errorf("%w (region %s): the local deadline %s has passed", ErrLeaseExpired, r.id, d.Format(time.RFC3339Nano))
	}
	return nil
}

// Verify proves the instance still owns the region: it is open, its lease
// holds, and the store has no newer owner's commit (manifest.Verify).
// GC calls it before deleting.
func (r *Region) Verify(ctx context.Context) error {
	if err := r.usable(); err != nil {
		return err
	}
	if err := r.leaseErr(); err != nil {
		return r.setFatal(fmt.Errorf("%w: %w", fence.ErrFenced, err))
	}
	if err := r.man.Verify(ctx); err != nil {
		return r.setFatal(err)
	}
	return nil
}

// UploadContext bounds an upload of an output reserved at reservedAt (the
// marker's CreatedAt, on the region's clock) to the upload window: after
// it, a newer owner may delete the output and forget its marker, so the
// upload must not land later. Not cancelled with ctx: an aborted PUT may
// still land after the cleanup's DELETE.
func (r *Region) UploadContext(ctx context.Context, reservedAt time.Time) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.UploadWindow()-r.opts.Now().Sub(reservedAt))
}

// leaseBucket gives the region's WAL and manifest writes the lease's
// deadline, so a former owner's late write fails instead of landing after
// its lease. SST and series index keys pass through: their uploads have the upload window
// (UploadContext), and deleting garbage late is harmless.
type leaseBucket struct {
	objstore.Bucket
	id       layout.RegionID
	deadline func() time.Time
}

// unbound reports whether a write of key needs no lease: an SST's or a
// series index's.
func (b *leaseBucket) unbound(key string) bool {
	if _, ok := b.id.ParseSSTKey(key); ok {
		return true
	}
	_, ok := b.id.ParseSeriesKey(key)
	return ok
}

func (b *leaseBucket) bound(ctx context.Context, key string) (context.Context, context.CancelFunc, error) {
	if b.unbound(key) {
		return ctx, func() {}, nil
	}
	d := b.deadline()
	if !time.Now().Before(d) {
		return nil, nil, fmt.Errorf("%w: %w (region %s): not writing %s", fence.ErrFenced, ErrLeaseExpired, b.id, key)
	}
	ctx, cancel := context.WithDeadline(ctx, d)
	return ctx, cancel, nil
}

func (b *leaseBucket) Put(ctx context.Context, key string, data []byte) error {
	ctx, cancel, err := b.bound(ctx, key)
	if err != nil {
		return err
	}
	defer cancel()
	return b.Bucket.Put(ctx, key, data)
}

func (b *leaseBucket) CreateIfAbsent(ctx context.Context, key string, data []byte) error {
	ctx, cancel, err := b.bound(ctx, key)
	if err != nil {
		return err
	}
	defer cancel()
	return b.Bucket.CreateIfAbsent(ctx, key, data)
}

func (b *leaseBucket) Delete(ctx context.Context, key string) error {
	ctx, cancel, err := b.bound(ctx, key)
	if err != nil {
		return err
	}
	defer cancel()
	return b.Bucket.Delete(ctx, key)
}

// Upload streams where the store does (objstore.Upload): without it, an
// SST still being encoded was read whole into memory, grown as it came,
// before its PUT.
func (b *leaseBucket) Upload(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	ctx, cancel, err := b.bound(ctx, key)
	if err != nil {
		return err
	}
	defer cancel()
	return objstore.Upload(ctx, b.Bucket, key, r, size)
}

// DeleteMany deletes in batches (objstore.DeleteMany) within the lease if
// any key needs it.
func (b *leaseBucket) DeleteMany(ctx context.Context, keys []string) ([]string, error) {
	if i := slices.IndexFunc(keys, func(k string) bool { return !b.unbound(k) }); i >= 0 {
		bctx, cancel, err := b.bound(ctx, keys[i])
		if err != nil {
			return keys, err
		}
		defer cancel()
		ctx = bctx
	}
	return objstore.DeleteMany(ctx, b.Bucket, keys)
}
