package datanode

import (
	"context"
	"errors"
	"fmt"

	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
)

// Flush flushes every region of a table (all tables if table is "").
func (e *Engine) Flush(ctx context.Context, table string) error {
	var rs []*region.Region
	if table == "" {
		e.mu.Lock()
		for _, r := range e.regions {
			rs = append(rs, r)
		}
		e.mu.Unlock()
	} else {
		_, regions, err := e.localRegions(ctx, table)
		if err != nil {
			return err
		}
		rs = regions
	}
	var errs []error
	for _, r := range rs {
		errs = append(errs, r.Flush(ctx))
	}
	return errors.Join(errs...)
}

// Compact compacts every region of a table now and waits: each region's
// picked time window, or with all every file of the region.
func (e *Engine) Compact(ctx context.Context, table string, all bool) ([]compact.Result, error) {
	_, regions, err := e.localRegions(ctx, table)
	if err != nil {
		return nil, err
	}
	var out []compact.Result
	var errs []error
	for _, r := range regions {
		res, err := e.sched.Compact(ctx, r, all)
		if err != nil {
			errs = append(errs, fmt.Errorf("region %s: %w", r.ID(), err))
			continue
		}
		if len(res.Inputs) > 0 {
			out = append(out, res)
		}
	}
	return out, errors.Join(errs...)
}

// CancelCompaction cancels the running compactions of a table and waits
// for each to acknowledge. It returns how many were cancelled and how many
// were too late to cancel (they committed).
func (e *Engine) CancelCompaction(ctx context.Context, table string) (cancelled, tooLate int, err error) {
	_, regions, err := e.localRegions(ctx, table)
	if err != nil {
		return 0, 0, err
	}
	var errs []error
	for _, r := range regions {
		running, err := e.sched.Cancel(r)
		switch {
		case !running:
		case errors.Is(err, compact.ErrTooLate):
			tooLate++
		case err != nil:
			errs = append(errs, err)
		default:
			cancelled++
		}
	}
	return cancelled, tooLate, errors.Join(errs...)
}

// RegionStats describes one region.
type RegionStats struct {
	ID            layout.RegionID
	Files         int
	Rows          int64
	Bytes         int64
	Pending       int
	Removed       int
	FlushedSeq    uint64
	ManifestVer   uint64
	Epoch         uint64
	MinTS, MaxTS  int64
	MemtableBytes int64
}

// Stats describes a table's regions.
func (e *Engine) Stats(ctx context.Context, table string) ([]RegionStats, error) {
	_, regions, err := e.localRegions(ctx, table)
	if err != nil {
		return nil, err
	}
	out := make([]RegionStats, 0, len(regions))
	for _, r := range regions {
		st := r.Manifest()
		rs := RegionStats{ID: r.ID(), Files: len(st.Files), Pending: len(st.Pending), Removed: len(st.Removed),
			FlushedSeq: st.FlushedSeq, ManifestVer: st.Version, Epoch: st.Epoch, MemtableBytes: r.MemtableBytes()}
		first := true
		for _, f := range st.Files {
			rs.Rows += f.Rows
			rs.Bytes += f.Size
			if first || f.MinTS < rs.MinTS {
				rs.MinTS = f.MinTS
			}
			if first || f.MaxTS > rs.MaxTS {
				rs.MaxTS = f.MaxTS
			}
			first = false
		}
		out = append(out, rs)
	}
	return out, nil
}
