package datanode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
)

// CatalogPrefix is where a standalone datanode keeps its table catalog (a
// metasrv keeps it in etcd instead). Each version is one object written with
// create-if-absent:
//
//	catalog/{version:020}.json
//
// Versions below the newest are deleted after it lands; the newest is never
// deleted, so the catalog always has an owner: itself.
const CatalogPrefix = "catalog/"

func catalogKey(v uint64) string { return fmt.Sprintf("%s%020d.json", CatalogPrefix, v) }

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

type catalogState struct {
	Version uint64            `json:"version"`
	NextID  uint32            `json:"next_id"`
	Tables  map[string]*Table `json:"tables"`
	// Sweeps are dropped tables (by id) whose objects were deleted once at
	// the time given, and are deleted again once no former owner of their
	// regions can still write (see Catalog.Forget).
	Sweeps map[uint32]time.Time `json:"sweeps,omitempty"`
}

func (c *catalogState) clone() *catalogState {
	n := &catalogState{Version: c.Version, NextID: c.NextID, Tables: make(map[string]*Table, len(c.Tables)), Sweeps: maps.Clone(c.Sweeps)}
	for k, t := range c.Tables {
		tt := *t
		tt.Schema.Columns = append([]manifest.Column(nil), t.Schema.Columns...)
		n.Tables[k] = &tt
	}
	return n
}

// CatalogBackend persists the catalog state. Commit is a compare-and-swap
// on the version the engine last loaded: ErrCatalogConflict if another
// process committed since, after which the engine reloads.
type CatalogBackend interface {
	// Load returns the newest state (version 0 and no tables if none).
	Load(ctx context.Context) ([]byte, uint64, error)
	// Commit stores data as version, which must follow prev.
	Commit(ctx context.Context, prev, version uint64, data []byte) error
}

// ErrCatalogConflict: another process committed a catalog version first.
var ErrCatalogConflict = errors.New("catalog: changed by another process")

// storeCatalog keeps the catalog in the object store: one create-if-absent
// object per version, older versions deleted (standalone).
type storeCatalog struct{ store objstore.Bucket }

// StoreCatalog is the standalone catalog backend over store.
func StoreCatalog(store objstore.Bucket) CatalogBackend { return storeCatalog{store} }

func (c storeCatalog) Load(ctx context.Context) ([]byte, uint64, error) {
	objs, err := objstore.ListAll(ctx, c.store, CatalogPrefix, 1000)
	if err != nil {
		return nil, 0, fmt.Errorf("catalog: list: %w", err)
	}
	var newest uint64
	for _, o := range objs {
		name := strings.TrimSuffix(strings.TrimPrefix(o.Key, CatalogPrefix), ".json")
		if v, err := strconv.ParseUint(name, 10, 64); err == nil && v > newest {
			newest = v
		}
	}
	if newest == 0 {
		return nil, 0, nil
	}
	data, err := c.store.Get(ctx, catalogKey(newest))
	if err != nil {
		return nil, 0, fmt.Errorf("catalog: read version %d: %w", newest, err)
	}
	return data, newest, nil
}

func (c storeCatalog) Commit(ctx context.Context, prev, version uint64, data []byte) error {
	if err := c.store.CreateIfAbsent(ctx, catalogKey(version), data); err != nil {
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			return fmt.Errorf("%w: version %d was written first", ErrCatalogConflict, version)
		}
		return fmt.Errorf("catalog: commit version %d: %w", version, err)
	}
	if prev > 0 {
		_ = c.store.Delete(ctx, catalogKey(prev)) // best effort; loading takes the newest
	}
	return nil
}

// catalog is the engine's view of the catalog. Callers serialize commits.
type catalog struct {
	backend CatalogBackend
	state   *catalogState
}

func loadCatalog(ctx context.Context, backend CatalogBackend) (*catalog, error) {
	c := &catalog{backend: backend}
	return c, c.reload(ctx)
}

func (c *catalog) reload(ctx context.Context) error {
	data, v, err := c.backend.Load(ctx)
	if err != nil {
		return err
	}
	if v == 0 {
		c.state = &catalogState{NextID: 1, Tables: map[string]*Table{}}
		return nil
	}
	var st catalogState
	if err := json.Unmarshal(data, &st); err != nil || st.Version != v {
		return fmt.Errorf("catalog: version %d is corrupt: %v", v, err)
	}
	if st.Tables == nil {
		st.Tables = map[string]*Table{}
	}
	c.state = &st
	return nil
}

// commit writes next as the next version.
func (c *catalog) commit(ctx context.Context, next *catalogState) error {
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

// ReadCatalog returns the tables of the standalone catalog in store (none
// if it has no catalog), without opening any region: for offline tools.
func ReadCatalog(ctx context.Context, store objstore.Bucket) ([]Table, error) {
	c, err := loadCatalog(ctx, StoreCatalog(store))
	if err != nil {
		return nil, err
	}
	out := make([]Table, 0, len(c.state.Tables))
	for _, t := range c.state.Tables {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b Table) int { return int(a.ID) - int(b.ID) })
	return out, nil
}

// Catalog is the table catalog outside an engine: metasrv's view. Its
// methods reload before they read, and retry a commit that lost a race.
type Catalog struct {
	mu             sync.Mutex
	c              *catalog
	defaultRegions uint32
}

// OpenCatalog loads the catalog from backend.
func OpenCatalog(ctx context.Context, backend CatalogBackend, defaultRegions uint32) (*Catalog, error) {
	c, err := loadCatalog(ctx, backend)
	if err != nil {
		return nil, err
	}
	return &Catalog{c: c, defaultRegions: defaultRegions}, nil
}

// CreateTable adds a table; its regions are placed by metasrv.
func (c *Catalog) CreateTable(ctx context.Context, spec TableSpec) (Table, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if err := c.c.reload(ctx); err != nil {
			return Table{}, err
		}
		next, t, err := withTable(c.c.state, spec, c.defaultRegions)
		if err != nil {
			return Table{}, err
		}
		err = c.c.commit(ctx, next)
		if err == nil {
			return *t, nil
		}
		if !errors.Is(err, ErrCatalogConflict) || attempt == 4 {
			return Table{}, err
		}
	}
}

// Tables lists the tables that are not being dropped, by id.
func (c *Catalog) Tables(ctx context.Context) ([]Table, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.c.reload(ctx); err != nil {
		return nil, err
	}
	var out []Table
	for _, t := range c.c.state.Tables {
		if !t.Dropping {
			out = append(out, *t)
		}
	}
	slices.SortFunc(out, func(a, b Table) int { return int(a.ID) - int(b.ID) })
	return out, nil
}

// update applies f to a fresh copy of the catalog and commits it, retrying
// lost races. f returning an error aborts.
func (c *Catalog) update(ctx context.Context, f func(*catalogState) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if err := c.c.reload(ctx); err != nil {
			return err
		}
		next := c.c.state.clone()
		if err := f(next); err != nil {
			return err
		}
		err := c.c.commit(ctx, next)
		if err == nil || !errors.Is(err, ErrCatalogConflict) || attempt == 4 {
			return err
		}
	}
}

// MarkDropping starts dropping a table: it leaves the table list at once,
// and its regions are closed and its objects deleted by metasrv's leader.
func (c *Catalog) MarkDropping(ctx context.Context, name string) (Table, error) {
	var t Table
	err := c.update(ctx, func(st *catalogState) error {
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
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.c.reload(ctx); err != nil {
		return nil, err
	}
	var out []Table
	for _, t := range c.c.state.Tables {
		if t.Dropping {
			out = append(out, *t)
		}
	}
	return out, nil
}

// Forget removes a dropped table whose objects were deleted at sweptAt
// from the catalog; its name is free again. Its id stays in the sweeps
// until SweepDone: a former owner that was paused may still land a write
// under its prefix, so the prefix is swept once more when that can no
// longer happen.
func (c *Catalog) Forget(ctx context.Context, name string, sweptAt time.Time) error {
	return c.update(ctx, func(st *catalogState) error {
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
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.c.reload(ctx); err != nil {
		return nil, err
	}
	return maps.Clone(c.c.state.Sweeps), nil
}

// SweepDone forgets a dropped table's id after its final sweep.
func (c *Catalog) SweepDone(ctx context.Context, id uint32) error {
	return c.update(ctx, func(st *catalogState) error {
		delete(st.Sweeps, id)
		return nil
	})
}

// Table returns a table by name (not one being dropped).
func (c *Catalog) Table(ctx context.Context, name string) (Table, error) {
	tables, err := c.Tables(ctx)
	if err != nil {
		return Table{}, err
	}
	for _, t := range tables {
		if t.Name == name {
			return t, nil
		}
	}
	return Table{}, fmt.Errorf("%w: %s", ErrTableNotFound, name)
}
