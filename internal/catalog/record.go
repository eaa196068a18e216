package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unique"
)

// The catalog is a set of records, each a key with a small value, so that
// no value and no commit grows with the number of tables
// (docs/design-decisions.md, "One etcd key per table"):
//
//	tables/{name}  a table (JSON Table)
//	sweeps/{id}    a dropped table's pending final sweep (JSON {"swept_at"})
//	next_id        the id the next table gets (decimal)
//
// A backend stores each record under its key with the revision that last
// wrote it; a commit compares the revisions of the records it was computed
// from, so a change made from a stale copy never lands.
const (
	tablesDir = "tables/"
	sweepsDir = "sweeps/"
	nextIDKey = "next_id"
)

func tableKey(name string) string { return tablesDir + name }

func sweepKey(id uint32) string { return sweepsDir + strconv.FormatUint(uint64(id), 10) }

// Record is one record as a backend read it.
type Record struct {
	Key   string
	Value []byte // nil: the key does not exist
	// Mod is the revision that wrote Value (0: the key does not exist), At
	// the revision the record was read at (Mod ≤ At).
	Mod, At int64
}

// Cmp is a condition of a commit: the record at Key is still at Mod (0:
// it does not exist).
type Cmp struct {
	Key string
	Mod int64
}

// Op is a write of a commit: Value to Key, or a deletion if Value is nil.
type Op struct {
	Key   string
	Value []byte
}

// Backend keeps the catalog's records. Its revisions grow with every
// commit: etcd's revision for EtcdBackend, the catalog object's version
// for storecat.Backend.
type Backend interface {
	// Load reads every record, as of the revision it returns.
	Load(ctx context.Context) ([]Record, int64, error)
	// Get reads the records of keys, a missing one with a nil Value.
	Get(ctx context.Context, keys []string) ([]Record, error)
	// Commit applies ops as one atomic change if every record of cmps is
	// still at its Mod, and returns the change's revision. If one is not,
	// it returns ErrConflict and the current records of cmps' keys. Any
	// other error leaves it unknown whether the change landed.
	Commit(ctx context.Context, cmps []Cmp, ops []Op) (int64, []Record, error)
	// Head is the revision of the newest commit (0: none yet): once the
	// catalog's copy is at Head, it holds every commit that completed
	// before Head was read.
	Head(ctx context.Context) (int64, error)
}

// Watcher is a Backend that streams its changes, so a Catalog's copy is
// kept current without reading everything again.
type Watcher interface {
	// Watch passes every change after rev to apply, in revision order,
	// each batch with the revision it completes (every change up to it has
	// been passed), until ctx ends or the watch fails: ErrCompacted if the
	// changes after rev are no longer kept.
	Watch(ctx context.Context, rev int64, apply func(recs []Record, rev int64)) error
}

// ErrCompacted: a Watcher no longer has the changes asked for; the catalog
// loads every record again.
var ErrCompacted = errors.New("catalog: the changes asked for are compacted away")

// value is a record's decoded value; which field is set follows from its key.
type value struct {
	table   *Table    // tables/{name}; nil if deleted. Never changed once decoded.
	sweep   uint32    // sweeps/{id}: the id
	sweptAt time.Time // sweeps/{id}: zero if deleted
	nextID  uint32    // next_id: 0 if absent (the first id is 1)
}

type sweepValue struct {
	SweptAt time.Time `json:"swept_at"`
}

// decode decodes the record of key holding data (nil: deleted). ok is
// false for a key the catalog does not know (written by a newer Strata).
func decode(key string, data []byte) (v value, ok bool, err error) {
	switch {
	case strings.HasPrefix(key, tablesDir):
		if data == nil {
			return v, true, nil
		}
		v.table = new(Table)
		if err := json.Unmarshal(data, v.table); err != nil {
			return v, true, fmt.Errorf("catalog: record %s is corrupt: %w", key, err)
		}
		if v.table.Name != key[len(tablesDir):] {
			return v, true, fmt.Errorf("catalog: record %s holds table %q", key, v.table.Name)
		}
		// A copy holds every table: a role and a type are one string each
		// for all of them, not one per column.
		for i := range v.table.Schema.Columns {
			col := &v.table.Schema.Columns[i]
			col.Role, col.Type = unique.Make(col.Role).Value(), unique.Make(col.Type).Value()
		}
		return v, true, nil
	case strings.HasPrefix(key, sweepsDir):
		id, err := strconv.ParseUint(key[len(sweepsDir):], 10, 32)
		if err != nil {
			return v, true, fmt.Errorf("catalog: record %s: bad table id", key)
		}
		v.sweep = uint32(id)
		if data == nil {
			return v, true, nil
		}
		var s sweepValue
		if err := json.Unmarshal(data, &s); err != nil {
			return v, true, fmt.Errorf("catalog: record %s is corrupt: %w", key, err)
		}
		v.sweptAt = s.SweptAt
		return v, true, nil
	case key == nextIDKey:
		if data == nil {
			return v, true, nil
		}
		n, err := strconv.ParseUint(string(data), 10, 32)
		if err != nil || n == 0 {
			return v, true, fmt.Errorf("catalog: record %s is corrupt: %q", key, data)
		}
		v.nextID = uint32(n)
		return v, true, nil
	}
	return v, false, nil
}

func tableOp(t *Table) (Op, error) {
	data, err := json.Marshal(t)
	if err != nil {
		return Op{}, fmt.Errorf("catalog: encode table %s: %w", t.Name, err)
	}
	return Op{Key: tableKey(t.Name), Value: data}, nil
}

func sweepOp(id uint32, at time.Time) Op {
	data, _ := json.Marshal(sweepValue{SweptAt: at}) // a time always encodes
	return Op{Key: sweepKey(id), Value: data}
}

func nextIDOp(n uint32) Op {
	return Op{Key: nextIDKey, Value: strconv.AppendUint(nil, uint64(n), 10)}
}

// Whole is the whole catalog as one JSON value: the format of a catalog
// object in the store (storecat.Backend), and of the legacy etcd key that
// held the catalog before it was one key per table (LegacyEtcdKey).
type Whole struct {
	Version uint64               `json:"version"`
	NextID  uint32               `json:"next_id"`
	Tables  map[string]*Table    `json:"tables"`
	Sweeps  map[uint32]time.Time `json:"sweeps,omitempty"`
	// Mods are the versions that last wrote each record, by key; a record
	// not named was written at version 1 or before (storecat only).
	Mods map[string]int64 `json:"mods,omitempty"`
}

// ParseWhole parses a Whole.
func ParseWhole(data []byte) (*Whole, error) {
	st := &Whole{}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, err
	}
	if st.Tables == nil {
		st.Tables = map[string]*Table{}
	}
	for name, t := range st.Tables {
		if t == nil || t.Name != name {
			return nil, fmt.Errorf("table %q is recorded under %q", t.Name, name)
		}
	}
	return st, nil
}

// Record returns key's record (a nil Value if there is none).
func (st *Whole) Record(key string) Record {
	r := Record{Key: key, At: int64(st.Version)}
	v, _, _ := decode(key, nil)
	switch {
	case strings.HasPrefix(key, tablesDir):
		if t := st.Tables[key[len(tablesDir):]]; t != nil {
			op, _ := tableOp(t) // it was decoded from JSON, so it encodes
			r.Value = op.Value
		}
	case strings.HasPrefix(key, sweepsDir):
		if at, ok := st.Sweeps[v.sweep]; ok {
			r.Value = sweepOp(v.sweep, at).Value
		}
	case key == nextIDKey:
		if st.NextID > 0 {
			r.Value = nextIDOp(st.NextID).Value
		}
	}
	if r.Value != nil {
		r.Mod = 1
		if m, ok := st.Mods[key]; ok {
			r.Mod = m
		}
	}
	return r
}

// Records returns every record.
func (st *Whole) Records() []Record {
	keys := make([]string, 0, len(st.Tables)+len(st.Sweeps)+1)
	for name := range st.Tables {
		keys = append(keys, tableKey(name))
	}
	for id := range st.Sweeps {
		keys = append(keys, sweepKey(id))
	}
	if st.NextID > 0 {
		keys = append(keys, nextIDKey)
	}
	return st.Get(keys)
}

// Get returns the records of keys.
func (st *Whole) Get(keys []string) []Record {
	out := make([]Record, len(keys))
	for i, k := range keys {
		out[i] = st.Record(k)
	}
	return out
}

// Apply applies op as written at version.
func (st *Whole) Apply(op Op, version int64) error {
	v, ok, err := decode(op.Key, op.Value)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("catalog: unknown record %s", op.Key)
	}
	switch {
	case strings.HasPrefix(op.Key, tablesDir):
		if v.table == nil {
			delete(st.Tables, op.Key[len(tablesDir):])
		} else {
			st.Tables[v.table.Name] = v.table
		}
	case strings.HasPrefix(op.Key, sweepsDir):
		if op.Value == nil {
			delete(st.Sweeps, v.sweep)
		} else {
			if st.Sweeps == nil {
				st.Sweeps = map[uint32]time.Time{}
			}
			st.Sweeps[v.sweep] = v.sweptAt
		}
	case op.Key == nextIDKey:
		st.NextID = v.nextID
	}
	if st.Mods == nil {
		st.Mods = map[string]int64{}
	}
	if op.Value == nil {
		delete(st.Mods, op.Key)
	} else {
		st.Mods[op.Key] = version
	}
	return nil
}
