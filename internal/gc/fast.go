// Package gc reclaims a region's garbage. Fast GC reads only the manifest
// (no LIST): removed files past the lingering time that no scan pins, the
// outputs of pending markers whose job is not running, and WAL segments
// wholly below the flushed sequence. It then commits one delta that forgets
// what it deleted.
package gc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/walstream"
)

// DefaultLingering is how long a removed file stays for in-flight readers.
const DefaultLingering = time.Hour

// Options configure a run.
type Options struct {
	// Lingering is the age a removed file must reach (default 1 h; a
	// negative value means 0).
	Lingering time.Duration
	// DryRun reports what would be deleted and deletes nothing.
	DryRun bool
	// Concurrency bounds concurrent deletes on a store that takes no
	// batches (default 8).
	Concurrency int
	// JobRunning reports whether a job of this process (a compaction) is
	// running; flushes are asked of the region. Nil: none is.
	JobRunning func(job string) bool
	// WALOnly collects only the WAL: removed files and pending markers are
	// left for a full run (the datanode's release after a flush, which must
	// not apply a lingering time of its own to removed files).
	WALOnly bool
	// Peers answers for the other regions when shared WAL stream segments
	// are collected (default: their manifests in the store, and the
	// region's stream's index).
	Peers   walstream.Peers
	Metrics *Metrics
}

// Report is what a run deleted (or, dry, would delete).
type Report struct {
	RemovedFiles []string // removed SSTs deleted
	PendingJobs  []string // markers resolved
	PendingFiles []string // their outputs deleted
	WALSegments  int      // WAL segments deleted
	// Stream is what collecting shared WAL stream segments did.
	Stream walstream.Report
	// Waiting counts older owners' markers kept because their uploads
	// may still land (within the upload window).
	Waiting  int
	Bytes    int64 // bytes of the SSTs deleted
	Requests int   // requests issued: DELETEs (fast GC never lists)
	Failures int   // deletes that failed (left for the next run)
}

// Fast runs fast GC on an open region. It is idempotent; a crash at any
// point leaves work that the next run does again (deleting a missing object
// is not an error).
func Fast(ctx context.Context, r Region, opts Options) (rep Report, err error) {
	began := time.Now()
	m := metricsOr(opts.Metrics)
	defer func() { finish(m, "fast", began, opts.DryRun, err) }()
	if opts.Lingering == 0 {
		opts.Lingering = DefaultLingering
	}
	if opts.Lingering < 0 {
		opts.Lingering = 0
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	// INVARIANT: GC acts only on a settled manifest. With a commit whose
	// outcome is unknown, the state in memory may lack an edit that landed
	// (a flush's edit making its output live and resolving its marker), and
	// GC would delete a live file as a dead job's output.
	if err := r.Settle(ctx); err != nil {
		return rep, fmt.Errorf("gc %s: the manifest has an unsettled commit; nothing deleted: %w", r.ID(), err)
	}
	st := r.Manifest()
	now := r.Now()()
	var keys []string

	// 1. Removed files past the lingering time and not pinned.
	for id, f := range st.Removed {
		if opts.WALOnly {
			break
		}
		if now.Sub(f.RemovedAt) >= opts.Lingering && !r.Pinned(id) {
			rep.RemovedFiles = append(rep.RemovedFiles, id)
			rep.Bytes += f.Size
			keys = append(keys, r.ID().FileKeys(id)...)
		}
	}
	// 2. Markers of jobs that are not running: ours when neither a flush
	// nor a compaction of this process runs them, and an older owner's
	// once its uploads can no longer land (the upload window after the
	// marker's latest reservation, plus clock skew: that owner may be
	// paused, not dead).
	// INVARIANT: a job that is not running never runs again, so once it is
	// seen not running only GC changes its marker. But it may have
	// committed between the snapshot and the check: re-read the manifest
	// and take only markers still there, or live outputs would be deleted.
	dead := map[string]bool{}
	for job, p := range st.Pending {
		if opts.WALOnly {
			break
		}
		if p.Epoch == r.Epoch() && (r.FlushRunning(job) || (opts.JobRunning != nil && opts.JobRunning(job))) {
			continue
		}
		if p.Epoch != r.Epoch() && now.Sub(p.CreatedAt) < r.UploadWindow()+manifest.MaxClockSkew {
			rep.Waiting++
			continue
		}
		dead[job] = true
	}
	if err := r.Settle(ctx); err != nil {
		return rep, fmt.Errorf("gc %s: the manifest has an unsettled commit; nothing deleted: %w", r.ID(), err)
	}
	now2 := r.Manifest()
	for job, p := range now2.Pending {
		if !dead[job] {
			continue
		}
		rep.PendingJobs = append(rep.PendingJobs, job)
		for _, id := range p.FileIDs {
			rep.PendingFiles = append(rep.PendingFiles, id)
			keys = append(keys, r.ID().FileKeys(id)...)
		}
	}
	// 3. WAL segments up to the flushed segment, from where the last run
	// stopped, but for fences: a former owner's late append targets one.
	walFrom, walBelow := max(st.WALPurged, 1), st.FlushedSegment+1
	for n := walFrom; n < walBelow; n++ {
		if !st.IsFence(n) {
			keys = append(keys, r.ID().WALKey(n))
			rep.WALSegments++
		}
	}
	slices.Sort(rep.RemovedFiles)
	slices.Sort(rep.PendingJobs)
	slices.Sort(rep.PendingFiles)
	if len(keys) == 0 && len(st.StreamGarbage) == 0 {
		return rep, nil
	}
	// Refuse on an instance that no longer owns the region (it is closed,
	// its lease passed, or a newer owner committed).
	if !opts.DryRun {
		if err := r.Verify(ctx); err != nil {
			return rep, fmt.Errorf("gc %s: not the region's owner; nothing deleted: %w", r.ID(), err)
		}
	}
	// 3b. Shared stream segments the region released, where no other
	// region needs them.
	if len(st.StreamGarbage) > 0 {
		peers := opts.Peers
		if s := r.WALStream(); s != nil && peers.Regions == nil {
			peers.Regions, peers.Forget, peers.Live = s.Regions, s.Forget, s.Next
		}
		var err error
		rep.Stream, err = walstream.Collect(ctx, r.Store(), r.ID(), st.StreamGarbage, peers, opts.DryRun)
		m.Requests.WithLabelValues("fast", string(objstore.OpGet)).Add(float64(rep.Stream.Reads))
		m.Requests.WithLabelValues("fast", string(objstore.OpDelete)).Add(float64(rep.Stream.Deleted))
		m.ObjectsDeleted.WithLabelValues("fast", string(KindStream)).Add(float64(rep.Stream.Deleted))
		if err != nil {
			return rep, fmt.Errorf("gc %s: %w", r.ID(), err)
		}
	}
	if opts.DryRun {
		return rep, nil
	}
	rep.Requests = len(keys)
	m.Requests.WithLabelValues("fast", string(objstore.OpDelete)).Add(float64(len(keys)))
	failed, err := deleteAll(ctx, r.Store(), keys, opts.Concurrency)
	rep.Failures = len(failed)
	if err != nil {
		// Nothing is forgotten: the next run deletes again what this one
		// did (deleting a missing object is not an error).
		m.DeleteErrors.WithLabelValues("fast").Add(float64(len(failed)))
		return rep, fmt.Errorf("gc %s: %w", r.ID(), err)
	}
	// 4. One delta forgets it all.
	var actions []manifest.Action
	if len(rep.RemovedFiles) > 0 || walBelow > walFrom {
		purge := &manifest.GCPurge{Files: rep.RemovedFiles}
		if walBelow > walFrom {
			purge.WALBelow = walBelow
		}
		actions = append(actions, manifest.Action{Purge: purge})
	}
	for _, job := range rep.PendingJobs {
		actions = append(actions, manifest.Action{Resolve: &manifest.ResolvePending{JobID: job}})
	}
	if len(rep.Stream.Collected) > 0 {
		actions = append(actions, manifest.Action{Streams: &manifest.WALStreams{Collected: rep.Stream.Collected, Garbage: rep.Stream.Deferred}})
	}
	if len(actions) > 0 {
		if err := r.Commit(ctx, actions...); err != nil {
			return rep, fmt.Errorf("gc %s: commit: %w", r.ID(), err)
		}
	}
	m.ObjectsDeleted.WithLabelValues("fast", string(KindSST)).Add(float64(len(rep.RemovedFiles) + len(rep.PendingFiles)))
	m.ObjectsDeleted.WithLabelValues("fast", string(KindWAL)).Add(float64(rep.WALSegments))
	m.BytesDeleted.WithLabelValues("fast", string(KindSST)).Add(float64(rep.Bytes))
	return rep, nil
}

// deleteAll deletes keys: in batches where the store takes them
// (objstore.DeleteMany), else with at most n requests in flight. A
// missing object counts as deleted. It returns the keys whose delete
// failed and every failure, collected.
func deleteAll(ctx context.Context, store objstore.Bucket, keys []string, n int) (map[string]bool, error) {
	if _, ok := store.(objstore.BatchDeleter); ok {
		left, err := objstore.DeleteMany(ctx, store, keys)
		failed := make(map[string]bool, len(left))
		for _, k := range left {
			failed[k] = true
		}
		return failed, err
	}
	sem := make(chan struct{}, n)
	var mu sync.Mutex
	var errs *multierror.Error
	failed := map[string]bool{}
	var wg sync.WaitGroup
	for _, k := range keys {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := store.Delete(ctx, k); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				mu.Lock()
				errs = multierror.Append(errs, fmt.Errorf("delete %s: %w", k, err))
				failed[k] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failed, errs.ErrorOrNil()
}
