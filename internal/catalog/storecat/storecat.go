// Package storecat keeps a catalog in the object store: the format of a
// store written by a standalone process before the catalog moved to etcd.
// It serves offline use only: fsck reads a store's catalog with it
// (Read), and a standalone moves a catalog it finds there into etcd
// (Import). It is apart from internal/catalog so that the catalog's users
// (the wire conversions, metasrv) link no object-store client.
package storecat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/objstore"
)

// Prefix is where a catalog kept in the object store lives (a store
// written by a standalone process before the catalog moved to etcd). Each
// version is one object written with create-if-absent:
//
//	catalog/{version:020}.json
//
// Versions below the newest are deleted after it lands; the newest is never
// deleted, so the catalog always has an owner: itself.
const Prefix = "catalog/"

func storeKey(v uint64) string { return fmt.Sprintf("%s%020d.json", Prefix, v) }

// Backend keeps the catalog in the object store, the whole catalog in
// each version's object (catalog.Whole), so each commit reads and writes
// all of it. A cluster's catalog is in etcd, one key per table
// (catalog.EtcdBackend).
type Backend struct{ Store objstore.Bucket }

var _ catalog.Backend = Backend{}

// newest returns the newest version (0: none).
func (c Backend) newest(ctx context.Context) (uint64, error) {
	objs, err := objstore.ListAll(ctx, c.Store, Prefix, 1000)
	if err != nil {
		return 0, fmt.Errorf("catalog: list: %w", err)
	}
	var newest uint64
	for _, o := range objs {
		name := strings.TrimSuffix(strings.TrimPrefix(o.Key, Prefix), ".json")
		if v, err := strconv.ParseUint(name, 10, 64); err == nil && v > newest {
			newest = v
		}
	}
	return newest, nil
}

// read reads the newest version (an empty catalog at version 0 if none).
func (c Backend) read(ctx context.Context) (*catalog.Whole, error) {
	v, err := c.newest(ctx)
	if err != nil || v == 0 {
		return &catalog.Whole{Tables: map[string]*catalog.Table{}}, err
	}
	data, err := c.Store.Get(ctx, storeKey(v))
	if err != nil {
		return nil, fmt.Errorf("catalog: read version %d: %w", v, err)
	}
	st, err := catalog.ParseWhole(data)
	if err == nil && st.Version != v {
		err = fmt.Errorf("it says version %d", st.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: version %d is corrupt: %w", v, err)
	}
	return st, nil
}

// Load reads the newest version.
func (c Backend) Load(ctx context.Context) ([]catalog.Record, int64, error) {
	st, err := c.read(ctx)
	if err != nil {
		return nil, 0, err
	}
	return st.Records(), int64(st.Version), nil
}

// Get reads keys' records from the newest version.
func (c Backend) Get(ctx context.Context, keys []string) ([]catalog.Record, error) {
	st, err := c.read(ctx)
	if err != nil {
		return nil, err
	}
	return st.Get(keys), nil
}

// Commit reads the newest version, checks cmps against it, and creates the
// next version with ops applied; then it deletes the version it read.
func (c Backend) Commit(ctx context.Context, cmps []catalog.Cmp, ops []catalog.Op) (int64, []catalog.Record, error) {
	st, err := c.read(ctx)
	if err != nil {
		return 0, nil, err
	}
	keys := make([]string, len(cmps))
	stale := false
	for i, cmp := range cmps {
		keys[i] = cmp.Key
		stale = stale || st.Record(cmp.Key).Mod != cmp.Mod
	}
	if stale {
		return 0, st.Get(keys), catalog.ErrConflict
	}
	prev := st.Version
	st.Version++
	for _, op := range ops {
		if err := st.Apply(op, int64(st.Version)); err != nil {
			return 0, nil, err
		}
	}
	data, err := json.Marshal(st)
	if err != nil {
		return 0, nil, err
	}
	if err := c.Store.CreateIfAbsent(ctx, storeKey(st.Version), data); err != nil {
		if errors.Is(err, objstore.ErrPreconditionFailed) { // another process committed this version first
			now, err := c.Get(ctx, keys)
			if err != nil {
				return 0, nil, err
			}
			return 0, now, catalog.ErrConflict
		}
		return 0, nil, fmt.Errorf("catalog: commit version %d: %w", st.Version, err)
	}
	if prev > 0 {
		_ = c.Store.Delete(ctx, storeKey(prev)) // best effort; loading takes the newest
	}
	return int64(st.Version), nil, nil
}

// Head is the newest version.
func (c Backend) Head(ctx context.Context) (int64, error) {
	v, err := c.newest(ctx)
	return int64(v), err
}

// Read returns the tables of a catalog kept in store (none if it has
// none), by id, without opening anything else: for offline tools.
func Read(ctx context.Context, store objstore.Bucket) ([]catalog.Table, error) {
	c, err := catalog.Open(ctx, Backend{store}, 1)
	if err != nil {
		return nil, err
	}
	out := append(c.List(false), c.List(true)...)
	slices.SortFunc(out, func(a, b catalog.Table) int { return int(a.ID) - int(b.ID) })
	return out, nil
}

// Import copies the catalog store keeps into etcd, if etcd has none in
// either layout, and reports whether it did (catalog.Import). The store's
// copy stays: the caller deletes it once it is imported.
func Import(ctx context.Context, cli *clientv3.Client, store objstore.Bucket) (bool, error) {
	return catalog.Import(ctx, cli, Backend{store}.Load)
}
