package datanode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
}

func (c *catalogState) clone() *catalogState {
	n := &catalogState{Version: c.Version, NextID: c.NextID, Tables: make(map[string]*Table, len(c.Tables))}
	for k, t := range c.Tables {
		tt := *t
		tt.Schema.Columns = append([]manifest.Column(nil), t.Schema.Columns...)
		n.Tables[k] = &tt
	}
	return n
}

// catalog is the standalone catalog in the object store. Callers serialize
// commits.
type catalog struct {
	store objstore.Bucket
	state *catalogState
}

func loadCatalog(ctx context.Context, store objstore.Bucket) (*catalog, error) {
	objs, err := objstore.ListAll(ctx, store, CatalogPrefix, 1000)
	if err != nil {
		return nil, fmt.Errorf("catalog: list: %w", err)
	}
	var newest uint64
	for _, o := range objs {
		name := strings.TrimSuffix(strings.TrimPrefix(o.Key, CatalogPrefix), ".json")
		if v, err := strconv.ParseUint(name, 10, 64); err == nil && v > newest {
			newest = v
		}
	}
	c := &catalog{store: store, state: &catalogState{NextID: 1, Tables: map[string]*Table{}}}
	if newest == 0 {
		return c, nil
	}
	data, err := store.Get(ctx, catalogKey(newest))
	if err != nil {
		return nil, fmt.Errorf("catalog: read version %d: %w", newest, err)
	}
	var st catalogState
	if err := json.Unmarshal(data, &st); err != nil || st.Version != newest {
		return nil, fmt.Errorf("catalog: version %d is corrupt: %v", newest, err)
	}
	if st.Tables == nil {
		st.Tables = map[string]*Table{}
	}
	c.state = &st
	return c, nil
}

// commit writes next as the next version.
func (c *catalog) commit(ctx context.Context, next *catalogState) error {
	next.Version = c.state.Version + 1
	data, err := json.Marshal(next)
	if err != nil {
		return err
	}
	if err := c.store.CreateIfAbsent(ctx, catalogKey(next.Version), data); err != nil {
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			return fmt.Errorf("catalog: version %d was written by another process: %w", next.Version, err)
		}
		return fmt.Errorf("catalog: commit version %d: %w", next.Version, err)
	}
	prev := c.state.Version
	c.state = next
	if prev > 0 {
		_ = c.store.Delete(ctx, catalogKey(prev)) // best effort; loading takes the newest
	}
	return nil
}

// ReadCatalog returns the tables of the standalone catalog in store (none
// if it has no catalog), without opening any region: for offline tools.
func ReadCatalog(ctx context.Context, store objstore.Bucket) ([]Table, error) {
	c, err := loadCatalog(ctx, store)
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
