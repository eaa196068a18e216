// Package region is one region of a table: its manifest, WAL, memtables,
// flushes to SSTs and scans.
//
// Write path: validate the whole batch, commit any new columns to the
// manifest, append the batch to the WAL as part of one group-committed
// segment, insert it into the active memtable, acknowledge. A batch is
// atomic: it lands in one segment or not at all.
//
// Flush uses the same commit protocol as compaction (docs/compaction.md,
// "The commit protocol"): a pending-outputs marker naming the SST is
// committed before the upload, and one edit then adds the file, advances
// the flushed sequence and resolves the marker. Every SST therefore has a
// cleanup owner from its first byte.
package region

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/memtable"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/sst"
	"github.com/stratadb/strata/internal/wal"
)

// Sentinel errors.
var (
	// ErrClosed: the region was closed.
	ErrClosed = errors.New("region: closed")
	// ErrInvalidWrite: a write was rejected before anything was written; the
	// error names the point and the reason.
	ErrInvalidWrite = errors.New("region: invalid write")
	// ErrBatchTooLarge: a batch exceeds Options.MaxBatchRows or MaxBatchBytes.
	ErrBatchTooLarge = errors.New("region: batch too large")
	// ErrRegionNotFound: the region does not exist (and Create was not set).
	ErrRegionNotFound = manifest.ErrRegionNotFound
	// ErrOutcomeUnknown: the store failed in a way that leaves it unknown
	// whether a write's WAL segment landed. If it did, the whole batch is
	// applied (once); retrying the batch is safe.
	ErrOutcomeUnknown = wal.ErrOutcomeUnknown
)

// Options configure a region. The zero value of each field means its
// default.
type Options struct {
	// Create creates the region if it does not exist.
	Create bool
	// Timestamp names the timestamp column of a new region (default "time").
	Timestamp string
	// TTL expires rows older than now-TTL (0: keep forever).
	TTL time.Duration
	// SeriesCacheBytes bounds the region's decoded series indexes
	// (default DefaultSeriesCacheBytes).
	SeriesCacheBytes int64
	// Labels makes a new region's tags free-form labels
	// (schema.Persisted.Labels), as the metrics table's are.
	Labels bool
	// DropSeries, if set, reports series whose rows a compaction drops
	// (merge.Options.DropSeries): the datanode's, for the regions that
	// hold logical tables' rows, reports those of dropped tables. It must
	// not report a series that may still be read.
	DropSeries func(series string) bool
	// Stream, if set, is the datanode's WAL stream, shared by its regions.
	// Nil: the region writes a stream of its own, started by Open and
	// stopped by Close (stream.go).
	Stream *wal.Stream
	// WALWindow is the group-commit window of the region's own stream
	// (wal.StreamOptions.Window; without Stream).
	WALWindow time.Duration
	// DecodeForwarded decodes a batch in the encoding another datanode
	// forwarded it in (internal/fwdbatch, uncompressed): its points and
	// their series keys. With it, a Batch's Encoded goes into the WAL as
	// it came, and replay turns it back into entries (forwarded.go).
	// Nil: a batch's Encoded is ignored (a WAL with forwarded chunks then
	// fails to replay).
	DecodeForwarded func(data []byte) (points []row.Point, keys [][]byte, err error)
	// FlushBytes is the active memtable size that triggers a flush
	// (default DefaultFlushBytes).
	FlushBytes int64
	// MaxMemtableBytes is the region's memtable rows' memory (active plus
	// those being flushed, keys aside) above which writes stall (default
	// twice the most a memtable waits for: 8 × FlushBytes).
	MaxMemtableBytes int64
	// Budget bounds memtable memory across regions (default: none).
	Budget *MemoryBudget
	// CompactionWindow is the table's TWCS window (0: inferred); the
	// region only carries it for the compaction scheduler.
	CompactionWindow time.Duration
	// OnFlush, if set, runs (on the flushing goroutine) after each flush
	// that added a file; a compaction scheduler hooks in here.
	OnFlush func(*Region)
	// OnWALReleased, if set, runs (on the committing goroutine; it must
	// not block) after a flush or truncate whose committed edit left WAL
	// garbage in the manifest (HasWALGarbage): the datanode's hook has the
	// region's owner collect it at once (gc.Options.WALOnly) instead of at
	// the next fast GC. A crash before it runs loses nothing: the garbage
	// is in the manifest, for the next fast GC.
	OnWALReleased func(*Region)
	// Cache holds open SSTs for scans, shared by the regions of a process
	// (default: none; every scan opens its files).
	Cache *sst.Cache
	// MaxBatchRows and MaxBatchBytes bound one write (defaults 1,000,000
	// rows and 64 MiB).
	MaxBatchRows  int
	MaxBatchBytes int64
	// RowGroupRows is the SST row group size (default 100k).
	RowGroupRows int64
	// CheckpointDistance is the manifest's (default 10).
	CheckpointDistance int
	// Lease, if set, is the local deadline of the owner's lease: past it
	// the region acknowledges nothing, its WAL and manifest writes fail,
	// and GC refuses (see ownership.go). Nil: owned for as long as it is
	// open (standalone).
	Lease func() time.Time
	// UploadWindow bounds an output's upload after its reservation
	// (default manifest.UploadWindow; tests shorten it).
	UploadWindow time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// TTLInterval is how often the region drops expired files (default a
	// minute; tests shorten it).
	TTLInterval time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Metrics (default: unregistered).
	Metrics *Metrics
}

// DefaultFlushBytes is the memtable size that starts a flush: about
// 200,000 TSBS cpu rows (a memtable holds a row of 10 float fields in
// about 170 bytes, docs/region.md).
const DefaultFlushBytes = 32 << 20

func (o *Options) defaults() {
	if o.Timestamp == "" {
		o.Timestamp = schema.DefaultTimestamp
	}
	if o.FlushBytes <= 0 {
		o.FlushBytes = DefaultFlushBytes
	}
	if o.SeriesCacheBytes <= 0 {
		o.SeriesCacheBytes = DefaultSeriesCacheBytes
	}
	if o.MaxMemtableBytes <= 0 {
		o.MaxMemtableBytes = 2 * flushBytesCap * o.FlushBytes
	}
	if o.MaxBatchRows <= 0 {
		o.MaxBatchRows = 1_000_000
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = 64 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.TTLInterval <= 0 {
		o.TTLInterval = time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
}

// Region is an open region. Its methods are safe for concurrent use.
//
// Lock order: a goroutine holding one of these locks takes only those
// below it, never one above:
//
//	flushMu   one flush (or truncate) at a time; held across the flush
//	streamMu  the read-modify-write of the manifest's stream references; held across its commit
//	schemaMu  the schema; held across the commit of a schema change
//	mu        memtables, pins, closed, fatal
//	(manifest.Manifest's lock, below all four: it is held across the manifest's object-store writes)
//
// Besides: wal.Stream's lock is taken under streamMu (Stream.Position), and
// MemoryBudget's lock is above mu (MemoryBudget.full reads each region's
// active memtable): mu is never held while calling into the budget.
//
// NB: mu is taken by every write (apply, on the WAL's or the node's
// stream's goroutine) and every scan: nothing that waits on the network
// runs under it, except that snapshot reads the manifest's state, which
// waits for a manifest commit in flight.
type Region struct {
	id    layout.RegionID
	store objstore.Bucket
	opts  Options
	log   *slog.Logger
	man   *manifest.Manifest
	wal   *wal.Member // the region's place in stream
	epoch uint64
	// stream is the WAL stream the region writes: Options.Stream, or its
	// own.
	stream *wal.Stream

	// streamMu serializes the changes of the manifest's stream references
	// (manifest.WALStreams): recordStream (the stream writer's Recording),
	// a flush's edit and Truncate. Each reads State.Streams, computes the
	// whole new list (WALStreams.Refs replaces it) and commits it; the lock
	// spans read, compute, commit and the settling of an ambiguous commit,
	// so no two of them compute from the same list.
	//
	// NB: it is held across a manifest commit (an object-store write)
	// because the change is a replacement of the list, not a delta: were
	// a flush to commit a list computed before a recordStream committed,
	// the new stream's reference would be lost (a new owner would not
	// replay the acknowledged entries in it, and GC could delete them), and
	// a recordStream computed before a flush's commit would reference again
	// the range the flush released as StreamGarbage (which GC deletes). The
	// cost is small: every manifest commit holds the manifest's own lock
	// across its write anyway, so what streamMu adds is that a stream
	// writer's recordStream (once per stream and region, on its stream
	// goroutine) waits for a flush's commit that it would otherwise wait
	// for on the manifest's lock. Shortening it means committing the change
	// as a delta, or computing it under the manifest's lock.
	streamMu sync.Mutex

	schemaMu sync.Mutex // guards schema; held across the commit of a change
	schema   *schema.Schema

	// mu guards the fields up to fatal.
	mu         sync.Mutex
	active     *memtable.Memtable
	immutable  []*memtable.Memtable                     // oldest first; being flushed
	memBytes   int64                                    // active + immutable
	memKeys    int64                                    // of memBytes, per series (memtable.Stats.KeyBytes)
	memChanged chan struct{}                            // closed and replaced when memBytes drops
	pins       map[string]int                           // file id -> scans reading it
	memPos     map[*memtable.Memtable]map[string]uint64 // first stream segment per stream, per memtable
	flushJob   string                                   // the job id of the flush in progress
	closed     bool
	fatal      error // sticky: fence.ErrFenced

	seriesIdx   seriesCache     // the live files' series; its own lock, taken under none of these
	merged      mergedFiles     // their merged answers to label questions; likewise
	cardinality keptCardinality // the last counts of its series (cardinality.go); likewise

	flushMu  sync.Mutex // one flush (or truncate) at a time; see the lock order
	flushReq chan struct{}
	warmReq  chan struct{}   // warmCardinality
	ctx      context.Context // the region's lifetime; cancelled by Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// Open opens (or with Create, creates) a region: it reads the manifest
// (checkpoint plus deltas, taking ownership with a new epoch), replays the
// WAL streams the manifest names (and the region's own WAL an earlier
// version left, legacy.go) into a memtable, and seals each, so that older
// owners append nothing more.
func Open(ctx context.Context, store objstore.Bucket, id layout.RegionID, opts Options) (*Region, error) {
	opts.defaults()
	if opts.Lease != nil {
		store = &leaseBucket{Bucket: store, id: id, deadline: opts.Lease}
	}
	man, err := manifest.Open(ctx, store, id, manifest.Options{Create: opts.Create, CheckpointDistance: opts.CheckpointDistance, Now: opts.Now})
	if err != nil {
		return nil, fmt.Errorf("region %s: open manifest: %w", id, err)
	}
	r := &Region{
		id: id, store: store, opts: opts, man: man,
		log:    opts.Logger.With("region", id.String()),
		active: memtable.New(), memChanged: make(chan struct{}), pins: map[string]int{},
		memPos:   map[*memtable.Memtable]map[string]uint64{},
		flushReq: make(chan struct{}, 1),
		warmReq:  make(chan struct{}, 1),
	}
	r.seriesIdx.limit = opts.SeriesCacheBytes
	r.seriesIdx.gauge = func(d int64) { opts.Metrics.SeriesCache.Add(float64(d)) }
	r.stream = opts.Stream
	if r.stream == nil {
		r.stream = wal.NewStream(store, wal.StreamOptions{Window: opts.WALWindow, OnPut: opts.Metrics.ObserveWALPut, Logger: r.log,
			NewID: func() string { return fmt.Sprintf("region-%d-%d/%s", id.Table, id.Region, ulid.Make()) }})
	}
	fail := func(err error) (*Region, error) {
		_ = r.closeOwnStream() // the open's own error is the one reported
		man.Close()
		return nil, fmt.Errorf("region %s: open: %w", id, err)
	}
	st := man.State()
	r.epoch = st.Epoch
	if len(st.Schema.Columns) == 0 {
		newSchema := schema.New
		if opts.Labels {
			newSchema = schema.NewLabels
		}
		s, err := newSchema(opts.Timestamp)
		if err != nil {
			return fail(err)
		}
		if _, err := man.Commit(ctx, manifest.Action{Schema: &manifest.SchemaChange{Schema: s.Manifest()}}); err != nil {
			return fail(fmt.Errorf("commit initial schema: %w", err))
		}
		st.Schema = s.Manifest()
	}
	if r.schema, err = schema.FromManifest(st.Schema); err != nil {
		return fail(err)
	}
	ownSeq, err := r.replayOwnWAL(ctx, st)
	if err != nil {
		return fail(err)
	}
	streamSeq, err := r.openStreams(ctx, man.State())
	if err != nil {
		return fail(err)
	}
	nextSeq := max(st.FlushedSeq+1, ownSeq, streamSeq)
	if r.wal, err = r.stream.Attach(wal.MemberOptions{Region: id, Epoch: st.Epoch, NextSeq: nextSeq,
		Record: r.recordStream, Lease: opts.Lease, Apply: r.applyStream}); err != nil {
		return fail(err)
	}
	st0 := r.active.Stats()
	for _, mt := range append([]*memtable.Memtable{r.active}, r.immutable...) { // a replay may have frozen some (makeRoom)
		st := mt.Stats()
		r.memBytes += st.Bytes
		r.memKeys += st.KeyBytes
	}
	if opts.Budget != nil {
		opts.Budget.add(r.memBytes)
		opts.Budget.register(r)
	}
	opts.Metrics.MemtableBytes.Add(float64(r.memBytes))
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.wg.Add(1)
	go r.background()
	if flushDue(st0, &opts) {
		r.requestFlush()
	}
	return r, nil
}

// ID is the region's id.
func (r *Region) ID() layout.RegionID { return r.id }

// Schema is the region's current schema.
func (r *Region) Schema() *schema.Schema {
	r.schemaMu.Lock()
	defer r.schemaMu.Unlock()
	return r.schema
}

// Manifest returns a copy of the manifest state.
func (r *Region) Manifest() *manifest.State { return r.man.State() }

// applyStream inserts a durable stream block's entries, from segment n
// of stream, into the active memtable under one hold of r.mu: a flush's
// cut falls between segments, never inside one. It runs on the stream's
// goroutine, before the writes are acknowledged.
func (r *Region) applyStream(stream string, n uint64, appends [][]row.Entry) {
	r.mu.Lock()
	for i := len(appends) - 1; i >= 0; i-- {
		if n := len(appends[i]); n > 0 {
			r.makeRoom(appends[i][n-1].Seq)
			break
		}
	}
	r.notePos(r.active, stream, n)
	st0 := r.active.Stats()
	rows := 0
	for _, entries := range appends {
		r.active.Insert(0, entries)
		rows += len(entries)
	}
	st := r.active.Stats()
	before, after := st0.Bytes, st.Bytes
	r.memBytes += after - before
	r.memKeys += st.KeyBytes - st0.KeyBytes
	r.mu.Unlock()
	if r.opts.Budget != nil {
		r.opts.Budget.add(after - before)
	}
	m := r.opts.Metrics
	m.MemtableBytes.Add(float64(after - before))
	m.WriteRows.Add(float64(rows))
	if flushDue(st, &r.opts) {
		r.requestFlush()
	}
}

// flushDue reports whether a memtable of st is due to flush. The rows
// decide, not the keys: a memtable of many series with a few samples each
// (a Prometheus scrape) would otherwise write every key again for each few
// samples. Past FlushBytes of rows, a memtable also waits for
// flushSeriesRows rows a series, up to flushCap of rows:
// a file's series index, postings and key dictionary cost what its series
// cost, so a million series flushed at less than a row each (32 MiB of
// rows) wrote fifteen files a minute, each indexing every series, and a
// query then read every one of those indexes. The keys are bounded by the
// node's memory budget, which flushes the largest memtable when it is
// spent.
func flushDue(st memtable.Stats, o *Options) bool {
	rows := st.Bytes - st.KeyBytes
	return rows >= o.FlushBytes && (st.Entries >= flushSeriesRows*int64(st.Series) || rows >= o.flushCap())
}

const (
	flushSeriesRows = 4
	flushBytesCap   = 4
)

// flushCap is the most rows' memory a memtable waits for: flushBytesCap ×
// FlushBytes, or half of MaxMemtableBytes if that is less (a memtable
// waiting past the stall would never flush).
func (o *Options) flushCap() int64 {
	return max(o.FlushBytes, min(flushBytesCap*o.FlushBytes, o.MaxMemtableBytes/2))
}

// MemtableBytes is the memory held by the region's memtables.
func (r *Region) MemtableBytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.memBytes
}

func (r *Region) activeBytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active.Stats().Bytes
}

// warmCardinality asks the background goroutine to count the region's
// series again, if they were counted before (Cardinality keeps counts):
// after its files changed other than by a flush (a compaction, TTL
// expiry), the next request then finds them counted, not a recount of
// every key. A count already running takes none.
func (r *Region) warmCardinality() {
	if !r.cardinality.recent() {
		return
	}
	select {
	case r.warmReq <- struct{}{}:
	default:
	}
}

func (r *Region) requestFlush() {
	select {
	case r.flushReq <- struct{}{}:
	default:
	}
}

// background flushes on request, retries failed flushes with backoff and
// expires TTL'd files. It stops when the region's context is cancelled.
func (r *Region) background() {
	defer r.wg.Done()
	var warming sync.WaitGroup // a count of the series, one at a time
	defer warming.Wait()
	const minRetry, maxRetry = 100 * time.Millisecond, 10 * time.Second
	retry := minRetry
	var retryC <-chan time.Time
	tick := time.NewTicker(r.opts.TTLInterval)
	defer tick.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.flushReq:
		case <-retryC:
		case <-tick.C:
			if err := r.ExpireTTL(r.ctx); err != nil && r.ctx.Err() == nil {
				r.log.Warn("ttl expiry failed", "err", err)
			}
			continue
		case <-r.warmReq:
			if r.cardinality.warming.CompareAndSwap(false, true) {
				warming.Go(func() {
					defer r.cardinality.warming.Store(false)
					if _, err := r.count(r.ctx, AllTime, AllTimeEnd); err != nil && r.ctx.Err() == nil {
						r.log.Debug("series count after a change of files failed", "err", err)
					}
				})
			}
			continue
		}
		retryC = nil
		if err := r.Flush(r.ctx); err != nil {
			if r.ctx.Err() != nil || errors.Is(err, fence.ErrFenced) || errors.Is(err, ErrClosed) {
				if errors.Is(err, fence.ErrFenced) {
					r.log.Error("region fenced; flushes stopped", "err", err)
				}
				continue
			}
			r.log.Warn("flush failed; will retry", "err", err, "retry_in", retry)
			retryC = time.After(retry)
			retry = min(2*retry, maxRetry)
			continue
		}
		retry = minRetry
	}
}

// setFatal records that the region is fenced.
func (r *Region) setFatal(err error) error {
	if !errors.Is(err, fence.ErrFenced) {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fatal == nil {
		r.fatal = fmt.Errorf("%w (region %s): %v", fence.ErrFenced, r.id, err)
	}
	return r.fatal
}

func (r *Region) usable() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fatal != nil {
		return r.fatal
	}
	if r.closed {
		// Named: a query that met a region closing under it (it moved)
		// says which one (docs/cluster.md).
		return fmt.Errorf("region %s: %w", r.id, ErrClosed)
	}
	return nil
}

// CloseOptions control Close.
type CloseOptions struct {
	// Flush writes the memtables to SSTs before closing, so the next open
	// has no WAL to replay.
	Flush bool
}

// Close stops the region: new writes fail with ErrClosed, the write in
// flight finishes, memtables are flushed if asked, background work stops,
// and the manifest is released. The store is not closed.
func (r *Region) Close(ctx context.Context, opts CloseOptions) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	// 1. Stop the WAL: the group in flight completes, queued writes fail.
	r.wal.Close()
	var errs []error
	if err := r.closeOwnStream(); err != nil {
		errs = append(errs, fmt.Errorf("region %s: close its WAL stream: %w", r.id, err))
	}
	// 2. Flush if asked (while background work is still possible).
	if opts.Flush {
		if err := r.flushAll(ctx); err != nil {
			errs = append(errs, fmt.Errorf("region %s: flush on close: %w", r.id, err))
		}
	}
	// 3. Stop background work and wait for it.
	r.cancel()
	r.wg.Wait()
	// 4. Release memory and the manifest.
	r.mu.Lock()
	freed := r.memBytes
	r.memBytes, r.memKeys = 0, 0
	r.mu.Unlock()
	if r.opts.Budget != nil {
		r.opts.Budget.unregister(r)
		r.opts.Budget.add(-freed)
	}
	r.opts.Metrics.MemtableBytes.Sub(float64(freed))
	r.seriesIdx.clear()
	errs = append(errs, r.man.Close())
	return errors.Join(errs...)
}

// closeOwnStream stops the region's own stream (none with Options.Stream).
func (r *Region) closeOwnStream() error {
	if r.opts.Stream == nil {
		return r.stream.Close()
	}
	return nil
}

// ttlCutoff is the oldest timestamp still alive (MinInt64 without TTL).
func (r *Region) ttlCutoff() int64 {
	if r.opts.TTL <= 0 {
		return math.MinInt64
	}
	return r.opts.Now().Add(-r.opts.TTL).UnixNano()
}
