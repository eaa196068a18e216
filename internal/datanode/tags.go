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

// TagValues returns the distinct values, sorted, of tag name in table's
// series with rows in [start, end) (of a logical table, those of
// LinesTable's regions among the series with its table tag). vals may be
// a region's kept answer: read only.
func (e *Engine) TagValues(ctx context.Context, table, name string, start, end int64) (vals []string, err error) {
	tg, err := e.resolveTable(ctx, table, false)
	if err != nil {
		return nil, err
	}
	return e.fromRegions(ctx, tg, TagQuery{Name: name, Start: start, End: end})
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
// values of a named tag, or the tag names of every series (not of those
// with a tag: a logical table's are its schema's, TagNames).
func (q TagQuery) Check() error {
	switch {
	case q.Names && q.Where != nil:
		return fmt.Errorf("%w: the tag names of the series with a tag are not answered from the postings", scan.ErrInvalid)
	case !q.Names && q.Name == "":
		return fmt.Errorf("%w: the values of a tag without a name", scan.ErrInvalid)
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
