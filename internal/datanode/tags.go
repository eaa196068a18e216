package datanode

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
)

// Label look-ups: a tag's values, or the tag names, of a table's series.
// Each region answers where it is hosted, here or on its owner
// (Remote.RegionTags), from its postings (memtables and series indexes)
// or, for a filter they do not answer, from a listing of the series the
// filter selects; only the answer leaves the region's datanode.

// TagQuery is a question to one region: the values of tag Name (or, with
// Names, the tag names) of its series with rows in [Start, End) that pass
// Tags and In (as a scan's filters: scan.Request). A series counts if a
// file or memtable holding it overlaps the range, as a series-only scan
// lists it. Of a logical table, Tags holds its table tag (in LinesTable's
// regions), which is no tag name of the answer.
type TagQuery struct {
	Name       string
	Names      bool
	Start, End int64
	Tags       []row.Tag
	In         []row.TagIn
}

// TagValues returns the distinct values, sorted, of tag name in the
// series of table that req selects: with rows in [req.Start, req.End),
// passing req.Tags and req.In (its other fields are ignored). vals may be
// a region's kept answer: read only.
func (e *Engine) TagValues(ctx context.Context, table, name string, req scan.Request) (vals []string, err error) {
	return e.tags(ctx, table, TagQuery{Name: name, Start: req.Start, End: req.End, Tags: req.Tags, In: req.In})
}

// TagNames returns the distinct tag names, sorted, of the series of table
// that req selects, as TagValues counts them.
func (e *Engine) TagNames(ctx context.Context, table string, req scan.Request) (names []string, err error) {
	return e.tags(ctx, table, TagQuery{Names: true, Start: req.Start, End: req.End, Tags: req.Tags, In: req.In})
}

// tags merges what each region of table answers to q (each a sorted set):
// a region hosted here directly, each one hosted elsewhere through its
// owner, all of those at once. Of a logical table, q asks LinesTable's
// regions, with the table's tag added to its filter. It fails, and
// answers nothing, if one region cannot answer.
func (e *Engine) tags(ctx context.Context, table string, q TagQuery) ([]string, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	tg, err := e.resolveTable(ctx, table, false)
	if err != nil {
		return nil, err
	}
	if tg.t.Logical {
		q.Tags = append(slices.Clone(q.Tags), tableTag(tg.t))
	}
	runs := make([][]string, len(tg.regions))
	want := tg.phys.Router().Of(q.Tags, q.In) // a partitioned table's regions the filters name
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	for i, r := range tg.regions {
		if !want.Has(i) {
			continue
		}
		if r == nil {
			id := layout.RegionID{Table: tg.phys.ID, Region: uint32(i)}
			g.Go(func() (err error) {
				runs[i], err = e.opts.Remote.RegionTags(gctx, tg.phys.Name, id, q)
				return err
			})
		}
	}
	// The hosted regions meanwhile (they mostly answer what they kept).
	for i, r := range tg.regions {
		if r != nil && want.Has(i) {
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

// RegionTags answers q of region id of a physical table, which must be
// hosted here (a look-up another datanode forwarded, Remote.RegionTags).
// The answer may be the region's kept one: read only.
func (e *Engine) RegionTags(ctx context.Context, table string, id layout.RegionID, q TagQuery) ([]string, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
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

func (q *TagQuery) check() error {
	if !q.Names && q.Name == "" {
		return fmt.Errorf("%w: the values of a tag without a name", scan.ErrInvalid)
	}
	return nil
}

// regionTags answers q of r: from its postings if q filters no series, or
// only by a logical table's tag (its values); else from a listing of the
// series q selects (of a filter's tags, the region reads only the series
// its postings give them).
func regionTags(ctx context.Context, r *region.Region, q TagQuery) ([]string, error) {
	switch {
	case len(q.Tags) == 0 && len(q.In) == 0 && q.Names:
		return r.TagNames(ctx, q.Start, q.End)
	case len(q.Tags) == 0 && len(q.In) == 0:
		return r.TagValues(ctx, q.Name, q.Start, q.End)
	case len(q.Tags) == 1 && len(q.In) == 0 && !q.Names && q.Tags[0].Name == catalog.TableTag:
		return r.TagValuesWhere(ctx, q.Name, q.Tags[0], q.Start, q.End)
	}
	sc, err := r.Scan(ctx, q.Listing())
	if err != nil {
		return nil, err
	}
	c := q.Collector()
	for sc.Next() {
		for _, e := range sc.Batch() {
			if err := c.Add(e.Series); err != nil {
				sc.Close()
				return nil, err
			}
		}
	}
	if err := errors.Join(sc.Err(), sc.Close()); err != nil {
		return nil, err
	}
	return c.Answer(), nil
}

// Listing is the series-only scan that lists the series q selects.
func (q TagQuery) Listing() scan.Request {
	return scan.Request{Start: q.Start, End: q.End, Tags: q.Tags, In: q.In, Fields: []string{}, SeriesOnly: true}
}

// Collector collects q's answer from the keys of the series it selects,
// listed (Listing).
func (q TagQuery) Collector() *TagCollector { return &TagCollector{q: q} }

// TagCollector collects a TagQuery's answer from a listing of series.
type TagCollector struct {
	q     TagQuery
	out   []string // values, repeats and all
	names map[string]struct{}
	last  string
	tags  []row.Tag
}

// Add adds series key's share of the answer: its value of the tag, or its
// tag names but catalog.TableTag. Keys may come in any order, and again.
func (c *TagCollector) Add(key string) error {
	if key == c.last {
		return nil
	}
	c.last = key
	if !c.q.Names {
		if v := row.SeriesTag(key, c.q.Name); v != "" {
			c.out = append(c.out, v)
		}
		return nil
	}
	var err error
	if c.tags, err = row.DecodeSeries(c.tags[:0], key); err != nil {
		return err
	}
	if c.names == nil {
		c.names = map[string]struct{}{}
	}
	for _, t := range c.tags {
		if t.Name != catalog.TableTag {
			c.names[t.Name] = struct{}{}
		}
	}
	return nil
}

// Answer is the answer collected: sorted, without repeats.
func (c *TagCollector) Answer() []string {
	if c.q.Names {
		return slices.Sorted(maps.Keys(c.names))
	}
	slices.Sort(c.out)
	return slices.Compact(c.out)
}
