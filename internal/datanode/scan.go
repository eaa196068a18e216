package datanode

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/merge"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/rollup"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/schema"
)

// Scanner streams a table scan: its regions' scans merged by (series, ts).
type Scanner struct {
	direct  *region.Scanner // one region with the table's field positions
	fields  []schema.Field
	scans   []*region.Scanner
	remotes []row.Iterator // scans of regions hosted elsewhere
	it      row.Iterator
	batch   []row.Entry
	strip   *stripper // a logical table's: takes catalog.TableTag out of keys
	size    int
	last    int // rows of the last batch
	err     error
}

// Scan scans a table. The fields of the result are the table's fields (or
// the requested ones), in that order.
func (e *Engine) Scan(ctx context.Context, table string, req scan.Request) (*Scanner, error) {
	return e.scan(ctx, table, req, nil)
}

// ScanRegion scans one region of a table, which must be hosted here (a
// scan forwarded by another datanode).
func (e *Engine) ScanRegion(ctx context.Context, table string, id layout.RegionID, req scan.Request) (*Scanner, error) {
	return e.scan(ctx, table, req, &id)
}

func (e *Engine) scan(ctx context.Context, table string, req scan.Request, only *layout.RegionID) (*Scanner, error) {
	if req.Rollup != nil || req.Aggregate != nil {
		return nil, fmt.Errorf("%w: a rollup is computed by a column scan, not a scan of rows", scan.ErrInvalid)
	}
	tg, err := e.resolveTable(ctx, table, false)
	if err != nil {
		return nil, err
	}
	t, regions := tg.phys, tg.regions
	sch, err := e.tableSchema(tg.t)
	if err != nil {
		return nil, err
	}
	if req.BatchRows <= 0 {
		req.BatchRows = 4096
	}
	// Scan every region with the table's field list, so positions agree.
	names := req.Fields
	if req.SeriesOnly {
		names = []string{} // a listing has no fields
	}
	if names == nil {
		for _, f := range sch.Fields() {
			names = append(names, f.Name)
		}
	}
	var fields []schema.Field
	for _, n := range names {
		o, ok := sch.FieldOrdinal(n)
		if !ok {
			return nil, fmt.Errorf("%w: unknown field %q", scan.ErrInvalid, n)
		}
		fields = append(fields, sch.Fields()[o])
	}
	if only != nil && (only.Table != t.ID || only.Region >= t.Regions) {
		return nil, fmt.Errorf("%w: region %s is not a region of table %s", layout.ErrInvalidRegion, only, table)
	}
	var strip *stripper
	if tg.t.Logical {
		req = e.linesScan(tg.t, sch, req, fields)
		names, strip = req.Fields, &stripper{}
	}
	s := &Scanner{fields: fields, size: req.BatchRows, strip: strip}
	var inputs []row.Iterator
	want := t.Router().Of(req.Tags, req.In)
	for i, r := range regions {
		if only != nil && uint32(i) != only.Region || only == nil && !want.Has(i) {
			continue
		}
		if r == nil {
			if only != nil {
				s.Close()
				return nil, fmt.Errorf("%w: region %d/%d", ErrNotHosted, t.ID, i)
			}
			rreq := req
			rreq.Fields = names
			it, err := e.opts.Remote.Scan(ctx, t.Name, layout.RegionID{Table: t.ID, Region: uint32(i)}, rreq)
			if err != nil {
				s.Close()
				return nil, err
			}
			s.remotes = append(s.remotes, it)
			inputs = append(inputs, it)
			continue
		}
		// A region may not have every table column yet: ask only for the
		// ones it has, and map them to the table's positions.
		rsch := r.Schema()
		rreq := req
		rreq.Fields = nil
		var pos []int
		for i, n := range names {
			if _, ok := rsch.FieldOrdinal(n); ok {
				rreq.Fields = append(rreq.Fields, n)
				pos = append(pos, i)
			}
		}
		if rreq.Fields == nil {
			rreq.Fields = []string{}
		}
		sc, err := r.Scan(ctx, rreq)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.scans = append(s.scans, sc)
		inputs = append(inputs, &batchIter{src: sc, remap: true, pos: pos, width: len(names)})
	}
	if len(inputs) == 0 { // the filters name values of no one region
		s.it = merge.New(nil, merge.DefaultOptions())
	} else if si, ok := inputs[0].(*batchIter); ok && len(inputs) == 1 && len(s.scans) == 1 && len(si.pos) == si.width && isIdentity(si.pos) {
		s.direct = s.scans[0]
	} else if len(inputs) == 1 {
		s.it = inputs[0]
	} else {
		s.it = merge.New(inputs, merge.DefaultOptions())
	}
	return s, nil
}

// Fields are the columns of each row's Fields.
func (s *Scanner) Fields() []schema.Field { return s.fields }

// Next reads the next batch.
func (s *Scanner) Next() bool {
	if s.direct != nil {
		return s.direct.Next()
	}
	if s.err != nil {
		return false
	}
	if s.batch == nil {
		s.batch = make([]row.Entry, 0, s.last) // sized as the last (Batch hands each over)
	}
	s.batch = s.batch[:0]
	for len(s.batch) < s.size && s.it.Next() {
		s.batch = append(s.batch, *s.it.Entry())
	}
	s.last = len(s.batch)
	if err := s.it.Err(); err != nil {
		s.err = err
		return false
	}
	return len(s.batch) > 0
}

// Batch is the current batch; it stays valid after Next.
func (s *Scanner) Batch() []row.Entry {
	var b []row.Entry
	if s.direct != nil {
		b = s.direct.Batch()
	} else {
		b = s.batch
		s.batch = nil
	}
	if s.strip != nil {
		for i := range b {
			b[i].Series = s.strip.strip(b[i].Series)
		}
	}
	return b
}

// Err is the error that ended the scan.
func (s *Scanner) Err() error {
	if s.direct != nil {
		return s.direct.Err()
	}
	return s.err
}

// Close releases the scan.
func (s *Scanner) Close() error {
	var errs []error
	for _, sc := range s.scans {
		errs = append(errs, sc.Close())
	}
	for _, it := range s.remotes {
		errs = append(errs, it.Close())
	}
	s.scans, s.remotes = nil, nil
	return errors.Join(errs...)
}

// batches is a scan that yields batches of entries: a region's scanner or
// the engine's.
type batches interface {
	Next() bool
	Batch() []row.Entry
	Err() error
}

// batchIter turns batches into a row.Iterator. With remap, entry field j
// moves to position pos[j] of width fields (a region may lack some of its
// table's fields); close, if set, ends the scan.
type batchIter struct {
	src   batches
	remap bool
	pos   []int
	width int
	close func() error
	batch []row.Entry
	i     int
	cur   row.Entry
}

// Iterator returns the scan as a row.Iterator, one entry at a time; its
// Close closes the scan.
func (s *Scanner) Iterator() row.Iterator { return &batchIter{src: s, close: s.Close} }

func (it *batchIter) Next() bool {
	it.i++
	for it.i >= len(it.batch) {
		if !it.src.Next() {
			return false
		}
		it.batch, it.i = it.src.Batch(), 0
	}
	e := it.batch[it.i]
	if it.remap && (len(it.pos) != it.width || !isIdentity(it.pos)) {
		f := make([]row.Value, it.width)
		for j, p := range it.pos {
			f[p] = e.Field(j)
		}
		e.Fields = f
	}
	it.cur = e
	return true
}

func isIdentity(pos []int) bool {
	for i, p := range pos {
		if p != i {
			return false
		}
	}
	return true
}

func (it *batchIter) Entry() *row.Entry { return &it.cur }

func (it *batchIter) Err() error { return it.src.Err() }

func (it *batchIter) Close() error {
	if it.close == nil {
		return nil
	}
	return it.close()
}

// ScanColumns reads one numeric field of a table's series, column by
// column (region.Region.ScanColumns): each region hosted here directly,
// each hosted elsewhere through its owner's column scan (Remote), up to
// regionScans regions at once. Regions hold disjoint series, so a series'
// Columns all come from one region, under its order. As
// Region.ScanColumns does, it may call emit from several goroutines at
// once, never for one series at once; it returns once no call is left.
//
// With req.Rollup, each region hosted elsewhere has its series rolled up
// by its owner (internal/rollup): each series' columns are then one
// Rolled column. The regions hosted here give their samples, for the
// caller to roll up as they come (the caller does so while the regions'
// files are read, in parallel parts, and applies its sample limit as it
// goes; rolled up here first, the same work would end in a serial hand-
// over), as does an owner that does not know rollups (an older binary):
// the caller must roll up the columns that are not Rolled.
//
// With req.Aggregate as well, each region hosted elsewhere has its series
// aggregated by group at its owner: one Aggregated column per group and
// region. The regions hosted here give their samples, as above, and an
// owner that does not know aggregates (an older binary) its series,
// rolled or not: the caller must aggregate the columns that are not
// Aggregated, and merge the partials.
func (e *Engine) ScanColumns(ctx context.Context, table string, req scan.Request, emit func(*scan.Column) error) error {
	if _, _, err := checkColumns(req); err != nil {
		return err
	}
	tg, err := e.resolveTable(ctx, table, false)
	if err != nil {
		return err
	}
	t, regions := tg.phys, tg.regions
	sch, err := e.tableSchema(tg.t)
	if err != nil {
		return err
	}
	o, ok := sch.FieldOrdinal(req.Fields[0])
	if !ok {
		return fmt.Errorf("%w: unknown field %q", scan.ErrInvalid, req.Fields[0])
	}
	if tg.t.Logical {
		req = e.linesScan(tg.t, sch, req, sch.Fields()[o:o+1])
		to := emit
		emit = func(c *scan.Column) error {
			l := *c // the caller's may be read again (ColumnsOf compares its Series)
			l.Series = row.RemoveSeriesTag(c.Series, catalog.TableTag)
			return to(&l)
		}
	}
	if len(regions) == 1 {
		return e.regionColumns(ctx, t, 0, regions[0], req, nil, nil, emit)
	}
	// A table partitioned by a tag the filters name reads only the
	// regions of the values named.
	want := t.Router().Of(req.Tags, req.In)
	if i, ok := want.Only(); ok {
		return e.regionColumns(ctx, t, uint32(i), regions[i], req, nil, nil, emit)
	}
	// Regions hold disjoint series: read at once, they still never give
	// emit one series at once. No caller needs an order across series.
	// The remote ones start first: their owners' round trips then overlap
	// the reading of the local ones. The last is read on this goroutine:
	// one goroutine fewer to start, and to wake this one at its end.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(regionScans - 1)
	var last func() error
	for _, remote := range []bool{true, false} {
		for i, r := range regions {
			if (r == nil) == remote && want.Has(i) {
				if last != nil {
					g.Go(last)
				}
				last = func() error { return e.regionColumns(gctx, t, uint32(i), r, req, nil, nil, emit) }
			}
		}
	}
	if last != nil {
		if err := last(); err != nil {
			if gctx.Err() != nil { // another region's scan failed first, or ctx ended
				err = context.Cause(gctx)
			}
			cancel(err)
			_ = g.Wait()
			return err
		}
	}
	return g.Wait()
}

// regionScans is how many regions a column scan reads at once (the
// caller's goroutine one of them): a remote
// one mostly waits on its owner, a local one reads files in parallel
// parts already.
const regionScans = 4

// checkColumns checks a column scan's request, and its rollup and
// aggregation if any.
func checkColumns(req scan.Request) (*rollup.Func, *rollup.Aggregation, error) {
	switch {
	case len(req.Fields) != 1 || req.SeriesOnly:
		return nil, nil, fmt.Errorf("%w: a column scan reads exactly one field", scan.ErrInvalid)
	case req.Rollup == nil && req.Aggregate != nil:
		return nil, nil, fmt.Errorf("%w: an aggregation at the owner without a rollup", scan.ErrInvalid)
	case req.Rollup == nil:
		return nil, nil, nil
	}
	fn, err := rollup.New(*req.Rollup)
	if err != nil || req.Aggregate == nil {
		return fn, nil, err
	}
	agg, err := rollup.NewAggregation(*req.Aggregate)
	return fn, agg, err
}

// ScanRegionColumns reads one numeric field of region id of a physical
// table, as Region.ScanColumns does, or its series' rollups (req.Rollup,
// as ScanColumns), or those aggregated by group (req.Aggregate); the
// region must be hosted here (a column scan forwarded by another
// datanode).
func (e *Engine) ScanRegionColumns(ctx context.Context, table string, id layout.RegionID, req scan.Request, emit func(*scan.Column) error) error {
	fn, agg, err := checkColumns(req)
	if err != nil {
		return err
	}
	tg, err := e.resolveTable(ctx, table, false)
	if err != nil {
		return err
	}
	t := tg.phys
	if tg.t.Logical {
		return fmt.Errorf("%w: %s is a logical table: scan the regions of %s", scan.ErrInvalid, table, t.Name)
	}
	if id.Table != t.ID || id.Region >= t.Regions {
		return fmt.Errorf("%w: region %s is not a region of table %s", layout.ErrInvalidRegion, id, table)
	}
	r := tg.regions[id.Region]
	if r == nil {
		return fmt.Errorf("%w: region %s", ErrNotHosted, id)
	}
	return e.regionColumns(ctx, t, id.Region, r, req, fn, agg, emit)
}

// regionColumns is the column scan of region n of t: r, or the region's
// owner's if r is nil (hosted elsewhere, req.Rollup and req.Aggregate
// computed there); r's is rolled up by fn if set (req.Rollup's, for
// another datanode) and aggregated by agg if set, else its samples.
func (e *Engine) regionColumns(ctx context.Context, t *catalog.Table, n uint32, r *region.Region, req scan.Request, fn *rollup.Func, agg *rollup.Aggregation, emit func(*scan.Column) error) error {
	if r == nil {
		return e.opts.Remote.ScanColumns(ctx, t.Name, layout.RegionID{Table: t.ID, Region: n}, req, emit)
	}
	if _, ok := r.Schema().FieldOrdinal(req.Fields[0]); !ok {
		return nil // the region has no values of the field yet
	}
	req.Rollup, req.Aggregate = nil, nil // the region reads samples
	scanColumns := func(each func(*scan.Column) error) error { return r.ScanColumns(ctx, req, each) }
	switch {
	case agg != nil:
		return agg.Columns(ctx, fn, scanColumns, emit)
	case fn != nil:
		return fn.Columns(scanColumns, emit)
	}
	return scanColumns(emit)
}
