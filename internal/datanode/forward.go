package datanode

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
)

// WriteForwarded writes a batch of region id, hosted here, that another
// datanode prepared (validated against the table, keys encoded, routed)
// and forwarded as it held it (internal/fwdbatch, whose Decode checked
// its structure and that each key decodes into the run's tags). Nothing
// is parsed or encoded again, but nothing from the network is trusted
// either: the region must be a region of table and hosted here, every key
// must route to it, and the batch is validated against the table's schema
// (region.ValidateBatch: a run of one shape is checked once), new columns
// recorded, before the region writes it. A refused batch writes nothing.
// Keys that share their bytes (fwdbatch.Decode gives the repeats of a key
// in a run its first occurrence's) are routed once.
func (e *Engine) WriteForwarded(ctx context.Context, table string, id layout.RegionID, b region.Batch) (region.WriteResult, error) {
	if len(b.Keys) != len(b.Points) {
		return region.WriteResult{}, fmt.Errorf("%w: %d series keys for %d points", region.ErrInvalidWrite, len(b.Keys), len(b.Points))
	}
	tg, err := e.resolveTable(ctx, table, false)
	if err != nil {
		return region.WriteResult{}, err
	}
	t := tg.phys
	if tg.t.Logical {
		// Forwarded batches are rows of the table that holds a logical
		// table's: they name that one.
		return region.WriteResult{}, fmt.Errorf("%w: %s is a logical table: forwarded rows name %s", catalog.ErrInvalidTable, table, t.Name)
	}
	if id.Table != t.ID || id.Region >= t.Regions {
		return region.WriteResult{}, fmt.Errorf("%w: region %s is not a region of table %s", layout.ErrInvalidRegion, id, table)
	}
	r := tg.regions[id.Region]
	if r == nil {
		return region.WriteResult{}, fmt.Errorf("%w: region %s", ErrNotHosted, id)
	}
	routed, ok := routedSets.Get()
	if !ok {
		routed = map[keyAddr]struct{}{}
	}
	defer func() {
		if len(routed) <= 1<<16 {
			clear(routed)
			routedSets.Put(routed)
		}
	}()
	for i, key := range b.Keys {
		// Routing a key (FNV-1a, a byte at a time) costs several times
		// what finding its address does.
		a := keyAddr{unsafe.SliceData(key), len(key)}
		if _, ok := routed[a]; ok {
			continue
		}
		if n := layout.Route(key, t.Regions); n != id.Region {
			return region.WriteResult{}, &region.PointError{Index: i, Err: fmt.Errorf("%w: the point belongs to region %d, not %s", region.ErrInvalidWrite, n, id)}
		}
		routed[a] = struct{}{}
	}
	if err := e.commitColumns(ctx, t, b.Points, false); err != nil {
		return region.WriteResult{}, err
	}
	return r.WriteBatch(ctx, b)
}

// keyAddr is a key by the address and length of its bytes, which do not
// change while a batch is written.
type keyAddr struct {
	p *byte
	n int
}

// routedSets are the sets of keys WriteForwarded routed, kept for the next
// batches (cleared: no reference to a batch stays).
var routedSets = freelist.New[map[keyAddr]struct{}](8)
