package datanode

import (
	"context"
	"fmt"
	"slices"
	"unsafe"

	"github.com/stratadb/strata/internal/addrmemo"
	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/fwdbatch"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
)

// DecodeForwarded is region.Options.DecodeForwarded for the batches
// WriteForwarded writes: a WAL holds a forwarded batch as its sender
// encoded it (region.Batch.Encoded), and replay decodes it here.
func DecodeForwarded(data []byte) ([]row.Point, [][]byte, error) {
	b, err := fwdbatch.Decode(data)
	return b.Points, b.Keys, err
}

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
	rs, ok := routeSets.Get()
	if !ok {
		rs = new(routeSet)
	}
	defer rs.put()
	rs.seen.Begin()
	for i, key := range b.Keys {
		// Routing a key (FNV-1a, a byte at a time) costs several times
		// what finding its address does; a key whose slot another took is
		// routed twice, to the same region.
		p := unsafe.SliceData(key)
		slot, _, ok := rs.seen.Find(p, len(key))
		if ok {
			continue
		}
		rs.seen.Note(slot, p, len(key), 0)
		rs.keys, rs.at = append(rs.keys, key), append(rs.at, i)
	}
	rs.route = slices.Grow(rs.route[:0], len(rs.keys))[:len(rs.keys)]
	t.Router().RouteEach(rs.route, rs.keys)
	for j, n := range rs.route {
		if n != id.Region {
			return region.WriteResult{}, &region.PointError{Index: rs.at[j], Err: fmt.Errorf("%w: the point belongs to region %d, not %s", region.ErrInvalidWrite, n, id)}
		}
	}
	if err := e.commitColumns(ctx, t, b.Points, false); err != nil {
		return region.WriteResult{}, err
	}
	return r.WriteBatch(ctx, b)
}

// routeSet is WriteForwarded's memory for routing a batch's keys: the
// keys seen (by address, internal/addrmemo), each first one and its point,
// and their regions.
type routeSet struct {
	seen  addrmemo.Memo
	keys  [][]byte
	at    []int
	route []uint32
}

// put keeps rs for the next batches (cleared: no reference to a batch
// stays), unless a huge batch grew it.
func (rs *routeSet) put() {
	if cap(rs.keys) > 1<<16 {
		return
	}
	clear(rs.keys)
	rs.keys, rs.at = rs.keys[:0], rs.at[:0]
	routeSets.Put(rs)
}

// routeSets are WriteForwarded's routeSets, kept for the next batches.
var routeSets = freelist.New[*routeSet](8)
