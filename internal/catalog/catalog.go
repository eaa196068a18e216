// Package catalog is Strata's table catalog: the tables, their region
// counts and schemas, the ids of dropped tables still to be swept, and the
// compare-and-swap commits that change them. It is shared by metasrv, the
// datanode and fsck, and kept in etcd, one key per table (EtcdBackend), or,
// for an offline store, in the object store (internal/catalog/storecat,
// kept apart so that the catalog's users link no object-store client).
//
// A Catalog holds a copy of every record in memory. A change reads only
// the records it changes from that copy and commits only them, comparing
// their revisions; the copy follows other processes' commits through the
// backend's watch (Watcher). So creating a table, or recording one table's
// new columns, costs the same whatever the number of tables.
package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/tenant"
)

// Errors.
var (
	ErrTableNotFound = errors.New("table not found")
	ErrTableExists   = errors.New("table already exists")
	ErrInvalidTable  = errors.New("invalid table")
	// ErrConflict: another process changed the records a change was made
	// from, again and again (each change is retried a few times first).
	ErrConflict = errors.New("catalog: changed by another process")
	// ErrClosed: the Catalog was closed.
	ErrClosed = errors.New("catalog: closed")
)

// MaxRegions bounds a table's region count.
const MaxRegions = 256

// Table is one table of the catalog.
type Table struct {
	ID      uint32        `json:"id"`
	Name    string        `json:"name"`
	Regions uint32        `json:"regions"`
	TTL     time.Duration `json:"ttl,omitempty"`
	// CompactionWindow is the TWCS window (0: inferred from the files).
	CompactionWindow time.Duration `json:"compaction_window,omitempty"`
	CreatedAt        time.Time     `json:"created_at"`
	// Schema is the table's schema: the union of its regions' columns, and
	// the one that decides type conflicts.
	Schema schema.Persisted `json:"schema"`
	// Dropping: the table is being dropped; its objects are being deleted.
	Dropping bool `json:"dropping,omitempty"`
	// Logical: the table has no regions of its own (Regions is 0, and it
	// has no TTL or compaction window); its rows are stored in the
	// physical table LinesTable, under series keys that carry its id as
	// the tag TableTag, and its fields in LinesTable's columns named by
	// LinesColumn. Its schema is its own, typed as any table's.
	Logical bool `json:"logical,omitempty"`
	// Partition is the tag the table's series are routed to regions by
	// (layout.Router): "" routes by the whole series key.
	Partition string `json:"partition_by,omitempty"`
}

// Router routes the table's series keys to its regions.
func (t *Table) Router() layout.Router { return layout.Router{Regions: t.Regions, Tag: t.Partition} }

func (t *Table) clone() *Table {
	n := *t
	n.Schema.Columns = slices.Clone(t.Schema.Columns)
	return &n
}

// TableSpec describes a table to create.
type TableSpec struct {
	Name      string
	Regions   uint32        // default: the catalog's default region count
	Timestamp string        // default "time"
	TTL       time.Duration // 0: keep forever
	// CompactionWindow is the TWCS window (0: inferred from the files).
	CompactionWindow time.Duration
	// Logical creates a logical table (Table.Logical): no regions, TTL or
	// compaction window of its own; its rows go to LinesTable.
	Logical bool
	// Partition routes series by this tag's value alone (Table.Partition;
	// "": by the whole series key).
	Partition string
}

// MetricsTable is the table that holds every sample written through
// Prometheus remote write: one physical table whose series keys carry the
// metric name as the tag __name__, so a metric name costs what a series
// costs (docs/design-decisions.md, "Metric names are labels"). Its name has
// the reserved prefix "__", so no user table can take it.
const MetricsTable = "__metrics"

// MetricsField is the metrics table's one field: a sample's value.
const MetricsField = "value"

// LinesTable is the physical table that holds the rows of every logical
// table (Table.Logical: the line-protocol measurements a write created),
// so a measurement costs a catalog record and its series, never regions
// of its own (docs/design-decisions.md, "Measurements are logical
// tables"). Like MetricsTable its tags are labels (schema.NewLabels); its
// series keys carry the logical table's id as the tag TableTag, and its
// fields are LinesColumn(field, kind) of the logical tables' fields.
const LinesTable = "__lines"

// TableTag is the tag of LinesTable's series keys that holds the id of
// the logical table the series belongs to (decimal). Its name, one space,
// sorts before every other tag name a table accepts (names have no
// control characters), so it leads every key: LinesTable's keys are the
// logical keys behind a prefix per table, in the same order, and the rows
// of one table are contiguous. A logical table refuses a tag of this name.
//
// An id, not the table's name: a table dropped and created again under its
// name gets a new id, so rows of the old one (a write racing the drop
// among them) never show in the new one.
const TableTag = " "

// LinesColumn is the LinesTable column that holds field name of kind k of
// the logical tables: one column per (name, kind), so two measurements
// may type a field differently, and LinesTable's schema grows with the
// distinct (name, kind) pairs written, never with the number of tables.
func LinesColumn(name string, k row.Kind) string { return name + ":" + k.String() }

// Reserved reports whether name is one of the tables the engine keeps for
// itself (MetricsTable, LinesTable), of any tenant.
func Reserved(name string) bool {
	base := tenant.Base(name)
	return base == MetricsTable || base == LinesTable
}

// IsMetrics reports whether name is a tenant's MetricsTable.
func IsMetrics(name string) bool { return tenant.Base(name) == MetricsTable }

// IsLines reports whether name is a tenant's LinesTable.
func IsLines(name string) bool { return tenant.Base(name) == LinesTable }

// LinesOf is the LinesTable of the tenant of table name: the table that
// holds the rows of that tenant's logical tables.
func LinesOf(name string) string { return tenant.Qualify(tenant.Of(name), LinesTable) }

// MetricsOf is tenant t's MetricsTable.
func MetricsOf(t string) string { return tenant.Qualify(t, MetricsTable) }

// NewSchema is the first schema of table name: the metrics table's tags
// are labels (schema.NewLabels), and it has its float field from the
// start, so a query never finds it without one.
func NewSchema(name, timestamp string) (*schema.Schema, error) {
	if !Reserved(name) {
		return schema.New(timestamp)
	}
	s, err := schema.NewLabels(timestamp)
	if err != nil || IsLines(name) {
		return s, err
	}
	add := s.Extend()
	if err := add.Field(MetricsField, row.Float); err != nil {
		return nil, err
	}
	return add.Result()
}

// ValidateTableName checks a catalog name (MetricsTable and LinesTable
// are valid): a tenant's table name as tenant.Qualify made it.
func ValidateTableName(name string) error {
	t, base := tenant.Split(name)
	if t != tenant.Default || strings.HasPrefix(name, tenant.QualifierPrefix) {
		if err := tenant.Check(t); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidTable, err)
		}
		if tenant.Qualify(t, base) != name {
			return fmt.Errorf("%w: %q is no tenant's table name", ErrInvalidTable, name)
		}
	}
	if base == MetricsTable || base == LinesTable {
		return nil
	}
	if err := schema.ValidateName(base); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidTable, err)
	}
	return nil
}

// DefaultRegionCount is the region count of a physical table created
// without one: def (a process's --default-regions, or --metrics-regions
// and --lines-regions for the shared tables) if set, else one per live
// datanode, live, at least 1 and at most MaxRegions. A standalone counts
// as one live datanode. The count is fixed at creation: a datanode that
// registers later gets no region of the table (docs/cluster.md, "Region
// count").
func DefaultRegionCount(def uint32, live int) uint32 {
	if def > 0 {
		return def
	}
	return uint32(min(max(live, 1), MaxRegions))
}

// newTable validates spec and returns its table, without an id.
func newTable(spec TableSpec, defaultRegions uint32) (*Table, error) {
	if err := ValidateTableName(spec.Name); err != nil {
		return nil, err
	}
	if spec.Logical {
		switch {
		case Reserved(spec.Name):
			return nil, fmt.Errorf("%w: %s cannot be a logical table", ErrInvalidTable, spec.Name)
		case spec.Regions != 0 || spec.TTL != 0 || spec.CompactionWindow != 0:
			return nil, fmt.Errorf("%w: a logical table has no regions, TTL or compaction window of its own", ErrInvalidTable)
		}
	} else if spec.Regions == 0 {
		spec.Regions = max(1, defaultRegions)
	}
	if spec.Regions > MaxRegions {
		return nil, fmt.Errorf("%w: %d regions, the most is %d", ErrInvalidTable, spec.Regions, MaxRegions)
	}
	if spec.TTL < 0 || spec.CompactionWindow < 0 {
		return nil, fmt.Errorf("%w: negative TTL or compaction window", ErrInvalidTable)
	}
	if spec.Timestamp == "" {
		spec.Timestamp = schema.DefaultTimestamp
	}
	sch, err := NewSchema(spec.Name, spec.Timestamp)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidTable, err)
	}
	if spec.Partition != "" {
		// The partition tag is a tag from the start: a write cannot make
		// it a field, which would route every series to one region.
		if spec.Logical || Reserved(spec.Name) {
			return nil, fmt.Errorf("%w: %s cannot be partitioned by a tag: its rows are routed by the whole series key", ErrInvalidTable, spec.Name)
		}
		add := sch.Extend()
		if err := add.Tag(spec.Partition); err != nil {
			return nil, fmt.Errorf("%w: partition tag: %v", ErrInvalidTable, err)
		}
		if sch, err = add.Result(); err != nil {
			return nil, fmt.Errorf("%w: partition tag: %v", ErrInvalidTable, err)
		}
	}
	return &Table{Name: spec.Name, Regions: spec.Regions, TTL: spec.TTL, CompactionWindow: spec.CompactionWindow,
		Schema: sch.Manifest(), Logical: spec.Logical, Partition: spec.Partition}, nil
}

// entry is the catalog's copy of one record.
type entry struct {
	mod, at int64 // as in Record
	value
}

// maxAttempts bounds the commits of one change that lose a race. Each lost
// race is another process's commit landing, so the catalog as a whole
// always progresses; the bound only stops a change that keeps losing to a
// stream of others (creates all compare next_id). After the first loss,
// each attempt waits up to a few milliseconds, at random, so that racing
// processes spread out.
const maxAttempts = 50

// Catalog is the catalog of one process: a copy of every record, changed by
// its own commits and by the backend's watch, and the commits that go
// through its backend. Its methods are safe for concurrent use.
type Catalog struct {
	backend        Backend
	defaultRegions uint32
	stop           context.CancelFunc // ends the watch
	done           chan struct{}      // closed once the watch ended; nil: no watch

	mu sync.RWMutex
	// recs holds every record, and the records deleted at a revision above
	// rev (tombs), so that an older state of them arriving later is not
	// taken for the newest. INVARIANT: a record's entry is replaced only
	// by one read at a higher revision (at).
	recs  map[string]entry
	tombs map[string]int64
	// Indexes of recs.
	byID     map[uint32]*Table // tables not being dropped
	dropping map[string]*Table // tables being dropped
	sweeps   map[uint32]time.Time
	// rev is the revision the copy is complete up to: every commit at or
	// below it has been applied (by a load or the watch).
	rev      int64
	advanced chan struct{} // closed when rev grows
}

// Open loads the catalog from backend and, if the backend is a Watcher,
// follows its changes until Close. Tables created without a region count
// get defaultRegions.
func Open(ctx context.Context, backend Backend, defaultRegions uint32) (*Catalog, error) {
	c := &Catalog{backend: backend, defaultRegions: defaultRegions, recs: map[string]entry{}, tombs: map[string]int64{},
		byID: map[uint32]*Table{}, dropping: map[string]*Table{}, sweeps: map[uint32]time.Time{}, advanced: make(chan struct{})}
	if err := c.load(ctx); err != nil {
		return nil, err
	}
	if w, ok := backend.(Watcher); ok {
		bg, stop := context.WithCancel(context.Background())
		c.stop, c.done = stop, make(chan struct{})
		go c.follow(bg, w)
	}
	return c, nil
}

// Close stops following the backend. The copy stays readable; commits
// still work, but Sync fails.
func (c *Catalog) Close() {
	if c.stop != nil {
		c.stop()
		<-c.done
	}
}

// load reads every record and applies it. A record the copy holds at a
// higher revision than the load's (a commit or watch event that came in
// meanwhile) stays. A value no Strata writes is left out, and the first
// such is the error (Open fails on it; the watch goes on).
func (c *Catalog) load(ctx context.Context) error {
	recs, rev, err := c.backend.Load(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := make(map[string]bool, len(recs))
	var bad error
	for _, r := range recs {
		seen[r.Key] = true
		if err := c.applyLocked(r); err != nil && bad == nil {
			bad = err
		}
	}
	for k, e := range c.recs {
		if !seen[k] && e.mod != 0 {
			_ = c.applyLocked(Record{Key: k, At: rev}) // deleted by rev: nothing to decode
		}
	}
	c.advanceLocked(rev)
	return bad
}

// follow applies the watch's changes until ctx ends. A watch that fails
// starts again where it stopped; one whose changes are gone loads
// everything again.
func (c *Catalog) follow(ctx context.Context, w Watcher) {
	defer close(c.done)
	for ctx.Err() == nil {
		c.mu.RLock()
		rev := c.rev
		c.mu.RUnlock()
		err := w.Watch(ctx, rev, c.applyWatched)
		if errors.Is(err, ErrCompacted) {
			err = c.load(ctx)
		}
		if err != nil && ctx.Err() == nil {
			select { // back off: etcd is unreachable or has no leader
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (c *Catalog) applyWatched(recs []Record, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range recs {
		// A value no Strata writes (decode fails) is skipped: the copy
		// keeps the record's previous value.
		_ = c.applyLocked(r)
	}
	c.advanceLocked(rev)
}

// advanceLocked marks the copy complete up to rev.
func (c *Catalog) advanceLocked(rev int64) {
	if rev <= c.rev {
		return
	}
	c.rev = rev
	for k, at := range c.tombs {
		if at <= rev { // no older state of k can arrive any more
			delete(c.tombs, k)
			delete(c.recs, k)
		}
	}
	close(c.advanced)
	c.advanced = make(chan struct{})
}

// applyLocked makes r the copy's record of r.Key, unless the copy holds a
// newer one.
func (c *Catalog) applyLocked(r Record) error {
	old, known := c.recs[r.Key]
	if known && old.at >= r.At {
		return nil
	}
	v, ok, err := decode(r.Key, r.Value)
	if err != nil || !ok {
		return err
	}
	if t := old.table; t != nil {
		if c.byID[t.ID] == t {
			delete(c.byID, t.ID)
		}
		delete(c.dropping, t.Name)
	}
	switch {
	case v.table != nil && v.table.Dropping:
		c.dropping[v.table.Name] = v.table
	case v.table != nil:
		c.byID[v.table.ID] = v.table
	case v.sweep != 0 && r.Value != nil:
		c.sweeps[v.sweep] = v.sweptAt
	case v.sweep != 0:
		delete(c.sweeps, v.sweep)
	}
	c.recs[r.Key] = entry{mod: r.Mod, at: r.At, value: v}
	if r.Value == nil {
		c.tombs[r.Key] = r.At
	} else {
		delete(c.tombs, r.Key)
	}
	return nil
}

// Sync brings the copy up to every commit that completed before the call,
// by any process. With the copy current it costs one read of the backend's
// head; otherwise it waits for the watch to deliver the rest (or, for a
// backend that cannot watch, loads everything again).
func (c *Catalog) Sync(ctx context.Context) error {
	head, err := c.backend.Head(ctx)
	if err != nil {
		return fmt.Errorf("catalog: read the newest revision: %w", err)
	}
	for {
		c.mu.RLock()
		rev, advanced := c.rev, c.advanced
		c.mu.RUnlock()
		if rev >= head {
			return nil
		}
		if c.done == nil {
			return c.load(ctx)
		}
		select {
		case <-advanced:
		case <-c.done:
			return ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("catalog: wait for revision %d (at %d): %w", head, rev, ctx.Err())
		}
	}
}

// Lookup returns the table named name as of the copy, even one being
// dropped. It reads no backend: a table another process created a moment
// ago may be missing (Sync first to see it).
func (c *Catalog) Lookup(name string) (Table, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if t := c.recs[tableKey(name)].table; t != nil {
		return *t, true
	}
	return Table{}, false
}

// ByID returns the table with id that is not being dropped, as of the
// copy (as Lookup).
func (c *Catalog) ByID(id uint32) (Table, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if t := c.byID[id]; t != nil {
		return *t, true
	}
	return Table{}, false
}

// Gone reports whether id was given to a table that is no longer live
// (being dropped, or dropped and forgotten), as of the copy. An id the
// copy has not seen given is not gone: a table another process created a
// moment ago may hold it. (A create commits the table and next_id
// together, and the copy applies a commit's records together.)
func (c *Catalog) Gone(id uint32) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return id >= 1 && id < c.recs[nextIDKey].nextID && c.byID[id] == nil
}

// List returns the tables as of the copy, by id: those being dropped only
// if dropping.
func (c *Catalog) List(dropping bool) []Table {
	c.mu.RLock()
	var out []Table
	if dropping {
		out = make([]Table, 0, len(c.dropping))
		for _, t := range c.dropping {
			out = append(out, *t)
		}
	} else {
		out = make([]Table, 0, len(c.byID))
		for _, t := range c.byID {
			out = append(out, *t)
		}
	}
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b Table) int { return int(a.ID) - int(b.ID) })
	return out
}

// Tables lists the tables that are not being dropped, by id, as of the
// newest commit (Sync).
func (c *Catalog) Tables(ctx context.Context) ([]Table, error) {
	if err := c.Sync(ctx); err != nil {
		return nil, err
	}
	return c.List(false), nil
}

// Table returns a table by name (not one being dropped), as of the newest
// commit (Sync).
func (c *Catalog) Table(ctx context.Context, name string) (Table, error) {
	if err := c.Sync(ctx); err != nil {
		return Table{}, err
	}
	t, ok := c.Lookup(name)
	if !ok || t.Dropping {
		return Table{}, fmt.Errorf("%w: %s", ErrTableNotFound, name)
	}
	return t, nil
}

// Dropping lists the tables being dropped, as of the newest commit (Sync).
func (c *Catalog) Dropping(ctx context.Context) ([]Table, error) {
	if err := c.Sync(ctx); err != nil {
		return nil, err
	}
	return c.List(true), nil
}

// Sweeps lists dropped tables' ids with the time of their first sweep, as
// of the newest commit (Sync).
func (c *Catalog) Sweeps(ctx context.Context) (map[uint32]time.Time, error) {
	if err := c.Sync(ctx); err != nil {
		return nil, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return maps.Clone(c.sweeps), nil
}

// change is the compare-and-swap every change goes through. plan gets the
// copy's entries of keys, in order (it must not change them), and returns
// the writes; they commit only if none of keys changed since the copy
// read them. A commit that lost the race to another process reads keys
// again and plans again, up to maxAttempts commits (then ErrConflict). A
// plan that fails is retried once on keys read fresh (the copy may be
// behind), and its error returned if it fails again. The copy changes
// only when a commit lands: a failed one leaves it as it was. what names
// the change in errors of the backend.
func (c *Catalog) change(ctx context.Context, what string, keys []string, plan func(cur []entry) ([]Op, error)) error {
	fresh := false
	for attempt := 1; ; {
		cur := make([]entry, len(keys))
		cmps := make([]Cmp, len(keys))
		c.mu.RLock()
		for i, k := range keys {
			cur[i] = c.recs[k]
			cmps[i] = Cmp{Key: k, Mod: cur[i].mod}
		}
		c.mu.RUnlock()
		ops, err := plan(cur)
		if err != nil {
			if fresh {
				return err
			}
			recs, gerr := c.backend.Get(ctx, keys)
			if gerr != nil {
				return fmt.Errorf("%s: %w", what, errors.Join(err, gerr))
			}
			c.applyRead(recs)
			fresh = true
			continue
		}
		if len(ops) == 0 {
			return nil
		}
		rev, now, err := c.backend.Commit(ctx, cmps, ops)
		if err == nil {
			c.mu.Lock()
			for _, op := range ops {
				mod := rev
				if op.Value == nil {
					mod = 0
				}
				_ = c.applyLocked(Record{Key: op.Key, Value: op.Value, Mod: mod, At: rev}) // the plan encoded it
			}
			if rev == c.rev+1 { // nothing else was committed in between
				c.advanceLocked(rev)
			}
			c.mu.Unlock()
			return nil
		}
		if !errors.Is(err, ErrConflict) || attempt == maxAttempts {
			return fmt.Errorf("%s: %w", what, err)
		}
		c.applyRead(now)
		fresh = true
		if attempt > 1 {
			select { // back off: see maxAttempts
			case <-ctx.Done():
				return fmt.Errorf("%s: %w (after %d commits lost a race)", what, ctx.Err(), attempt)
			case <-time.After(time.Duration(rand.Int64N(int64(min(attempt, 8)) * int64(time.Millisecond)))):
			}
		}
		attempt++
	}
}

// applyRead applies records read from the backend (a value the copy
// cannot decode is left out: the next plan sees the older one, and its
// commit fails the comparison).
func (c *Catalog) applyRead(recs []Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range recs {
		_ = c.applyLocked(r)
	}
}

// CreateTable adds a table: ErrTableExists if one of its name exists,
// even one being dropped. Its regions are placed by metasrv.
func (c *Catalog) CreateTable(ctx context.Context, spec TableSpec) (Table, error) {
	t, err := newTable(spec, c.defaultRegions)
	if err != nil {
		return Table{}, err
	}
	var out *Table
	err = c.change(ctx, "catalog: create table "+spec.Name, []string{tableKey(spec.Name), nextIDKey}, func(cur []entry) ([]Op, error) {
		if old := cur[0].table; old != nil {
			if old.Dropping {
				return nil, fmt.Errorf("%w: %s (being dropped)", ErrTableExists, spec.Name)
			}
			return nil, fmt.Errorf("%w: %s", ErrTableExists, spec.Name)
		}
		out = t.clone()
		out.ID = max(1, cur[1].nextID)
		out.CreatedAt = time.Now().UTC()
		op, err := tableOp(out)
		if err != nil {
			return nil, err
		}
		return []Op{op, nextIDOp(out.ID + 1)}, nil
	})
	if err != nil {
		return Table{}, err
	}
	return *out, nil
}

// UpdateTable changes one table (not one being dropped) with f, which gets
// a copy of the newest table it knows and may be called again (with a
// newer one) if another process changed the table first. f must not change
// the table's name or id; an f that changes nothing commits nothing. It
// returns the table as committed.
func (c *Catalog) UpdateTable(ctx context.Context, name string, f func(*Table) error) (Table, error) {
	var out *Table
	err := c.change(ctx, "catalog: table "+name, []string{tableKey(name)}, func(cur []entry) ([]Op, error) {
		t := cur[0].table
		if t == nil || t.Dropping {
			return nil, fmt.Errorf("%w: %s", ErrTableNotFound, name)
		}
		next := t.clone()
		if err := f(next); err != nil {
			return nil, err
		}
		if next.Name != t.Name || next.ID != t.ID {
			return nil, fmt.Errorf("%w: table %s: an update cannot change its name or id", ErrInvalidTable, name)
		}
		out = next
		op, err := tableOp(next)
		if err != nil {
			return nil, err
		}
		if was, err := json.Marshal(t); err == nil && bytes.Equal(was, op.Value) {
			return nil, nil
		}
		return []Op{op}, nil
	})
	if err != nil {
		return Table{}, err
	}
	return *out, nil
}

// MarkDropping starts dropping a table: it leaves the table list at once,
// and its regions are closed and its objects deleted by metasrv's leader.
//
// LinesTable is never dropped: it holds the rows of the logical tables.
func (c *Catalog) MarkDropping(ctx context.Context, name string) (Table, error) {
	if IsLines(name) {
		return Table{}, fmt.Errorf("%w: %s holds the rows of every logical table; drop them one by one", ErrInvalidTable, name)
	}
	return c.UpdateTable(ctx, name, func(t *Table) error {
		t.Dropping = true
		return nil
	})
}

// Forget removes a dropped table whose objects were deleted at sweptAt
// from the catalog; its name is free again. Its id stays in the sweeps
// until SweepDone: a former owner that was paused may still land a write
// under its prefix, so the prefix is swept once more when that can no
// longer happen.
func (c *Catalog) Forget(ctx context.Context, name string, sweptAt time.Time) error {
	// The sweep's key is not compared: ids are never reused, and the
	// table's comparison orders two Forgets of it.
	return c.change(ctx, "catalog: forget table "+name, []string{tableKey(name)}, func(cur []entry) ([]Op, error) {
		t := cur[0].table
		if t == nil || !t.Dropping {
			return nil, fmt.Errorf("%w: %s is not being dropped", ErrTableNotFound, name)
		}
		return []Op{{Key: tableKey(name)}, sweepOp(t.ID, sweptAt)}, nil
	})
}

// SweepDone forgets a dropped table's id after its final sweep.
func (c *Catalog) SweepDone(ctx context.Context, id uint32) error {
	return c.change(ctx, fmt.Sprintf("catalog: forget the sweep of table %d", id), nil, func([]entry) ([]Op, error) {
		return []Op{{Key: sweepKey(id)}}, nil
	})
}
