package datanode

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/schema"
)

// Logical tables (catalog.Table.Logical) keep their rows in the physical
// table catalog.LinesTable: a row of logical table t is a row of
// LinesTable whose series key holds t's tags and the tag
// catalog.TableTag=<t's id>, and whose fields are catalog.LinesColumn of
// t's fields. Writes translate points on the way in (toLines); scans add
// the tag to their filter, read the LinesTable columns, and give the rows
// back under t's field names with the tag taken out of their keys
// (Scanner.strip), so a scan's caller sees what a physical table gives.

// tableTag is the tag of LinesTable's series keys that holds t's rows.
func tableTag(t *catalog.Table) row.Tag {
	return row.Tag{Name: catalog.TableTag, Value: strconv.FormatUint(uint64(t.ID), 10)}
}

type linesKey struct {
	table   uint32
	version uint64
}

// linesColumns are the LinesTable columns of logical table t's fields, by
// field ordinal, computed once per schema version.
func (e *Engine) linesColumns(t *catalog.Table, sch *schema.Schema) []string {
	k := linesKey{t.ID, t.Schema.Version}
	if c, ok := e.lines.Load(k); ok {
		return c.([]string)
	}
	cols := make([]string, len(sch.Fields()))
	for i, f := range sch.Fields() {
		cols[i] = catalog.LinesColumn(f.Name, f.Kind)
	}
	e.lines.Store(k, cols)
	return cols
}

// linesBuf holds a batch's rows of LinesTable while the batch is written:
// the points and the backing arrays of their tags, fields and keys, reused
// through a free list (the regions copy what they keep of a point).
type linesBuf struct {
	points []row.Point
	tags   []row.Tag
	fields []row.Field
	keys   []byte
}

var linesBufs = freelist.New[*linesBuf](16)

func getLines() *linesBuf {
	if b, ok := linesBufs.Get(); ok {
		return b
	}
	return new(linesBuf)
}

// putLines keeps b for the next batch (not a rare huge batch's).
func putLines(b *linesBuf) {
	if b == nil || cap(b.fields) > 1<<20 || cap(b.keys) > 16<<20 {
		return
	}
	clear(b.points) // drop references into other buffers
	clear(b.tags)
	clear(b.fields)
	b.points, b.tags, b.fields, b.keys = b.points[:0], b.tags[:0], b.fields[:0], b.keys[:0]
	linesBufs.Put(b)
}

// toLines returns points of logical table t, validated against its
// schema, as rows of LinesTable, held by buf. A point whose series key
// the parser knew gets its new key without sorting its tags again.
func (e *Engine) toLines(t *catalog.Table, points []row.Point, buf *linesBuf) ([]row.Point, error) {
	cur, ok := e.cat.Lookup(t.Name) // its columns were just committed
	if !ok || cur.ID != t.ID {
		return nil, fmt.Errorf("%w: %s", catalog.ErrTableNotFound, t.Name)
	}
	sch, err := e.tableSchema(&cur)
	if err != nil {
		return nil, err
	}
	cols := e.linesColumns(&cur, sch)
	id := tableTag(t)
	ntags, nfields, nkeys := 0, 0, 0
	for i := range points {
		ntags += len(points[i].Tags) + 1
		nfields += len(points[i].Fields)
		if points[i].Series != nil {
			nkeys += len(points[i].Series) + len(id.Name) + len(id.Value) + 2
		}
	}
	// Sized once: the points' slices of them must not move.
	tags := slices.Grow(buf.tags[:0], ntags)
	fields := slices.Grow(buf.fields[:0], nfields)
	keys := slices.Grow(buf.keys[:0], nkeys)
	out := slices.Grow(buf.points[:0], len(points))[:len(points)]
	defer func() { buf.points, buf.tags, buf.fields, buf.keys = out, tags, fields, keys }()
	for i := range points {
		p := &points[i]
		q := &out[i]
		q.TS, q.Shape = p.TS, p.Shape
		start := len(tags)
		tags = append(append(tags, p.Tags...), id)
		q.Tags = tags[start:len(tags):len(tags)]
		start = len(fields)
		for _, f := range p.Fields {
			o, ok := sch.FieldOrdinal(f.Name)
			if !ok {
				return nil, &region.PointError{Index: i, Err: fmt.Errorf("%w: field %q is not in table %s", region.ErrInvalidWrite, f.Name, t.Name)}
			}
			fields = append(fields, row.Field{Name: cols[o], Value: f.Value})
		}
		q.Fields = fields[start:len(fields):len(fields)]
		if p.Series != nil {
			if i > 0 && points[i-1].Series != nil && string(points[i-1].Series) == string(p.Series) {
				q.Series = out[i-1].Series
				continue
			}
			start = len(keys)
			if keys, err = row.InsertSeriesTag(keys, p.Series, id); err != nil {
				return nil, &region.PointError{Index: i, Err: fmt.Errorf("%w: %v", region.ErrInvalidWrite, err)}
			}
			q.Series = keys[start:len(keys):len(keys)]
		}
	}
	return out, nil
}

// checkTableTag refuses points of a logical table with a tag named
// catalog.TableTag, which LinesTable's keys hold.
func checkTableTag(points []row.Point) error {
	for i := range points {
		for _, tg := range points[i].Tags {
			if tg.Name == catalog.TableTag {
				return &region.PointError{Index: i, Err: fmt.Errorf("%w: tag %q is reserved in a logical table", region.ErrInvalidWrite, tg.Name)}
			}
		}
	}
	return nil
}

// linesScan is a scan request of logical table t turned into one of
// LinesTable: t's tag added to the filter, its field names (fields, of
// t's schema) turned into LinesTable's columns.
func (e *Engine) linesScan(t *catalog.Table, sch *schema.Schema, req scan.Request, fields []schema.Field) scan.Request {
	req.Tags = append(slices.Clone(req.Tags), tableTag(t))
	req.Fields = make([]string, len(fields))
	cols := e.linesColumns(t, sch)
	for i, f := range fields {
		o, _ := sch.FieldOrdinal(f.Name)
		req.Fields[i] = cols[o]
	}
	if req.SeriesOnly {
		req.Fields = []string{}
	}
	return req
}

// stripper takes the tag catalog.TableTag out of series keys, remembering
// the last key (rows come by series).
type stripper struct {
	in, out string
}

func (s *stripper) strip(key string) string {
	if key != s.in {
		s.in, s.out = key, row.RemoveSeriesTag(key, catalog.TableTag)
	}
	return s.out
}

// droppedSeries reports a series of LinesTable whose logical table is
// gone (catalog.Catalog.Gone): a compaction drops its rows, which no scan
// reads (those of a write that raced the drop among them).
func (e *Engine) droppedSeries(series string) bool {
	id, err := strconv.ParseUint(row.SeriesTag(series, catalog.TableTag), 10, 32)
	return err == nil && e.cat.Gone(uint32(id))
}

// ensureLines creates the LinesTable of logical table's tenant if the
// catalog lacks it (a create that loses the race to another's is no
// error).
func (e *Engine) ensureLines(ctx context.Context, table string) error {
	lines := catalog.LinesOf(table)
	if _, ok := e.cat.Lookup(lines); ok {
		return nil
	}
	_, err := e.createTable(ctx, catalog.TableSpec{Name: lines, Regions: e.opts.LinesRegions})
	if errors.Is(err, catalog.ErrTableExists) {
		return nil
	}
	return err
}

// deleteLogical writes a tombstone over all time for every series of
// logical table t that LinesTable's regions hold: how its rows go when it
// is truncated (every region: those hosted elsewhere through their
// owners) or dropped (hostedOnly: metasrv asks every datanode, through
// CloseTable).
func (e *Engine) deleteLogical(ctx context.Context, t *catalog.Table, hostedOnly bool) error {
	tg, err := e.targetLocal(catalog.LinesOf(t.Name))
	if err != nil {
		return err
	}
	id := tableTag(t)
	var errs []error
	for i, r := range tg.regions {
		if r == nil && hostedOnly {
			continue
		}
		req := scan.Request{Start: region.AllTime, End: region.AllTimeEnd, Tags: []row.Tag{id}, SeriesOnly: true, Fields: []string{}}
		rid := layout.RegionID{Table: tg.phys.ID, Region: uint32(i)}
		var it row.Iterator
		if r == nil {
			it, err = e.opts.Remote.Scan(ctx, tg.phys.Name, rid, req)
		} else {
			var sc *region.Scanner
			if sc, err = r.Scan(ctx, req); err == nil {
				it = &batchIter{src: sc, close: sc.Close}
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var keys []string
		for it.Next() {
			if k := it.Entry().Series; len(keys) == 0 || keys[len(keys)-1] != k {
				keys = append(keys, k)
			}
		}
		if err := errors.Join(it.Err(), it.Close()); err != nil {
			errs = append(errs, err)
			continue
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
		for _, k := range keys {
			tags, err := row.DecodeSeries(nil, k)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if r == nil {
				err = e.opts.Remote.Delete(ctx, tg.phys.Name, rid, tags, region.AllTime, math.MaxInt64)
			} else {
				err = r.Delete(ctx, tags, region.AllTime, math.MaxInt64)
			}
			if err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	return errors.Join(errs...)
}

// droppingLogical returns the logical table of id being dropped, as of
// the newest commit (a table this copy lacks is synced first).
func (e *Engine) droppingLogical(ctx context.Context, id uint32) (catalog.Table, bool) {
	find := func() (catalog.Table, bool) {
		for _, t := range e.cat.List(true) {
			if t.ID == id {
				return t, true
			}
		}
		return catalog.Table{}, false
	}
	t, found := find()
	if !found {
		if _, live := e.cat.ByID(id); live {
			return catalog.Table{}, false
		}
		if err := e.cat.Sync(ctx); err != nil {
			return catalog.Table{}, false
		}
		t, found = find()
	}
	return t, found && t.Logical
}
