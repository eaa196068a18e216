package datanode

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stratadb/strata/internal/gc"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/walstream"
)

// GCRequest selects regions and a GC mode.
type GCRequest struct {
	// catalog.Table selects a table's regions; Region ("table_id/region") one
	// region. With neither, every open region.
	Table  string
	Region string
	// Full runs full-listing GC instead of fast GC.
	Full   bool
	DryRun bool
	// Lingering (fast) and MinAge (full) override the defaults; negative
	// means no wait.
	Lingering time.Duration
	MinAge    time.Duration
	// WALOnly (fast GC) collects only the WAL the region let go
	// (gc.Options.WALOnly): the release after a flush.
	WALOnly bool
}

// GCResult is one region's run.
type GCResult struct {
	Region layout.RegionID
	Full   bool
	DryRun bool
	Fast   gc.Report     // when !Full
	Listed gc.FullReport // when Full
	Err    error         // the run's failure (it is safe to repeat)
}

func (e *Engine) gcRegions(ctx context.Context, req GCRequest) ([]*region.Region, error) {
	switch {
	case req.Table != "" && req.Region != "":
		return nil, fmt.Errorf("%w: give a table or a region, not both", layout.ErrInvalidRegion)
	case req.Table != "":
		_, rs, err := e.localRegions(ctx, req.Table)
		return rs, err
	case req.Region != "":
		id, err := layout.ParseRegionID(req.Region)
		if err != nil {
			return nil, err
		}
		e.mu.Lock()
		r := e.regions[id]
		e.mu.Unlock()
		if r == nil {
			return nil, fmt.Errorf("%w: region %s is not open here", layout.ErrInvalidRegion, id)
		}
		return []*region.Region{r}, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	rs := make([]*region.Region, 0, len(e.regions))
	for _, r := range e.regions {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b *region.Region) int { return strings.Compare(a.ID().String(), b.ID().String()) })
	return rs, nil
}

// GC runs fast or full-listing GC on the selected regions, one region at a
// time. Every region is attempted; the errors are joined.
func (e *Engine) GC(ctx context.Context, req GCRequest) ([]GCResult, error) {
	rs, err := e.gcRegions(ctx, req)
	if err != nil {
		return nil, err
	}
	var out []GCResult
	var errs []error
	for _, r := range rs {
		// One GC of a region at a time (the scheduler, the loop and an
		// operator may ask at once).
		mu, _ := e.gcLocks.LoadOrStore(r.ID(), &sync.Mutex{})
		mu.(*sync.Mutex).Lock()
		res := GCResult{Region: r.ID(), Full: req.Full, DryRun: req.DryRun}
		e.mu.Lock()
		hosted := e.regions[r.ID()] == r
		e.mu.Unlock()
		// The region may have closed or moved since the snapshot; GC
		// itself also proves ownership before deleting (region.Verify).
		switch {
		case !hosted:
			err = fmt.Errorf("%w: region %s closed before its GC ran", ErrNotHosted, r.ID())
		case req.Full:
			res.Listed, err = gc.Full(ctx, r, gc.FullOptions{MinAge: req.MinAge, DryRun: req.DryRun, Metrics: e.opts.GCMetrics})
		default:
			res.Fast, err = gc.Fast(ctx, r, gc.Options{Lingering: req.Lingering, DryRun: req.DryRun, WALOnly: req.WALOnly, JobRunning: e.sched.JobRunning, Metrics: e.opts.GCMetrics,
				Peers: walstream.Peers{State: e.peerState}})
		}
		mu.(*sync.Mutex).Unlock()
		if err != nil {
			res.Err = err
			errs = append(errs, err)
		}
		out = append(out, res)
	}
	return out, errors.Join(errs...)
}

// gcLoop runs fast GC on every region each GCInterval and full-listing GC
// each FullGCInterval (0: never), each with up to 10% jitter, until the
// engine closes. In a cluster, metasrv's scheduler asks instead and the
// loop is off.
func (e *Engine) gcLoop(ctx context.Context) {
	defer e.wg.Done()
	jitter := func(d time.Duration) time.Duration { return d + rand.N(d/10+1) }
	fast := time.NewTimer(jitter(e.opts.GCInterval))
	defer fast.Stop()
	full := time.NewTimer(jitter(max(e.opts.FullGCInterval, time.Second)))
	defer full.Stop()
	if e.opts.FullGCInterval <= 0 {
		full.Stop()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-fast.C:
			e.runGC(ctx, GCRequest{})
			fast.Reset(jitter(e.opts.GCInterval))
		case <-full.C:
			e.runGC(ctx, GCRequest{Full: true})
			full.Reset(jitter(e.opts.FullGCInterval))
		}
	}
}

func (e *Engine) runGC(ctx context.Context, req GCRequest) {
	res, err := e.GC(ctx, req)
	if ctx.Err() != nil {
		return
	}
	for _, r := range res {
		if r.Full && len(r.Listed.Orphans) > 0 {
			e.log.Warn("full-listing GC found unowned objects", "region", r.Region.String(), "orphans", len(r.Listed.Orphans), "deleted", len(r.Listed.Deleted), "young", r.Listed.Young)
		} else if !r.Full && r.Fast.Requests > 0 {
			e.log.Debug("fast GC", "region", r.Region.String(), "removed_files", len(r.Fast.RemovedFiles), "pending_jobs", len(r.Fast.PendingJobs), "wal_segments", r.Fast.WALSegments, "bytes", r.Fast.Bytes)
		}
	}
	if err != nil && !errors.Is(err, region.ErrClosed) {
		e.log.Warn("periodic GC failed", "full", req.Full, "err", err)
	}
}

// releases are the regions whose flush (or truncate) committed a release
// of WAL that fast GC has not collected yet: region.Options.OnWALReleased
// adds them, releaseLoop collects them. A region is in the set once
// however many flushes it committed since its last collection.
type releases struct {
	mu      sync.Mutex
	pending map[layout.RegionID]bool
	signal  chan struct{} // one buffered wakeup of releaseLoop
}

func (q *releases) init() {
	q.pending = map[layout.RegionID]bool{}
	q.signal = make(chan struct{}, 1)
}

// add is region.Options.OnWALReleased: it runs on the flushing goroutine
// and never blocks.
func (q *releases) add(r *region.Region) {
	q.mu.Lock()
	q.pending[r.ID()] = true
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// take empties the set, in a stable order.
func (q *releases) take() []layout.RegionID {
	q.mu.Lock()
	defer q.mu.Unlock()
	ids := make([]layout.RegionID, 0, len(q.pending))
	for id := range q.pending {
		ids = append(ids, id)
	}
	clear(q.pending)
	slices.SortFunc(ids, func(a, b layout.RegionID) int { return strings.Compare(a.String(), b.String()) })
	return ids
}

// releaseRunTimeout bounds one region's release after a flush.
const releaseRunTimeout = 5 * time.Minute

// releaseLoop deletes the WAL that flushes let go, as soon as they commit
// it, instead of at the next fast GC (issue 40: a load's WAL outlived it
// by the GC interval, 3.9 times its SSTs). It runs fast GC with WALOnly
// on each such region, one region at a time (e.GC: the region's GC lock,
// its ownership proved before deleting, shared stream segments deleted
// only once no region with entries in them needs them). A run that fails
// or is cut short by Close deletes nothing the manifest still needs and
// forgets nothing: the ranges stay in the manifest's stream garbage for
// the next run, here or the scheduled fast GC.
func (e *Engine) releaseLoop(ctx context.Context) {
	defer e.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.release.signal:
		}
		for _, id := range e.release.take() {
			if ctx.Err() != nil {
				return
			}
			rctx, cancel := context.WithTimeout(ctx, releaseRunTimeout)
			res, err := e.GC(rctx, GCRequest{Region: id.String(), WALOnly: true})
			cancel()
			switch {
			case err == nil:
				e.log.Debug("released flushed WAL", "region", id.String(), "stream_segments", res[0].Fast.Stream.Deleted, "kept", res[0].Fast.Stream.Kept, "wal_segments", res[0].Fast.WALSegments)
			case ctx.Err() != nil, errors.Is(err, region.ErrClosed), errors.Is(err, ErrNotHosted), errors.Is(err, layout.ErrInvalidRegion):
				// Closed or moved: its next owner's GC collects it.
			default:
				e.log.Warn("releasing flushed WAL failed; fast GC will collect it", "region", id.String(), "err", err)
			}
			if e.opts.AfterRelease != nil {
				r := GCResult{Region: id, Err: err}
				if len(res) == 1 {
					r = res[0]
				}
				e.opts.AfterRelease(r)
			}
		}
	}
}

// peerState is a region's manifest state for collecting shared WAL stream
// segments: the hosted instance's if this node owns the region (it is the
// only writer), else the store's.
func (e *Engine) peerState(ctx context.Context, id layout.RegionID) (*manifest.State, error) {
	e.mu.Lock()
	r := e.regions[id]
	e.mu.Unlock()
	if r != nil {
		if err := r.Settle(ctx); err == nil {
			return r.Manifest(), nil
		}
	}
	return manifest.ReadState(ctx, e.store, id)
}
