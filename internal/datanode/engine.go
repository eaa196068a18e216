// Package datanode hosts regions: it routes writes of a table to its
// regions by a hash of the series key and merges scans across them. Its
// files split the Engine by concern: engine.go (options, open, close),
// tables.go (create, drop, truncate), write.go (routing and validating
// writes), reload.go (looking up tables the catalog's copy lacks),
// scan.go (merged scans), admin.go (flush, compaction, stats),
// gc.go (GC runs) and cluster.go (assignments and the regions other
// datanodes host; the agent package follows metasrv's assignments).
package datanode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/gc"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/limits"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/sst"
)

// DefaultCacheBytes bounds the engine's cache of open SSTs.
const DefaultCacheBytes = 256 << 20

// Options configure an engine.
type Options struct {
	// Region is the template for every region's options.
	Region region.Options
	// DefaultRegions is the region count of physical tables created
	// without one, by a write or CreateTable (0: one per live datanode,
	// LiveDatanodes, at the table's creation; catalog.DefaultRegionCount).
	DefaultRegions uint32
	// MetricsRegions is the region count of the metrics table
	// (catalog.MetricsTable) when a remote write creates it (0:
	// DefaultRegions). Its series spread over them by their labels'
	// hash, so it spreads a Prometheus workload over a cluster.
	MetricsRegions uint32
	// LinesRegions is the region count of the table that holds the rows
	// of every logical table (catalog.LinesTable) when the first logical
	// table is created (0: DefaultRegions).
	LinesRegions uint32
	// LiveDatanodes counts the cluster's live datanodes, for a table
	// created without a region count while DefaultRegions is 0
	// (cluster.LiveDatanodes). Nil: one (a standalone).
	LiveDatanodes func(context.Context) (int, error)
	// CheckPartitioning fails if a table partitioned by a tag cannot be
	// created: a live datanode's build routes by the whole key
	// (cluster.CheckPartitioning; catalog.ErrInvalidTable), or the
	// datanodes cannot be listed. Nil: it can (a standalone).
	CheckPartitioning func(context.Context) error
	// PhysicalTables makes the tables a write creates physical tables of
	// their own, each with DefaultRegions regions, as before logical
	// tables (catalog.Table.Logical) existed: for tests of stores written
	// so.
	PhysicalTables bool
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
	// AfterRelease, if set, hears of each release of the WAL a flush let
	// go (gc.go, releaseLoop): tests wait on it. A Region.OnWALReleased
	// set by the caller replaces the release (tests that count what a
	// flush writes, or run GC outside Engine.GC).
	AfterRelease func(GCResult)
	// Catalog is the cluster's catalog (etcd). Required.
	Catalog catalog.Backend
	// Remote reaches the regions this engine does not host: the engine
	// hosts only the regions metasrv assigns it (Assign, Unassign).
	// Required; the datanode's agent is one.
	Remote Remote
	// Limits, if set, enforces tenants' write limits on the writes that
	// enter through this node (Write, WriteTables; not the shares other
	// datanodes forward): limits.go, docs/limits.md.
	Limits *limits.Ingest
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
	// lines caches the LinesTable columns of logical tables' fields by
	// (table id, version).
	lines sync.Map

	cat     *catalog.Catalog // its copy follows etcd by itself
	reloads reloads          // of tables missing from cat's copy

	// mu guards regions and closed. Every write and scan takes it, so it
	// is never held across a catalog commit or reload (an etcd round
	// trip): see resolveTable and createTable.
	//
	// NB: Assign still holds it across opening a region (a replay of the
	// region's WAL from the object store), so that two assignments of one
	// region never open it twice.
	mu      sync.Mutex
	regions map[layout.RegionID]*region.Region
	closed  bool

	stop    context.CancelFunc // stops background loops
	wg      sync.WaitGroup
	gcLocks sync.Map // region id -> *sync.Mutex
	release releases // regions whose flush released WAL (gc.go)
}

// Open loads the catalog. It opens no region: regions open as metasrv
// assigns them (Assign), each replaying its WAL.
func Open(ctx context.Context, store objstore.Bucket, opts Options) (*Engine, error) {
	if opts.Catalog == nil || opts.Remote == nil {
		return nil, errors.New("datanode: an engine needs a catalog and a remote (it runs as a datanode of a cluster)")
	}
	if opts.LinesRegions == 0 {
		opts.LinesRegions = opts.DefaultRegions
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
	// Every create resolves its region count first (regionCount): the
	// catalog's own default is never used.
	cat, err := catalog.Open(ctx, opts.Catalog, max(1, opts.DefaultRegions))
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
	if e.opts.Region.OnWALReleased == nil {
		e.opts.Region.OnWALReleased = e.release.add
	}
	e.release.init()
	bg, stop := context.WithCancel(context.Background())
	e.stop = stop
	e.reloads.life = bg
	e.wg.Add(1)
	go e.releaseLoop(bg)
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
	o.DecodeForwarded = DecodeForwarded // the WAL holds forwarded batches as they came
	if catalog.IsLines(t.Name) {
		o.DropSeries = e.droppedSeries
	}
	if len(t.Schema.Columns) > 0 {
		sch, err := schema.FromManifest(t.Schema)
		if err != nil {
			return err
		}
		o.Timestamp = sch.Timestamp()
		o.Labels = sch.Labels()
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
	e.cat.Close()
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
