package datanode

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sync/errgroup"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/scan"
)

// Cardinality counts the distinct series of table with rows in
// [start, end) by their tags (scan.Cardinality), from the regions'
// series indexes and memtables, never their rows: exact, a series in
// several files and memtables counting once. The answer is by table
// name: of a physical table, its own; of LinesTable, one entry per
// logical table with series; of a logical table, its own (its table tag
// is no pair of the counts). The counts may be a region's own: read
// only.
//
// Each region counts where it is hosted: a region hosted here from its
// postings (region.Region.Cardinality, kept between calls), one hosted
// elsewhere from a listing of its series its owner sends
// (Remote.Scan, scan.Request.SeriesOnly: keys, no rows), counted here. A
// series routes to one region, so the regions' counts add up. If one
// region cannot answer, the call fails naming it: no partial count.
//
// (A tenant, once they exist, is a filter of the tables asked.)
func (e *Engine) Cardinality(ctx context.Context, table string, start, end int64) (map[string]*scan.Cardinality, error) {
	tg, err := e.resolveTable(ctx, table, false)
	if err != nil {
		return nil, err
	}
	// names maps a group (a table tag's value) to the table it counts.
	names := map[string]string{}
	switch {
	case tg.t.Logical:
		names[tableTag(tg.t).Value] = tg.t.Name
	case catalog.IsLines(tg.t.Name):
		for _, t := range e.cat.List(false) {
			if t.Logical && !t.Dropping && catalog.LinesOf(t.Name) == tg.t.Name {
				names[tableTag(&t).Value] = t.Name
			}
		}
	default:
		names[""] = tg.t.Name
	}
	runs := make([]map[string]*scan.Cardinality, len(tg.regions))
	g, gctx := errgroup.WithContext(ctx)
	local := make(chan struct{}, runtime.GOMAXPROCS(0)) // hosted regions count on the CPUs, a few at once
	for i, r := range tg.regions {
		id := layout.RegionID{Table: tg.phys.ID, Region: uint32(i)}
		if r == nil {
			g.Go(func() (err error) {
				if runs[i], err = e.remoteCardinality(gctx, tg.phys.Name, id, start, end); err != nil {
					return fmt.Errorf("cardinality of region %s (on its owner): %w", id, err)
				}
				return nil
			})
			continue
		}
		g.Go(func() (err error) {
			select {
			case local <- struct{}{}:
				defer func() { <-local }()
			case <-gctx.Done():
				return gctx.Err()
			}
			if runs[i], err = r.Cardinality(gctx, start, end); err != nil {
				return fmt.Errorf("cardinality of region %s: %w", id, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	parts := map[string][]*scan.Cardinality{}
	for _, groups := range runs {
		for v, c := range groups {
			if name, ok := names[v]; ok && c.Series > 0 { // else a dropped table's series, which no query reads
				parts[name] = append(parts[name], c)
			}
		}
	}
	out := make(map[string]*scan.Cardinality, len(parts))
	for name, cs := range parts {
		if len(cs) == 1 {
			out[name] = cs[0] // a region's own counts (read only), not a copy of a million pairs
			continue
		}
		sum := scan.NewCardinality()
		for _, c := range cs {
			sum.Add(c)
		}
		out[name] = sum
	}
	return out, nil
}

// remoteCardinality counts the series of region id, hosted elsewhere,
// from a listing of them its owner sends.
func (e *Engine) remoteCardinality(ctx context.Context, table string, id layout.RegionID, start, end int64) (map[string]*scan.Cardinality, error) {
	it, err := e.opts.Remote.Scan(ctx, table, id, scan.Request{Start: start, End: end, Fields: []string{}, SeriesOnly: true})
	if err != nil {
		return nil, err
	}
	c := scan.NewCounter(true)
	for it.Next() {
		if err := c.Add(it.Entry().Series); err != nil {
			it.Close()
			return nil, err
		}
	}
	if err := errors.Join(it.Err(), it.Close()); err != nil {
		return nil, err
	}
	return c.Groups, nil
}
