package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdKey is the etcd key of the catalog (JSON State; docs/cluster.md).
const EtcdKey = "/strata/catalog"

// EtcdBackend keeps the catalog in one etcd key; every commit is a
// transaction that compares the key's mod revision with the one loaded.
type EtcdBackend struct {
	cli *clientv3.Client

	mu      sync.Mutex
	version uint64 // last loaded or committed
	modRev  int64  // its mod revision (0: the key does not exist)
}

// NewEtcdBackend is the catalog backend over cli.
func NewEtcdBackend(cli *clientv3.Client) *EtcdBackend { return &EtcdBackend{cli: cli} }

var _ Backend = (*EtcdBackend)(nil)

// Load reads the catalog.
func (c *EtcdBackend) Load(ctx context.Context) ([]byte, uint64, error) {
	resp, err := c.cli.Get(ctx, EtcdKey)
	if err != nil {
		return nil, 0, fmt.Errorf("catalog: read from etcd: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(resp.Kvs) == 0 {
		c.version, c.modRev = 0, 0
		return nil, 0, nil
	}
	kv := resp.Kvs[0]
	var v struct {
		Version uint64 `json:"version"`
	}
	if err := json.Unmarshal(kv.Value, &v); err != nil {
		return nil, 0, fmt.Errorf("catalog: corrupt value in etcd: %w", err)
	}
	c.version, c.modRev = v.Version, kv.ModRevision
	return kv.Value, v.Version, nil
}

// Commit stores version if the key is still at the revision loaded.
func (c *EtcdBackend) Commit(ctx context.Context, prev, version uint64, data []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev != c.version {
		return fmt.Errorf("%w: version %d is not the one loaded (%d)", ErrConflict, prev, c.version)
	}
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(EtcdKey), "=", c.modRev)).
		Then(clientv3.OpPut(EtcdKey, string(data))).
		Commit()
	if err != nil {
		return fmt.Errorf("catalog: commit version %d to etcd: %w", version, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: version %d", ErrConflict, version)
	}
	c.version, c.modRev = version, resp.Header.Revision
	return nil
}
