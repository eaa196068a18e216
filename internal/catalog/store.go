package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/stratadb/strata/internal/objstore"
)

// StorePrefix is where a catalog kept in the object store lives (a store
// written by a standalone process before the catalog moved to etcd). Each
// version is one object written with create-if-absent:
//
//	catalog/{version:020}.json
//
// Versions below the newest are deleted after it lands; the newest is never
// deleted, so the catalog always has an owner: itself.
const StorePrefix = "catalog/"

func storeKey(v uint64) string { return fmt.Sprintf("%s%020d.json", StorePrefix, v) }

// StoreBackend keeps the catalog in the object store.
type StoreBackend struct{ Store objstore.Bucket }

var _ Backend = StoreBackend{}

// Load reads the newest version.
func (c StoreBackend) Load(ctx context.Context) ([]byte, uint64, error) {
	objs, err := objstore.ListAll(ctx, c.Store, StorePrefix, 1000)
	if err != nil {
		return nil, 0, fmt.Errorf("catalog: list: %w", err)
	}
	var newest uint64
	for _, o := range objs {
		name := strings.TrimSuffix(strings.TrimPrefix(o.Key, StorePrefix), ".json")
		if v, err := strconv.ParseUint(name, 10, 64); err == nil && v > newest {
			newest = v
		}
	}
	if newest == 0 {
		return nil, 0, nil
	}
	data, err := c.Store.Get(ctx, storeKey(newest))
	if err != nil {
		return nil, 0, fmt.Errorf("catalog: read version %d: %w", newest, err)
	}
	return data, newest, nil
}

// Commit creates version and deletes prev.
func (c StoreBackend) Commit(ctx context.Context, prev, version uint64, data []byte) error {
	if err := c.Store.CreateIfAbsent(ctx, storeKey(version), data); err != nil {
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			return fmt.Errorf("%w: version %d was written first", ErrConflict, version)
		}
		return fmt.Errorf("catalog: commit version %d: %w", version, err)
	}
	if prev > 0 {
		_ = c.Store.Delete(ctx, storeKey(prev)) // best effort; loading takes the newest
	}
	return nil
}

// ReadStore returns the tables of a catalog kept in store (none if it has
// none), by id, without opening anything else: for offline tools.
func ReadStore(ctx context.Context, store objstore.Bucket) ([]Table, error) {
	c, err := Open(ctx, StoreBackend{store}, 1)
	if err != nil {
		return nil, err
	}
	st := c.State()
	out := append(st.List(false), st.List(true)...)
	slices.SortFunc(out, func(a, b Table) int { return int(a.ID) - int(b.ID) })
	return out, nil
}
