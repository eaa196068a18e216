package datanode

import (
	"context"
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
)

// Label look-ups: a tag's values, or the tag names, of a table's series,
// from its regions' postings (memtables and series indexes, no SST read).
// Each region answers where it is hosted: here, or on its owner
// (Remote.RegionTags).

// TagQuery is a question to one region's postings: the values of tag Name
// (or, with Names, the tag names) of its series with rows in
// [Start, End), only those with tag Where if set (a logical table's table
// tag, in LinesTable's regions). A series counts if a file or memtable
// holding it overlaps the range, as a series-only scan lists it.
type TagQuery struct {
	Name       string
	Names      bool
	Start, End int64
	Where      *row.Tag
}

// TagValues returns the distinct values, sorted, of tag name in the
// series of table that req selects: with rows in [req.Start, req.End)
// and passing req.Tags and req.In (its other fields are ignored). They
// come from the regions' postings (of a logical table, from those of
// LinesTable's regions, among the series with its table tag) unless req
// filters more than the postings answer, one tag of a non-empty value (of
// a logical table, none): then from a listing of the series it selects
// (a series-only Scan). vals may be a region's kept answer: read only.
func (e *Engine) TagValues(ctx context.Context, table, name string, req scan.Request) (vals []string, err error) {
	tg, err := e.resolveTable(ctx, table, false)
	if err != nil {
		return nil, err
	}
	q := TagQuery{Name: name, Start: req.Start, End: req.End}
	switch {
	case len(req.In) == 0 && len(req.Tags) == 0:
	case len(req.In) == 0 && len(req.Tags) == 1 && req.Tags[0].Value != "" && !tg.t.Logical:
		q.Where = &req.Tags[0]
	default:
		return e.listValues(ctx, table, name, req)
	}
	return e.fromRegions(ctx, tg, q)
}

// listValues collects the values of tag name of the series req selects,
// listed (a series-only scan).
func (e *Engine) listValues(ctx context.Context, table, name string, req scan.Request) ([]string, error) {
	req.SeriesOnly, req.Fields = true, nil
	sc, err := e.Scan(ctx, table, req)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	var out []string
	last := ""
	for sc.Next() {
		for _, en := range sc.Batch() {
			if v := row.SeriesTag(en.Series, name); v != "" && v != last {
				out, last = append(out, v), v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// TagNames returns the distinct tag names, sorted, of table's series
// with rows in [start, end), as TagValues counts them. Of a logical
// table, they are those of its schema's tags that TagValues finds values
// of (LinesTable's postings hold every logical table's tag names
// together).
func (e *Engine) TagNames(ctx context.Context, table string, start, end int64) (names []string, err error) {
	tg, err := e.resolveTable(ctx, table, false)
	if err != nil {
		return nil, err
	}
	if !tg.t.Logical {
		return e.fromRegions(ctx, tg, TagQuery{Names: true, Start: start, End: end})
	}
	sch, err := e.tableSchema(tg.t)
	if err != nil {
		return nil, err
	}
	for _, n := range sch.Tags() {
		vals, err := e.fromRegions(ctx, tg, TagQuery{Name: n, Start: start, End: end})
		if err != nil {
			return nil, err
		}
		if len(vals) > 0 {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names, nil
}

// fromRegions merges what each region of tg answers to q (each a sorted
// set): a region hosted here from its postings, one hosted elsewhere
// through its owner, all of those at once. Of a logical table, q asks
// LinesTable's regions with Where set to the table's tag. It fails, and
// answers nothing, if one region cannot answer.
func (e *Engine) fromRegions(ctx context.Context, tg *target, q TagQuery) ([]string, error) {
	if tg.t.Logical {
		tag := tableTag(tg.t)
		q.Where = &tag
	}
	runs := make([][]string, len(tg.regions))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	for i, r := range tg.regions {
		if r == nil {
			id := layout.RegionID{Table: tg.phys.ID, Region: uint32(i)}
			g.Go(func() (err error) {
				runs[i], err = e.opts.Remote.RegionTags(gctx, tg.phys.Name, id, q)
				return err
			})
		}
	}
	// The hosted regions meanwhile (they mostly answer what they kept).
	var err error
	for i, r := range tg.regions {
		if r != nil {
			if runs[i], err = regionTags(ctx, r, q); err != nil {
				cancel()
				break
			}
		}
	}
	if werr := g.Wait(); err == nil {
		err = werr
	}
	if err != nil {
		return nil, err
	}
	return region.MergeSorted(runs), nil // a region's own answer if it is the only one
}

// RegionTags answers q from the postings of region id of a physical
// table, which must be hosted here (a look-up another datanode forwarded,
// Remote.RegionTags). The answer may be the region's kept one: read only.
func (e *Engine) RegionTags(ctx context.Context, table string, id layout.RegionID, q TagQuery) ([]string, error) {
	tg, err := e.resolveTable(ctx, table, false)
	if err != nil {
		return nil, err
	}
	t := tg.phys
	if tg.t.Logical {
		return nil, fmt.Errorf("%w: %s is a logical table: ask the regions of %s", scan.ErrInvalid, table, t.Name)
	}
	if id.Table != t.ID || id.Region >= t.Regions {
		return nil, fmt.Errorf("%w: region %s is not a region of table %s", layout.ErrInvalidRegion, id, table)
	}
	r := tg.regions[id.Region]
	if r == nil {
		return nil, fmt.Errorf("%w: region %s", ErrNotHosted, id)
	}
	return regionTags(ctx, r, q)
}

// Check says whether q is a question a region's postings answer: the
// values of a named tag, of every series or of those with a tag of a
// non-empty value, or the tag names of every series (not of those with a
// tag: a logical table's are its schema's, TagNames).
func (q TagQuery) Check() error {
	switch {
	case q.Names && q.Where != nil:
		return fmt.Errorf("%w: the tag names of the series with a tag are not answered from the postings", scan.ErrInvalid)
	case !q.Names && q.Name == "":
		return fmt.Errorf("%w: the values of a tag without a name", scan.ErrInvalid)
	case q.Where != nil && q.Where.Value == "":
		return fmt.Errorf("%w: the series without tag %q are not answered from the postings", scan.ErrInvalid, q.Where.Name)
	}
	return nil
}

// regionTags answers q from r's postings.
func regionTags(ctx context.Context, r *region.Region, q TagQuery) ([]string, error) {
	if err := q.Check(); err != nil {
		return nil, err
	}
	switch {
	case q.Names:
		return r.TagNames(ctx, q.Start, q.End)
	case q.Where != nil:
		return r.TagValuesWhere(ctx, q.Name, *q.Where, q.Start, q.End)
	}
	return r.TagValues(ctx, q.Name, q.Start, q.End)
}
