package datanode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/limits"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	tenants "github.com/stratadb/strata/internal/tenant"
)

// WriteOptions control Engine.Write.
type WriteOptions struct {
	// CreateTable creates a missing table with default options.
	CreateTable bool
	// Metrics allows writing the metrics table (catalog.MetricsTable),
	// which only remote write writes: a line-protocol point there could
	// retype its value column and refuse every remote write after.
	Metrics bool
}

// checkMetrics refuses a write to the metrics table without opts.Metrics,
// and any write naming LinesTable: its rows are written through the
// logical tables it holds.
func checkMetrics(table string, opts WriteOptions) error {
	switch {
	case catalog.IsMetrics(table) && !opts.Metrics:
		return fmt.Errorf("%w: table %s is written through remote write (/api/v1/write) only", catalog.ErrInvalidTable, table)
	case catalog.IsLines(table):
		return fmt.Errorf("%w: table %s holds the rows of the logical tables, and is written through them only", catalog.ErrInvalidTable, table)
	}
	return nil
}

// Write validates the batch against the table's schema as a whole (nothing
// is written if any point is bad), records new columns in the catalog,
// and writes each region's share of the batch. Each region's share is
// atomic; if the store fails, some regions' shares may have been written
// and a retry of the batch is safe.
//
// The tenant's limits apply before anything is written (admit): a batch over a rate or shape
// limit writes nothing; the points of new series over a series limit are
// left out, the rest written, and the limit's error returned with what
// was written. With limits, the batch is validated whole before they
// apply (a bad one takes no tokens and adds no series); validation after
// sees the admitted points (a PointError's index is among them).
func (e *Engine) Write(ctx context.Context, table string, points []row.Point, opts WriteOptions) (region.WriteResult, error) {
	if err := checkMetrics(table, opts); err != nil {
		return region.WriteResult{}, err
	}
	checked := false
	if e.opts.Limits != nil {
		// A bad batch takes no tokens and adds no active series: checked
		// whole before the limits see it, and not again by the write. (A
		// table this node does not know yet may exist: the write reloads
		// the catalog for it, and checks the batch then.)
		err := e.validate(TableBatch{Table: table, Points: points}, opts)
		if err != nil && !errors.Is(err, catalog.ErrTableNotFound) {
			return region.WriteResult{}, err
		}
		checked = err == nil
	}
	admitted, lerr := e.admit([]TableBatch{{Table: table, Points: points}})
	if lerr != nil && admitted == nil {
		return region.WriteResult{}, lerr
	}
	points = nil
	if len(admitted) > 0 {
		points = admitted[0].Points
	}
	var res region.WriteResult
	var err error
	if len(points) > 0 || lerr == nil {
		res, err = e.write(ctx, table, points, opts, checked)
	}
	return res, limitResult(res, err, lerr)
}

// limitResult is a write's error once the points a series limit refused
// were left out: the write's own, else the limit's, with what was
// written.
func limitResult(res region.WriteResult, err error, lerr *limits.Error) error {
	if err != nil || lerr == nil {
		return err
	}
	lerr.Written = res.Written
	return lerr
}

// write is Write; checked says the batch was validated already (by
// WriteTables), so only its columns are looked at again. Each point is
// validated once and its series key encoded once: the regions get
// prepared batches.
func (e *Engine) write(ctx context.Context, table string, points []row.Point, opts WriteOptions, checked bool) (region.WriteResult, error) {
	tg, points, buf, err := e.prepareWrite(ctx, table, points, opts, checked)
	if err != nil {
		return region.WriteResult{}, err
	}
	defer putLines(buf) // the regions copy what they keep of a point
	t, regions := tg.phys, tg.regions
	sk := getKeys()
	defer putKeys(sk) // the regions copy what they keep of a key
	if err := sk.encode(points); err != nil {
		return region.WriteResult{}, err
	}
	shares := make([]region.Batch, len(regions))
	if len(regions) == 1 {
		shares[0] = region.Batch{Points: points, Keys: sk.keys}
	} else {
		// Count each region's share first: one exact size each, in the
		// buffers of an earlier write (sk.shares).
		route := sk.routeAll(t.Router())
		counts := make([]int, len(regions))
		for _, n := range route {
			counts[n]++
		}
		for n, c := range counts {
			if c > 0 {
				shares[n] = sk.share(n, c)
			}
		}
		for i, n := range route {
			shares[n].Points = append(shares[n].Points, points[i])
			shares[n].Keys = append(shares[n].Keys, sk.keys[i])
		}
		sk.keep(shares)
	}
	var wg sync.WaitGroup
	results := make([]region.WriteResult, len(regions))
	errs := make([]error, len(regions))
	for i, share := range shares {
		if len(share.Points) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if regions[i] == nil {
				results[i], errs[i] = e.opts.Remote.Write(ctx, t.Name, layout.RegionID{Table: t.ID, Region: uint32(i)}, share)
				return
			}
			results[i], errs[i] = regions[i].WriteBatch(ctx, share)
		}()
	}
	wg.Wait()
	var res region.WriteResult
	for _, r := range results {
		res.Written += r.Written
		res.Expired += r.Expired
	}
	return res, errors.Join(errs...)
}

// seriesKeys holds a batch's encoded series keys while the batch is
// written: one buffer, reused across writes through a free list.
type seriesKeys struct {
	buf        []byte
	keys       [][]byte
	route      []uint32
	enc        row.SeriesEncoder
	memo       [routeMemo]routeSlot
	first      [][]byte // routeAll's keys seen first
	firstRoute []uint32
	// shares are the buffers of each region's share of a write split over
	// regions: a TSBS request of 10,000 rows over 3 regions allocated 900
	// KB of them, fresh memory each write. The regions copy what they keep
	// of a point, so they are free again once the write returns.
	shares []region.Batch
}

// share returns an empty share of region n with room for c points.
func (sk *seriesKeys) share(n, c int) region.Batch {
	for len(sk.shares) <= n {
		sk.shares = append(sk.shares, region.Batch{})
	}
	b := sk.shares[n]
	return region.Batch{Points: slices.Grow(b.Points[:0], c), Keys: slices.Grow(b.Keys[:0], c)}
}

// keep takes the shares' buffers, grown as they are, for the next write.
func (sk *seriesKeys) keep(shares []region.Batch) {
	for n, b := range shares {
		if b.Points != nil {
			sk.shares[n] = b
		}
	}
}

// routeMemo is how many keys' first sightings a batch remembers, one a
// slot. The points of a series in a line-protocol request share their
// key's bytes (the parser keeps the key of each tag set it saw), and
// hashing a key (FNV-1a, a byte at a time) costs several times what
// finding it by address does. A TSBS request of 10,000 lines over 4,000
// hosts repeats each key 4,000 points later: a memo of 1,024 slots found
// 80 of its 6,000 repeats, one of 8,192 finds about two thirds (the rest
// lost to slots shared). routeAll empties the slots it used.
const routeMemo = 1 << routeBits

const routeBits = 13

// routeSlot is a key seen in this batch, by the address and length of its
// bytes (which do not change while the batch is written; the slot holds
// them, so the address is not reused meanwhile), and its place in
// seriesKeys.first.
type routeSlot struct {
	p *byte
	n int
	i uint32
}

// routeAll sets sk.route to the region of each of sk.keys
// (layout.Route), and returns it. Each key is routed once as far as its
// address tells (routeMemo), four keys at once (layout.RouteEach). The
// memo is empty again when it returns: every slot it set is a key's in
// first, whose slots it zeroes (no reference to the batch stays, and a
// memo of 8,192 slots is not cleared whole for each write).
func (sk *seriesKeys) routeAll(r layout.Router) []uint32 {
	route := slices.Grow(sk.route[:0], len(sk.keys))[:len(sk.keys)]
	first := sk.first[:0]
	for i, k := range sk.keys {
		p := unsafe.SliceData(k)
		s := sk.slot(p)
		if s.p != p || s.n != len(k) || p == nil {
			*s = routeSlot{p: p, n: len(k), i: uint32(len(first))}
			first = append(first, k)
		}
		route[i] = s.i
	}
	firstRoute := slices.Grow(sk.firstRoute[:0], len(first))[:len(first)]
	r.RouteEach(firstRoute, first)
	for i, j := range route {
		route[i] = firstRoute[j]
	}
	for _, k := range first {
		*sk.slot(unsafe.SliceData(k)) = routeSlot{}
	}
	clear(first) // no reference to the batch stays
	sk.route, sk.first, sk.firstRoute = route, first[:0], firstRoute[:0]
	return route
}

// slot is the memo's slot of a key whose bytes start at p.
func (sk *seriesKeys) slot(p *byte) *routeSlot {
	return &sk.memo[uint64(uintptr(unsafe.Pointer(p)))*0x9e3779b97f4a7c15>>(64-routeBits)]
}

// maxKeptShares bounds the regions whose share buffers a kept
// seriesKeys holds.
const maxKeptShares = 64

// keyLists are kept for the next writes (freelist: a sync.Pool's were
// mostly gone by the next write on a busy node).
var keyLists = freelist.New[*seriesKeys](16)

func getKeys() *seriesKeys {
	if sk, ok := keyLists.Get(); ok {
		return sk
	}
	return new(seriesKeys)
}

func putKeys(sk *seriesKeys) {
	if cap(sk.buf) > 16<<20 {
		return // a rare huge batch: do not keep its buffer
	}
	clear(sk.keys) // drop references into old buffers (routeAll left the memo empty)
	sk.buf, sk.keys, sk.route = sk.buf[:0], sk.keys[:0], sk.route[:0]
	if len(sk.shares) > maxKeptShares {
		sk.shares = nil // a table of many regions: not kept
	}
	for n := range sk.shares {
		b := &sk.shares[n]
		if cap(b.Points) > 1<<20 {
			*b = region.Batch{} // a rare huge share: not kept
			continue
		}
		clear(b.Points) // no reference to the batch stays (past len: none)
		clear(b.Keys)
		b.Points, b.Keys = b.Points[:0], b.Keys[:0]
	}
	keyLists.Put(sk)
}

// encode encodes each point's series key. A key points into buf, or into
// the buffer buf grew from (which stays valid while referenced).
// The buffer is sized from the first key.
func (sk *seriesKeys) encode(points []row.Point) error {
	sk.keys = slices.Grow(sk.keys, len(points))
	for i := range points {
		if k := points[i].Series; k != nil { // the parser knew it
			sk.keys = append(sk.keys, k)
			continue
		}
		start := len(sk.buf)
		var err error
		if sk.buf, err = sk.enc.Append(sk.buf, points[i].Tags); err != nil {
			return &region.PointError{Index: i, Err: fmt.Errorf("%w: %v", region.ErrInvalidWrite, err)}
		}
		sk.keys = append(sk.keys, sk.buf[start:len(sk.buf):len(sk.buf)])
		if start == 0 {
			sk.buf = slices.Grow(sk.buf, (len(sk.buf)-start)*(len(points)-1)*5/4)
		}
	}
	return nil
}

// prepareWrite resolves the table (creating it if asked), validates the
// batch (only its columns, if checked) and commits new columns to the
// catalog. Neither the reload or create of a table, nor validation, nor a
// schema change takes the engine's lock: the catalog's compare-and-swap
// orders concurrent changes of the catalog. It returns the points to
// write to the target's regions: points themselves, or for a logical
// table their rows of LinesTable (toLines), held by a buffer to give back
// (putLines) once they are written.
func (e *Engine) prepareWrite(ctx context.Context, table string, points []row.Point, opts WriteOptions, checked bool) (*target, []row.Point, *linesBuf, error) {
	tg, err := e.resolveTable(ctx, table, opts.CreateTable)
	if err != nil {
		return nil, nil, nil, err
	}
	if tg.t.Logical {
		if err := checkTableTag(points); err != nil {
			return nil, nil, nil, err
		}
	}
	if err := e.commitColumns(ctx, tg.t, points, checked); err != nil {
		return nil, nil, nil, err
	}
	if !tg.t.Logical {
		return tg, points, nil, nil
	}
	buf := getLines()
	lines, err := e.toLines(tg.t, points, buf)
	if err == nil {
		// LinesTable's columns are checked on their own: a logical
		// table's commit and LinesTable's are two, and a write that
		// stopped between them must not leave the next one without its
		// columns.
		err = e.commitColumns(ctx, tg.phys, lines, true)
	}
	if err != nil {
		putLines(buf)
		return nil, nil, nil, err
	}
	return tg, lines, buf, nil
}

// commitColumns validates points against t's schema (only their columns,
// if checked) and commits the columns t lacks.
func (e *Engine) commitColumns(ctx context.Context, t *catalog.Table, points []row.Point, checked bool) error {
	check := func(t *catalog.Table) (*schema.Additions, error) {
		sch, err := e.tableSchema(t)
		if err != nil {
			return nil, err
		}
		if checked {
			return region.Columns(points, sch)
		}
		return region.ValidateBatch(points, sch)
	}
	add, err := check(t)
	if err != nil || !add.Changed() {
		return err
	}
	checked = true // values are schema-independent: checked once is enough
	// Only this table's record is read and written. Another write (here or
	// on another datanode) may have changed the schema meanwhile: the
	// update checks again against the newest schema it knows, and again if
	// its commit loses the race.
	_, err = e.cat.UpdateTable(ctx, t.Name, func(cur *catalog.Table) error {
		add, err := check(cur)
		if err != nil || !add.Changed() {
			return err
		}
		next, err := add.Result()
		if err != nil {
			return err
		}
		cur.Schema = next.Manifest()
		return nil
	})
	if err != nil {
		return fmt.Errorf("record new columns: %w", err)
	}
	return nil
}

// target is a table resolved for a request: the table named, and the
// table whose regions hold its rows (itself, or LinesTable for a logical
// table) with those regions, nil for one hosted elsewhere.
type target struct {
	t       *catalog.Table
	phys    *catalog.Table
	regions []*region.Region
}

// tableRegions resolves the table whose regions hold table's rows (table
// itself, or LinesTable for a logical table) and those regions, nil for
// one hosted elsewhere. A table missing from the catalog's copy is looked
// for in etcd first (reloadTable).
func (e *Engine) tableRegions(ctx context.Context, table string) (*catalog.Table, []*region.Region, error) {
	tg, err := e.resolveTable(ctx, table, false)
	if err != nil {
		return nil, nil, err
	}
	return tg.phys, tg.regions, nil
}

// resolveTable resolves table, creating a missing table if create is set.
// NB: the reload (an etcd round trip) runs without Engine.mu, which every
// write and scan takes; the copy and the regions are read again under the
// lock after it.
func (e *Engine) resolveTable(ctx context.Context, table string, create bool) (*target, error) {
	tg, err := e.targetLocal(table)
	if !errors.Is(err, catalog.ErrTableNotFound) {
		return tg, err
	}
	if t, ok := e.cat.Lookup(table); ok && (t.Dropping || !t.Logical) {
		return nil, err // being dropped: no reload brings it back
	}
	if err := e.reloadTable(ctx, table, create); err != nil {
		return nil, err
	}
	return e.targetLocal(table)
}

// targetLocal is resolveTable as of the catalog's copy: it reads no
// backend.
func (e *Engine) targetLocal(table string) (*target, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, region.ErrClosed
	}
	t, ok := e.cat.Lookup(table)
	if !ok || t.Dropping {
		return nil, fmt.Errorf("%w: %s", catalog.ErrTableNotFound, table)
	}
	tg := &target{t: &t, phys: &t}
	if t.Logical {
		p, ok := e.cat.Lookup(catalog.LinesOf(table))
		if !ok || p.Dropping {
			return nil, fmt.Errorf("%w: %s (the table of logical table %s)", catalog.ErrTableNotFound, catalog.LinesOf(table), table)
		}
		tg.phys = &p
	}
	tg.regions = make([]*region.Region, tg.phys.Regions)
	for i := range tg.regions {
		tg.regions[i] = e.regions[layout.RegionID{Table: tg.phys.ID, Region: uint32(i)}]
	}
	return tg, nil
}

// localRegions is tableRegions without the regions hosted elsewhere.
func (e *Engine) localRegions(ctx context.Context, table string) (*catalog.Table, []*region.Region, error) {
	t, regions, err := e.tableRegions(ctx, table)
	if err != nil {
		return nil, nil, err
	}
	local := regions[:0:0]
	for _, r := range regions {
		if r != nil {
			local = append(local, r)
		}
	}
	return t, local, nil
}

// Delete writes a tombstone for one series in the region that holds it.
func (e *Engine) Delete(ctx context.Context, table string, tags []row.Tag, start, end int64) error {
	tg, err := e.resolveTable(ctx, table, false)
	if err != nil {
		return err
	}
	tags = slices.Clone(tags)
	if tg.t.Logical {
		for _, t := range tags {
			if t.Name == catalog.TableTag {
				return fmt.Errorf("%w: tag %s is reserved", region.ErrInvalidWrite, t.Name)
			}
		}
		tags = append(tags, tableTag(tg.t))
	}
	key, err := row.EncodeSeries(nil, slices.Clone(tags))
	if err != nil {
		return fmt.Errorf("%w: %v", region.ErrInvalidWrite, err)
	}
	n := tg.phys.Router().Route(key)
	r := tg.regions[n]
	if r == nil {
		return e.opts.Remote.Delete(ctx, tg.phys.Name, layout.RegionID{Table: tg.phys.ID, Region: n}, tags, start, end)
	}
	return r.Delete(ctx, tags, start, end)
}

// DeleteHosted writes a tombstone for one series of region id, which must
// be hosted here (the Remote found it hosted here).
func (e *Engine) DeleteHosted(ctx context.Context, id layout.RegionID, tags []row.Tag, start, end int64) error {
	e.mu.Lock()
	r := e.regions[id]
	e.mu.Unlock()
	if r == nil {
		return fmt.Errorf("%w: region %s", ErrNotHosted, id)
	}
	return r.Delete(ctx, tags, start, end)
}

// TableBatch is one table's share of a multi-table write.
type TableBatch struct {
	Table  string
	Points []row.Point
}

// BatchError is a rejected point of a multi-table write.
type BatchError struct {
	Table string
	Err   *region.PointError
}

func (e *BatchError) Error() string { return fmt.Sprintf("table %s: %v", e.Table, e.Err) }

func (e *BatchError) Unwrap() error { return e.Err }

// validate checks a batch against its table's schema (or the schema a
// write creating the table would give it) as a whole: a bad point's error
// is its *region.PointError.
func (e *Engine) validate(b TableBatch, opts WriteOptions) error {
	if err := checkMetrics(b.Table, opts); err != nil {
		return err
	}
	var sch *schema.Schema
	logical := false
	t, err := e.Table(b.Table)
	switch {
	case err == nil:
		sch, err = e.tableSchema(&t)
		logical = t.Logical
	case errors.Is(err, catalog.ErrTableNotFound) && opts.CreateTable:
		if err = catalog.ValidateTableName(b.Table); err == nil {
			sch, err = catalog.NewSchema(b.Table, schema.DefaultTimestamp)
		}
		logical = !e.opts.PhysicalTables && !catalog.Reserved(b.Table)
	}
	if err != nil {
		return err
	}
	if logical {
		err = checkTableTag(b.Points)
	}
	if err == nil {
		_, err = region.ValidateBatch(b.Points, sch)
	}
	return err
}

// WriteTables writes batches to several tables. Every batch is validated
// before any is written, so bad input anywhere writes nothing. Then the
// tenant's limits apply to the request as a whole (admit): over a rate or
// shape limit nothing is written; the points of new series over a series
// limit are left out, the rest is written, and the limit's error returned
// with what was written.
func (e *Engine) WriteTables(ctx context.Context, batches []TableBatch, opts WriteOptions) (region.WriteResult, error) {
	for _, b := range batches {
		// One request, one tenant: its limits are the request's (admit).
		if t, first := tenants.Of(b.Table), tenants.Of(batches[0].Table); t != first {
			return region.WriteResult{}, fmt.Errorf("%w: one write names tables of tenants %s and %s", region.ErrInvalidWrite, first, t)
		}
		if err := e.validate(b, opts); err != nil {
			var pe *region.PointError
			if errors.As(err, &pe) {
				return region.WriteResult{}, &BatchError{Table: b.Table, Err: pe}
			}
			return region.WriteResult{}, err
		}
	}
	batches, lerr := e.admit(batches)
	if lerr != nil && batches == nil {
		return region.WriteResult{}, lerr
	}
	var total region.WriteResult
	for _, b := range batches {
		res, err := e.write(ctx, b.Table, b.Points, opts, true)
		total.Written += res.Written
		total.Expired += res.Expired
		if err != nil {
			var pe *region.PointError
			if errors.As(err, &pe) {
				return total, &BatchError{Table: b.Table, Err: pe}
			}
			return total, err
		}
	}
	return total, limitResult(total, nil, lerr)
}
