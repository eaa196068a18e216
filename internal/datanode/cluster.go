package datanode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
)

// Remote reaches regions hosted by other datanodes.
type Remote interface {
	// Write writes a prepared batch, all of region id, on the region's
	// owner (Engine.WriteHosted if that is this engine).
	Write(ctx context.Context, table string, id layout.RegionID, b region.Batch) (region.WriteResult, error)
	// Scan scans region id on its owner; the entries' Fields are
	// req.Fields, in that order.
	Scan(ctx context.Context, table string, id layout.RegionID, req scan.Request) (row.Iterator, error)
	// ScanColumns reads one numeric field of region id on its owner, as
	// Region.ScanColumns does (Engine.ScanRegionColumns if that is this
	// engine).
	ScanColumns(ctx context.Context, table string, id layout.RegionID, req scan.Request, emit func(*scan.Column) error) error
	// Delete writes a tombstone for the series of tags, which belongs to
	// region id, on the region's owner (Engine.DeleteHosted if that is
	// this engine).
	Delete(ctx context.Context, table string, id layout.RegionID, tags []row.Tag, start, end int64) error
	// RegionTags answers q from the postings of region id on its owner
	// (Engine.RegionTags if that is this engine): a sorted set, read only.
	RegionTags(ctx context.Context, table string, id layout.RegionID, q TagQuery) ([]string, error)
}

// ErrNotHosted: the region is not hosted by this datanode (it moved, or is
// being opened). Ask metasrv where it is and retry.
var ErrNotHosted = errors.New("region not hosted here")

// WriteHosted writes a batch of region id that Engine.Write has prepared
// and routed (the Remote it called found the region hosted here after
// all): no second validation of the batch against the table.
func (e *Engine) WriteHosted(ctx context.Context, id layout.RegionID, b region.Batch) (region.WriteResult, error) {
	e.mu.Lock()
	r := e.regions[id]
	e.mu.Unlock()
	if r == nil {
		return region.WriteResult{}, fmt.Errorf("%w: region %s", ErrNotHosted, id)
	}
	return r.WriteBatch(ctx, b)
}

// WriteRegion writes points that all belong to region id, which must be
// hosted here: the share of a batch another datanode forwarded. The batch
// is validated against the table's schema as a whole first.
func (e *Engine) WriteRegion(ctx context.Context, table string, id layout.RegionID, points []row.Point) (region.WriteResult, error) {
	tg, points, buf, err := e.prepareWrite(ctx, table, points, WriteOptions{}, false)
	if err != nil {
		return region.WriteResult{}, err
	}
	defer putLines(buf)
	t, regions := tg.phys, tg.regions
	if id.Table != t.ID || id.Region >= t.Regions {
		return region.WriteResult{}, fmt.Errorf("%w: region %s is not a region of table %s", layout.ErrInvalidRegion, id, table)
	}
	r := regions[id.Region]
	if r == nil {
		return region.WriteResult{}, fmt.Errorf("%w: region %s", ErrNotHosted, id)
	}
	sk := getKeys()
	defer putKeys(sk)
	if err := sk.encode(points); err != nil {
		return region.WriteResult{}, err
	}
	for i, n := range sk.routeAll(t.Router()) {
		if n != id.Region {
			return region.WriteResult{}, &region.PointError{Index: i, Err: fmt.Errorf("%w: the point belongs to region %d, not %s", region.ErrInvalidWrite, n, id)}
		}
	}
	return r.WriteBatch(ctx, region.Batch{Points: points, Keys: sk.keys})
}

// Assign opens region id here (creating it if it is new), with a new epoch
// that fences any previous owner. The region's table must be in the
// catalog.
func (e *Engine) Assign(ctx context.Context, id layout.RegionID) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return region.ErrClosed
	}
	if e.regions[id] != nil {
		return nil
	}
	t, ok := e.cat.ByID(id.Table)
	if !ok {
		// Created since the catalog's watch last delivered.
		if err := e.cat.Sync(ctx); err != nil {
			return err
		}
		if t, ok = e.cat.ByID(id.Table); !ok {
			return fmt.Errorf("%w: no table has id %d", catalog.ErrTableNotFound, id.Table)
		}
	}
	if id.Region >= t.Regions {
		return fmt.Errorf("%w: table %s has %d regions", layout.ErrInvalidRegion, t.Name, t.Regions)
	}
	if err := e.openRegion(ctx, &t, id.Region); err != nil {
		return err
	}
	e.log.Info("region opened", "region", id.String(), "table", t.Name, "epoch", e.regions[id].Epoch())
	return nil
}

// Unassign closes region id: its compaction is cancelled (waiting for the
// acknowledgement), then the region closes, flushing first if flush is set
// (a planned move) and not otherwise (the lease is lost: writing anything
// more would race the next owner; the WAL holds every acknowledged write).
func (e *Engine) Unassign(ctx context.Context, id layout.RegionID, flush bool) error {
	e.mu.Lock()
	r := e.regions[id]
	delete(e.regions, id)
	e.mu.Unlock()
	if r == nil {
		return nil
	}
	_, _ = e.sched.Cancel(r) // waits; a job too late to cancel has committed
	err := r.Close(ctx, region.CloseOptions{Flush: flush})
	e.log.Info("region closed", "region", id.String(), "flushed", flush, "err", err)
	return err
}

// Hosted lists the regions open here.
func (e *Engine) Hosted() []layout.RegionID {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]layout.RegionID, 0, len(e.regions))
	for id := range e.regions {
		out = append(out, id)
	}
	slices.SortFunc(out, func(a, b layout.RegionID) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// CloseTable closes every region of table id hosted here, without
// flushing (the table is being dropped), each after its compaction has
// acknowledged its cancellation. It returns once they are all closed.
//
// A logical table being dropped has no regions: its series in the
// regions of LinesTable hosted here get a tombstone over all time each,
// so its rows go (metasrv asks every datanode in turn).
func (e *Engine) CloseTable(ctx context.Context, id uint32) (int, error) {
	if t, ok := e.droppingLogical(ctx, id); ok {
		if err := e.deleteLogical(ctx, &t, true); err != nil {
			return 0, fmt.Errorf("delete the rows of logical table %s: %w", t.Name, err)
		}
		e.log.Info("rows of a dropped logical table deleted", "table", t.Name, "id", id)
		return 0, nil
	}
	var errs []error
	n := 0
	for _, rid := range e.Hosted() {
		if rid.Table != id {
			continue
		}
		n++
		if err := e.Unassign(ctx, rid, false); err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}
