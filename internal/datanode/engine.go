// Package datanode hosts regions: it routes writes of a table to its
// regions by a hash of the series key, merges scans across them, and keeps
// the table catalog of a standalone process.
package datanode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/stratadb/strata/internal/catalog"

	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/gc"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/merge"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/sst"
)

// DefaultCacheBytes bounds the engine's cache of open SSTs.
const DefaultCacheBytes = 256 << 20

// Options configure an engine.
type Options struct {
	// Region is the template for every region's options.
	Region region.Options
	// DefaultRegions is the region count of tables created by a write
	// (default 1).
	DefaultRegions uint32
	Logger         *slog.Logger
	// Compaction configures the compaction scheduler; compactions start
	// after flushes that give a time window enough files.
	Compaction compact.SchedulerOptions
	// GCInterval, if positive, runs fast GC on every region that often,
	// and FullGCInterval (if positive) full-listing GC: the standalone
	// loop. In a cluster metasrv schedules GC and both are 0.
	GCInterval     time.Duration
	FullGCInterval time.Duration
	GCMetrics      *gc.Metrics
	// Catalog is where tables are kept (default: the store, standalone).
	Catalog catalog.Backend
	// Cluster, if set, makes the engine host only the regions assigned to
	// it (through Assign and Unassign) and reach the others through
	// Cluster.Remote.
	Cluster *ClusterOptions
	// Lease, if set, binds a region opened now to the lease the node holds
	// now: it returns the region's region.Options.Lease, which reports that
	// lease's local deadline, and a deadline in the past once the node holds
	// another lease (it registered again: the region may have moved).
	Lease func() func() time.Time
}

// Engine is a datanode's set of tables and regions.
type Engine struct {
	store objstore.Bucket
	opts  Options
	log   *slog.Logger

	sched *compact.Scheduler
	// schemas caches parsed table schemas by (table id, version): writes
	// and scans would otherwise rebuild them per request.
	schemas sync.Map

	mu      sync.Mutex // guards cat and regions; held across catalog commits
	cat     *catalog.Catalog
	regions map[layout.RegionID]*region.Region
	closed  bool

	stop    context.CancelFunc // stops background loops
	wg      sync.WaitGroup
	gcLocks sync.Map // region id -> *sync.Mutex
}

// Open loads the catalog and opens every region of every table (replaying
// their WALs). A table left half-dropped by a crash finishes dropping.
func Open(ctx context.Context, store objstore.Bucket, opts Options) (*Engine, error) {
	if opts.DefaultRegions == 0 {
		opts.DefaultRegions = 1
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Region.Logger == nil {
		opts.Region.Logger = opts.Logger
	}
	if opts.Region.Cache == nil {
		opts.Region.Cache = sst.NewCache(DefaultCacheBytes)
	}
	backend := opts.Catalog
	if backend == nil {
		backend = catalog.StoreBackend{Store: store}
	}
	cat, err := catalog.Open(ctx, backend, opts.DefaultRegions)
	if err != nil {
		return nil, err
	}
	if opts.Compaction.Logger == nil {
		opts.Compaction.Logger = opts.Logger
	}
	sched := compact.NewScheduler(opts.Compaction)
	if opts.Region.OnFlush == nil {
		opts.Region.OnFlush = sched.Trigger
	}
	e := &Engine{store: store, opts: opts, log: opts.Logger, cat: cat, regions: map[layout.RegionID]*region.Region{}, sched: sched}
	for _, t := range cat.State().Tables {
		if opts.Cluster != nil {
			break // regions open as metasrv assigns them
		}
		if t.Dropping {
			if err := e.finishDrop(ctx, t.Name); err != nil {
				e.closeAll(ctx)
				return nil, err
			}
			continue
		}
		for i := range t.Regions {
			if err := e.openRegion(ctx, t, i); err != nil {
				e.closeAll(ctx)
				return nil, err
			}
		}
	}
	bg, stop := context.WithCancel(context.Background())
	e.stop = stop
	if opts.GCInterval > 0 {
		e.wg.Add(1)
		go e.gcLoop(bg)
	}
	return e, nil
}

func (e *Engine) openRegion(ctx context.Context, t *catalog.Table, i uint32) error {
	id := layout.RegionID{Table: t.ID, Region: i}
	o := e.opts.Region
	o.Create = true
	if e.opts.Lease != nil {
		o.Lease = e.opts.Lease()
	}
	o.TTL = t.TTL
	o.CompactionWindow = t.CompactionWindow
	if len(t.Schema.Columns) > 0 {
		sch, err := schema.FromManifest(t.Schema)
		if err != nil {
			return err
		}
		o.Timestamp = sch.Timestamp()
	}
	r, err := region.Open(ctx, e.store, id, o)
	if err != nil {
		return fmt.Errorf("table %s: %w", t.Name, err)
	}
	e.regions[id] = r
	return nil
}

type schemaKey struct {
	table   uint32
	version uint64
}

// tableSchema is t's schema, parsed once per version.
func (e *Engine) tableSchema(t *catalog.Table) (*schema.Schema, error) {
	k := schemaKey{t.ID, t.Schema.Version}
	if s, ok := e.schemas.Load(k); ok {
		return s.(*schema.Schema), nil
	}
	s, err := schema.FromManifest(t.Schema)
	if err != nil {
		return nil, err
	}
	e.schemas.Store(k, s)
	return s, nil
}

// CreateTable creates a table and its regions.
func (e *Engine) CreateTable(ctx context.Context, spec catalog.TableSpec) (catalog.Table, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.createLocked(ctx, spec)
}

func (e *Engine) createLocked(ctx context.Context, spec catalog.TableSpec) (catalog.Table, error) {
	if e.closed {
		return catalog.Table{}, region.ErrClosed
	}
	next, t, err := e.cat.State().WithTable(spec, e.opts.DefaultRegions)
	if err != nil {
		return catalog.Table{}, err
	}
	if err := e.cat.Commit(ctx, next); err != nil {
		if errors.Is(err, catalog.ErrConflict) {
			if rerr := e.cat.Reload(ctx); rerr == nil {
				if _, ok := e.cat.State().Tables[spec.Name]; ok {
					return catalog.Table{}, fmt.Errorf("%w: %s", catalog.ErrTableExists, spec.Name)
				}
			}
		}
		return catalog.Table{}, err
	}
	if e.opts.Cluster != nil {
		// Metasrv places the regions; their owners create them.
		e.log.Info("table created", "table", t.Name, "id", t.ID, "regions", t.Regions)
		return *t, nil
	}
	for i := range t.Regions {
		if err := e.openRegion(ctx, t, i); err != nil {
			return catalog.Table{}, err
		}
	}
	e.log.Info("table created", "table", t.Name, "id", t.ID, "regions", t.Regions)
	return *t, nil
}

// Tables lists the tables by name.
func (e *Engine) Tables() []catalog.Table {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []catalog.Table
	for _, t := range e.cat.State().Tables {
		if !t.Dropping {
			out = append(out, *t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// catalog.Table returns one table.
func (e *Engine) Table(name string) (catalog.Table, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.cat.State().Tables[name]
	if !ok || t.Dropping {
		return catalog.Table{}, fmt.Errorf("%w: %s", catalog.ErrTableNotFound, name)
	}
	return *t, nil
}

// DropTable closes a table's regions and deletes every object they own.
// The catalog marks the table as dropping first, so a crash mid-way leaves
// the deletion to the next Open.
func (e *Engine) DropTable(ctx context.Context, name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.cat.State().Tables[name]
	if !ok || t.Dropping {
		return fmt.Errorf("%w: %s", catalog.ErrTableNotFound, name)
	}
	next := e.cat.State().Clone()
	next.Tables[name].Dropping = true
	if err := e.cat.Commit(ctx, next); err != nil {
		return err
	}
	for i := range t.Regions {
		id := layout.RegionID{Table: t.ID, Region: i}
		if r := e.regions[id]; r != nil {
			e.sched.Cancel(r) // waits until the job's outputs are owned
			r.Close(ctx, region.CloseOptions{})
			delete(e.regions, id)
		}
	}
	if e.opts.Cluster != nil {
		// Other datanodes may host regions of it: metasrv's leader has
		// them all closed before it deletes the objects.
		e.log.Info("table marked dropping; metasrv finishes the drop", "table", name)
		return nil
	}
	return e.finishDrop(ctx, name)
}

func (e *Engine) finishDrop(ctx context.Context, name string) error {
	t := e.cat.State().Tables[name]
	n, err := objstore.DeletePrefix(ctx, e.store, layout.TablePrefix(t.ID))
	if err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	next := e.cat.State().Clone()
	delete(next.Tables, name)
	if err := e.cat.Commit(ctx, next); err != nil {
		return err
	}
	e.log.Info("table dropped", "table", name, "objects", n)
	return nil
}

// WriteOptions control Engine.Write.
type WriteOptions struct {
	// CreateTable creates a missing table with default options.
	CreateTable bool
}

// routeKey maps a series key to a region: FNV-1a (stable across processes
// and versions, since it decides where data lives) modulo the region count.
func routeKey(key []byte, regions uint32) uint32 {
	h := uint64(14695981039346656037)
	for _, c := range key {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return uint32(h % uint64(regions))
}

// Write validates the batch against the table's schema as a whole (nothing
// is written if any point is bad), records new columns in the catalog,
// and writes each region's share of the batch. Each region's share is
// atomic; if the store fails, some regions' shares may have been written
// and a retry of the batch is safe.
func (e *Engine) Write(ctx context.Context, table string, points []row.Point, opts WriteOptions) (region.WriteResult, error) {
	t, regions, err := e.prepareWrite(ctx, table, points, opts)
	if err != nil {
		return region.WriteResult{}, err
	}
	if len(regions) == 1 && regions[0] != nil {
		return regions[0].Write(ctx, points)
	}
	// Split by region: hash of the series key.
	shares := make([][]row.Point, len(regions))
	var key []byte
	for i := range points {
		key, err = row.EncodeSeries(key[:0], points[i].Tags)
		if err != nil {
			return region.WriteResult{}, &region.PointError{Index: i, Err: fmt.Errorf("%w: %v", region.ErrInvalidWrite, err)}
		}
		n := routeKey(key, t.Regions)
		shares[n] = append(shares[n], points[i])
	}
	var wg sync.WaitGroup
	results := make([]region.WriteResult, len(regions))
	errs := make([]error, len(regions))
	for i, share := range shares {
		if len(share) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if regions[i] == nil {
				results[i], errs[i] = e.remoteWrite(ctx, t, uint32(i), share)
				return
			}
			results[i], errs[i] = regions[i].Write(ctx, share)
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

// prepareWrite resolves the table (creating it if asked), validates the
// batch and commits new columns to the catalog. Validation runs outside the
// engine's lock; only a schema change takes it.
func (e *Engine) prepareWrite(ctx context.Context, table string, points []row.Point, opts WriteOptions) (*catalog.Table, []*region.Region, error) {
	for attempt := 0; ; attempt++ {
		t, regions, err := e.prepareWriteOnce(ctx, table, points, opts)
		if !errors.Is(err, errRetrySchema) || attempt == 4 {
			if errors.Is(err, errRetrySchema) {
				err = fmt.Errorf("table %s: record new columns: %w", table, catalog.ErrConflict)
			}
			return t, regions, err
		}
	}
}

func (e *Engine) prepareWriteOnce(ctx context.Context, table string, points []row.Point, opts WriteOptions) (*catalog.Table, []*region.Region, error) {
	t, regions, err := e.tableRegions(table)
	if errors.Is(err, catalog.ErrTableNotFound) && opts.CreateTable {
		e.mu.Lock()
		if _, exists := e.cat.State().Tables[table]; !exists {
			_, err = e.createLocked(ctx, catalog.TableSpec{Name: table})
		}
		e.mu.Unlock()
		if err != nil && !errors.Is(err, catalog.ErrTableExists) {
			return nil, nil, err
		}
		t, regions, err = e.tableRegions(table)
	}
	if err != nil {
		return nil, nil, err
	}
	sch, err := e.tableSchema(t)
	if err != nil {
		return nil, nil, err
	}
	add, err := region.ValidateBatch(points, sch, e.opts.Region.AllowNonFinite)
	if err != nil || !add.Changed() {
		return t, regions, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	cur, ok := e.cat.State().Tables[table]
	if !ok || cur.Dropping {
		return nil, nil, fmt.Errorf("%w: %s", catalog.ErrTableNotFound, table)
	}
	// Another write may have changed the schema meanwhile: check again.
	if sch, err = e.tableSchema(cur); err != nil {
		return nil, nil, err
	}
	if add, err = region.ValidateBatch(points, sch, e.opts.Region.AllowNonFinite); err != nil || !add.Changed() {
		return t, regions, err
	}
	nextSchema, err := add.Result()
	if err != nil {
		return nil, nil, err
	}
	next := e.cat.State().Clone()
	next.Tables[table].Schema = nextSchema.Manifest()
	if err := e.cat.Commit(ctx, next); err != nil {
		if errors.Is(err, catalog.ErrConflict) && e.opts.Cluster != nil {
			// Another datanode changed the catalog: reload, and let the
			// caller validate again against what it committed.
			if rerr := e.cat.Reload(ctx); rerr != nil {
				return nil, nil, errors.Join(err, rerr)
			}
			return nil, nil, errRetrySchema
		}
		return nil, nil, fmt.Errorf("table %s: record new columns: %w", table, err)
	}
	return t, regions, nil
}

var errRetrySchema = errors.New("catalog changed: validate again")

func (e *Engine) tableRegions(table string) (*catalog.Table, []*region.Region, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, nil, region.ErrClosed
	}
	t, ok := e.cat.State().Tables[table]
	if !ok && e.opts.Cluster != nil {
		// Created through another datanode or metasrv since we loaded.
		if err := e.cat.Reload(context.Background()); err != nil {
			return nil, nil, err
		}
		t, ok = e.cat.State().Tables[table]
	}
	if !ok || t.Dropping {
		return nil, nil, fmt.Errorf("%w: %s", catalog.ErrTableNotFound, table)
	}
	regions := make([]*region.Region, t.Regions)
	for i := range regions {
		regions[i] = e.regions[layout.RegionID{Table: t.ID, Region: uint32(i)}]
	}
	tt := *t
	return &tt, regions, nil
}

// localRegions is tableRegions without the regions hosted elsewhere.
func (e *Engine) localRegions(table string) (*catalog.Table, []*region.Region, error) {
	t, regions, err := e.tableRegions(table)
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
	t, regions, err := e.tableRegions(table)
	if err != nil {
		return err
	}
	key, err := row.EncodeSeries(nil, slices.Clone(tags))
	if err != nil {
		return fmt.Errorf("%w: %v", region.ErrInvalidWrite, err)
	}
	r := regions[routeKey(key, t.Regions)]
	if r == nil {
		return fmt.Errorf("%w: the series is in region %d/%d: send the delete to its owner", ErrNotHosted, t.ID, routeKey(key, t.Regions))
	}
	return r.Delete(ctx, tags, start, end)
}

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
		_, regions, err := e.localRegions(table)
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
	_, regions, err := e.localRegions(table)
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
func (e *Engine) CancelCompaction(table string) (cancelled, tooLate int, err error) {
	_, regions, err := e.localRegions(table)
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

// TruncateTable removes every row of a table acknowledged before the call;
// the table, its schema and its regions stay. Each region's running
// compaction is cancelled first, and the truncate waits until that
// cancellation is acknowledged (the job's outputs deleted or owned by its
// marker). A compaction that starts in between cannot commit: its inputs
// are no longer live, so the manifest refuses its edit.
func (e *Engine) TruncateTable(ctx context.Context, table string) error {
	_, regions, err := e.localRegions(table)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range regions {
		if _, err := e.sched.Cancel(r); err != nil && !errors.Is(err, compact.ErrTooLate) {
			errs = append(errs, fmt.Errorf("region %s: cancel compaction: %w", r.ID(), err))
			continue
		}
		if err := r.Truncate(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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
func (e *Engine) Stats(table string) ([]RegionStats, error) {
	_, regions, err := e.localRegions(table)
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

// Scanner streams a table scan: its regions' scans merged by (series, ts).
type Scanner struct {
	direct  *region.Scanner // one region with the table's field positions
	fields  []schema.Field
	scans   []*region.Scanner
	remotes []row.Iterator // scans of regions hosted elsewhere
	it      row.Iterator
	batch   []row.Entry
	size    int
	err     error
}

// Scan scans a table. The fields of the result are the table's fields (or
// the requested ones), in that order.
func (e *Engine) Scan(ctx context.Context, table string, req region.ScanRequest) (*Scanner, error) {
	return e.scan(ctx, table, req, nil)
}

// ScanRegion scans one region of a table, which must be hosted here (a
// scan forwarded by another datanode).
func (e *Engine) ScanRegion(ctx context.Context, table string, id layout.RegionID, req region.ScanRequest) (*Scanner, error) {
	return e.scan(ctx, table, req, &id)
}

func (e *Engine) scan(ctx context.Context, table string, req region.ScanRequest, only *layout.RegionID) (*Scanner, error) {
	t, regions, err := e.tableRegions(table)
	if err != nil {
		return nil, err
	}
	sch, err := e.tableSchema(t)
	if err != nil {
		return nil, err
	}
	if req.BatchRows <= 0 {
		req.BatchRows = 4096
	}
	// Scan every region with the table's field list, so positions agree.
	names := req.Fields
	if names == nil {
		for _, f := range sch.Fields() {
			names = append(names, f.Name)
		}
	}
	var fields []schema.Field
	for _, n := range names {
		o, ok := sch.FieldOrdinal(n)
		if !ok {
			return nil, fmt.Errorf("%w: unknown field %q", region.ErrInvalidScan, n)
		}
		fields = append(fields, sch.Fields()[o])
	}
	if only != nil && (only.Table != t.ID || only.Region >= t.Regions) {
		return nil, fmt.Errorf("%w: region %s is not a region of table %s", layout.ErrInvalidRegion, only, table)
	}
	s := &Scanner{fields: fields, size: req.BatchRows}
	var inputs []row.Iterator
	for i, r := range regions {
		if only != nil && uint32(i) != only.Region {
			continue
		}
		if r == nil {
			if only != nil || e.opts.Cluster == nil {
				s.Close()
				return nil, fmt.Errorf("%w: region %d/%d", ErrNotHosted, t.ID, i)
			}
			rreq := req
			rreq.Fields = names
			it, err := e.opts.Cluster.Remote.Scan(ctx, t.Name, layout.RegionID{Table: t.ID, Region: uint32(i)}, rreq)
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
		inputs = append(inputs, &scanIter{sc: sc, pos: pos, width: len(names)})
	}
	if si, ok := inputs[0].(*scanIter); ok && len(inputs) == 1 && len(si.pos) == si.width && isIdentity(si.pos) {
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
	s.batch = s.batch[:0]
	for len(s.batch) < s.size && s.it.Next() {
		s.batch = append(s.batch, *s.it.Entry())
	}
	if err := s.it.Err(); err != nil {
		s.err = err
		return false
	}
	return len(s.batch) > 0
}

// Batch is the current batch; it stays valid after Next.
func (s *Scanner) Batch() []row.Entry {
	if s.direct != nil {
		return s.direct.Batch()
	}
	b := s.batch
	s.batch = nil
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

// scanIter adapts a region scanner to a row.Iterator with the table's field
// positions.
type scanIter struct {
	sc    *region.Scanner
	pos   []int
	width int
	batch []row.Entry
	i     int
	cur   row.Entry
}

func (it *scanIter) Next() bool {
	it.i++
	for it.i >= len(it.batch) {
		if !it.sc.Next() {
			return false
		}
		it.batch, it.i = it.sc.Batch(), 0
	}
	e := it.batch[it.i]
	if len(it.pos) != it.width || !isIdentity(it.pos) {
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

func (it *scanIter) Entry() *row.Entry { return &it.cur }
func (it *scanIter) Err() error        { return it.sc.Err() }
func (it *scanIter) Close() error      { return nil }

// Close flushes (if asked) and closes every region.
func (e *Engine) Close(ctx context.Context, flush bool) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	e.stop()
	e.wg.Wait()
	// Stop compactions first: each acknowledges with its outputs owned.
	schedErr := e.sched.Close()
	e.mu.Lock()
	rs := make([]*region.Region, 0, len(e.regions))
	for _, r := range e.regions {
		rs = append(rs, r)
	}
	e.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(rs))
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.Close(ctx, region.CloseOptions{Flush: flush})
		}()
	}
	wg.Wait()
	return errors.Join(append(errs, schedErr)...)
}

func (e *Engine) closeAll(ctx context.Context) {
	for _, r := range e.regions {
		r.Close(ctx, region.CloseOptions{})
	}
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

// WriteTables writes batches to several tables. Every batch is validated
// before any is written, so bad input anywhere writes nothing.
func (e *Engine) WriteTables(ctx context.Context, batches []TableBatch, opts WriteOptions) (region.WriteResult, error) {
	for _, b := range batches {
		var sch *schema.Schema
		t, err := e.Table(b.Table)
		switch {
		case err == nil:
			sch, err = e.tableSchema(&t)
		case errors.Is(err, catalog.ErrTableNotFound) && opts.CreateTable:
			if err = catalog.ValidateTableName(b.Table); err == nil {
				sch, err = schema.New(schema.DefaultTimestamp)
			}
		}
		if err != nil {
			return region.WriteResult{}, err
		}
		if _, err := region.ValidateBatch(b.Points, sch, e.opts.Region.AllowNonFinite); err != nil {
			var pe *region.PointError
			if errors.As(err, &pe) {
				return region.WriteResult{}, &BatchError{Table: b.Table, Err: pe}
			}
			return region.WriteResult{}, err
		}
	}
	var total region.WriteResult
	for _, b := range batches {
		res, err := e.Write(ctx, b.Table, b.Points, opts)
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
	return total, nil
}
