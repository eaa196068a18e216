// Package catalog is Strata's table catalog: the tables, their region
// counts and schemas, the ids of dropped tables still to be swept, and the
// compare-and-swap commit that every change goes through. It is shared by
// metasrv, the datanode and fsck, and kept in etcd (EtcdBackend) or, for an
// offline store, in the object store (StoreBackend).
package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/schema"
)

// Errors.
var (
	ErrTableNotFound = errors.New("table not found")
	ErrTableExists   = errors.New("table already exists")
	ErrInvalidTable  = errors.New("invalid table")
	// ErrConflict: another process committed a catalog version first.
	ErrConflict = errors.New("catalog: changed by another process")
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
	Schema manifest.Schema `json:"schema"`
	// Dropping: the table is being dropped; its objects are being deleted.
	Dropping bool `json:"dropping,omitempty"`
}

// TableSpec describes a table to create.
type TableSpec struct {
	Name      string
	Regions   uint32        // default: the catalog's default region count
	Timestamp string        // default "time"
	TTL       time.Duration // 0: keep forever
	// CompactionWindow is the TWCS window (0: inferred from the files).
	CompactionWindow time.Duration
}

// State is one version of the catalog. A State a Catalog hands out is
// never changed: Clone it to make the next one.
type State struct {
	Version uint64            `json:"version"`
	NextID  uint32            `json:"next_id"`
	Tables  map[string]*Table `json:"tables"`
	// Sweeps are dropped tables (by id) whose objects were deleted once at
	// the time given, and are deleted again once no former owner of their
	// regions can still write (see Catalog.Forget).
	Sweeps map[uint32]time.Time `json:"sweeps,omitempty"`
}

func emptyState() *State { return &State{NextID: 1, Tables: map[string]*Table{}} }

// Clone returns a deep copy.
func (s *State) Clone() *State {
	n := &State{Version: s.Version, NextID: s.NextID, Tables: make(map[string]*Table, len(s.Tables)), Sweeps: maps.Clone(s.Sweeps)}
	for k, t := range s.Tables {
		tt := *t
		tt.Schema.Columns = slices.Clone(t.Schema.Columns)
		n.Tables[k] = &tt
	}
	return n
}

// ByID returns the table with id that is not being dropped, or nil.
func (s *State) ByID(id uint32) *Table {
	for _, t := range s.Tables {
		if t.ID == id && !t.Dropping {
			return t
		}
	}
	return nil
}

// MetricsTable is the table that holds every sample written through
// Prometheus remote write: one physical table whose series keys carry the
// metric name as the tag __name__, so a metric name costs what a series
// costs (docs/design-decisions.md, "Metric names are labels"). Its name has
// the reserved prefix "__", so no user table can take it.
const MetricsTable = "__metrics"

// NewSchema is the first schema of table name: the metrics table's tags
// are labels (schema.NewLabels).
func NewSchema(name, timestamp string) (*schema.Schema, error) {
	if name == MetricsTable {
		return schema.NewLabels(timestamp)
	}
	return schema.New(timestamp)
}

// ValidateTableName checks a table name (MetricsTable is valid).
func ValidateTableName(name string) error {
	if name == MetricsTable {
		return nil
	}
	if err := schema.ValidateName(name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidTable, err)
	}
	return nil
}

// WithTable returns a copy of s with the table of spec added, and the
// table.
func (s *State) WithTable(spec TableSpec, defaultRegions uint32) (*State, *Table, error) {
	if err := ValidateTableName(spec.Name); err != nil {
		return nil, nil, err
	}
	if t, ok := s.Tables[spec.Name]; ok {
		if t.Dropping {
			return nil, nil, fmt.Errorf("%w: %s (being dropped)", ErrTableExists, spec.Name)
		}
		return nil, nil, fmt.Errorf("%w: %s", ErrTableExists, spec.Name)
	}
	if spec.Regions == 0 {
		spec.Regions = max(1, defaultRegions)
	}
	if spec.Regions > MaxRegions {
		return nil, nil, fmt.Errorf("%w: %d regions, the most is %d", ErrInvalidTable, spec.Regions, MaxRegions)
	}
	if spec.TTL < 0 || spec.CompactionWindow < 0 {
		return nil, nil, fmt.Errorf("%w: negative TTL or compaction window", ErrInvalidTable)
	}
	if spec.Timestamp == "" {
		spec.Timestamp = schema.DefaultTimestamp
	}
	sch, err := NewSchema(spec.Name, spec.Timestamp)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalidTable, err)
	}
	next := s.Clone()
	t := &Table{ID: next.NextID, Name: spec.Name, Regions: spec.Regions, TTL: spec.TTL, CompactionWindow: spec.CompactionWindow,
		CreatedAt: time.Now().UTC(), Schema: sch.Manifest()}
	next.NextID++
	next.Tables[t.Name] = t
	return next, t, nil
}

// Backend persists the catalog. Commit is a compare-and-swap on the
// version last loaded: ErrConflict if another process committed since.
type Backend interface {
	// Load returns the newest state's bytes and version (0 and nil if
	// there is none).
	Load(ctx context.Context) ([]byte, uint64, error)
	// Commit stores data as version, which must follow prev.
	Commit(ctx context.Context, prev, version uint64, data []byte) error
}

// Catalog is the catalog of one process: the newest state it loaded, and
// commits through its backend.
type Catalog struct {
	backend        Backend
	defaultRegions uint32

	mu    sync.Mutex
	state *State
}

// Open loads the catalog from backend. Tables created without a region
// count get defaultRegions.
func Open(ctx context.Context, backend Backend, defaultRegions uint32) (*Catalog, error) {
	c := &Catalog{backend: backend, defaultRegions: defaultRegions}
	return c, c.Reload(ctx)
}

// State is the newest state loaded or committed. It must not be changed.
func (c *Catalog) State() *State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Reload reads the newest state.
func (c *Catalog) Reload(ctx context.Context) error {
	data, v, err := c.backend.Load(ctx)
	if err != nil {
		return err
	}
	st := emptyState()
	if v != 0 {
		st = &State{}
		if err := json.Unmarshal(data, st); err != nil || st.Version != v {
			return fmt.Errorf("catalog: version %d is corrupt: %v", v, err)
		}
		if st.Tables == nil {
			st.Tables = map[string]*Table{}
		}
	}
	c.mu.Lock()
	c.state = st
	c.mu.Unlock()
	return nil
}

// Commit writes next as the version after the state it was cloned from,
// which must be the newest loaded: ErrConflict otherwise, or if another
// process committed first.
func (c *Catalog) Commit(ctx context.Context, next *State) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if next.Version != c.state.Version {
		return fmt.Errorf("%w: version %d was changed from %d, the newest loaded is %d", ErrConflict, next.Version+1, next.Version, c.state.Version)
	}
	next.Version = c.state.Version + 1
	data, err := json.Marshal(next)
	if err != nil {
		return err
	}
	if err := c.backend.Commit(ctx, c.state.Version, next.Version, data); err != nil {
		return err
	}
	c.state = next
	return nil
}

// Update reloads, applies f to a copy of the newest state and commits it,
// retrying a commit that lost a race (up to 5 attempts). f returning an
// error aborts.
func (c *Catalog) Update(ctx context.Context, f func(*State) error) error {
	for attempt := 0; ; attempt++ {
		if err := c.Reload(ctx); err != nil {
			return err
		}
		next := c.State().Clone()
		if err := f(next); err != nil {
			return err
		}
		err := c.Commit(ctx, next)
		if err == nil || !errors.Is(err, ErrConflict) || attempt == 4 {
			return err
		}
	}
}

// CreateTable adds a table (its regions are placed by metasrv).
func (c *Catalog) CreateTable(ctx context.Context, spec TableSpec) (Table, error) {
	var t *Table
	err := c.Update(ctx, func(st *State) error {
		next, nt, err := st.WithTable(spec, c.defaultRegions)
		if err != nil {
			return err
		}
		*st, t = *next, nt
		return nil
	})
	if err != nil {
		return Table{}, err
	}
	return *t, nil
}

// Tables lists the tables that are not being dropped, by id, as of the
// newest version.
func (c *Catalog) Tables(ctx context.Context) ([]Table, error) {
	if err := c.Reload(ctx); err != nil {
		return nil, err
	}
	return c.State().List(false), nil
}

// List returns the tables by id: those being dropped only if dropping.
func (s *State) List(dropping bool) []Table {
	var out []Table
	for _, t := range s.Tables {
		if t.Dropping == dropping {
			out = append(out, *t)
		}
	}
	slices.SortFunc(out, func(a, b Table) int { return int(a.ID) - int(b.ID) })
	return out
}

// Table returns a table by name (not one being dropped).
func (c *Catalog) Table(ctx context.Context, name string) (Table, error) {
	if err := c.Reload(ctx); err != nil {
		return Table{}, err
	}
	t, ok := c.State().Tables[name]
	if !ok || t.Dropping {
		return Table{}, fmt.Errorf("%w: %s", ErrTableNotFound, name)
	}
	return *t, nil
}

// MarkDropping starts dropping a table: it leaves the table list at once,
// and its regions are closed and its objects deleted by metasrv's leader.
func (c *Catalog) MarkDropping(ctx context.Context, name string) (Table, error) {
	var t Table
	err := c.Update(ctx, func(st *State) error {
		cur, ok := st.Tables[name]
		if !ok || cur.Dropping {
			return fmt.Errorf("%w: %s", ErrTableNotFound, name)
		}
		cur.Dropping = true
		t = *cur
		return nil
	})
	return t, err
}

// Dropping lists the tables being dropped.
func (c *Catalog) Dropping(ctx context.Context) ([]Table, error) {
	if err := c.Reload(ctx); err != nil {
		return nil, err
	}
	return c.State().List(true), nil
}

// Forget removes a dropped table whose objects were deleted at sweptAt
// from the catalog; its name is free again. Its id stays in the sweeps
// until SweepDone: a former owner that was paused may still land a write
// under its prefix, so the prefix is swept once more when that can no
// longer happen.
func (c *Catalog) Forget(ctx context.Context, name string, sweptAt time.Time) error {
	return c.Update(ctx, func(st *State) error {
		t, ok := st.Tables[name]
		if !ok || !t.Dropping {
			return fmt.Errorf("%w: %s is not being dropped", ErrTableNotFound, name)
		}
		if st.Sweeps == nil {
			st.Sweeps = map[uint32]time.Time{}
		}
		st.Sweeps[t.ID] = sweptAt
		delete(st.Tables, name)
		return nil
	})
}

// Sweeps lists dropped tables' ids with the time of their first sweep.
func (c *Catalog) Sweeps(ctx context.Context) (map[uint32]time.Time, error) {
	if err := c.Reload(ctx); err != nil {
		return nil, err
	}
	return maps.Clone(c.State().Sweeps), nil
}

// SweepDone forgets a dropped table's id after its final sweep.
func (c *Catalog) SweepDone(ctx context.Context, id uint32) error {
	return c.Update(ctx, func(st *State) error {
		delete(st.Sweeps, id)
		return nil
	})
}
