package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/stratadb/strata/internal/datanode"
)

// Etcd is an embedded single-node etcd.
type Etcd struct {
	e         *embed.Etcd
	Endpoints []string
}

// freeAddr returns a loopback address with a free port.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartEtcd starts an embedded etcd with its data under dir, serving
// clients on clientAddr (host:port; empty: a free loopback port).
func StartEtcd(dir, clientAddr string, log *slog.Logger) (*Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "metasrv"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if clientAddr == "" {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		clientAddr = a
	}
	peer, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cu, _ := url.Parse("http://" + clientAddr)
	pu, _ := url.Parse("http://" + peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd not ready after 60s")
	}
	log.Info("embedded etcd ready", "client", cu.String(), "dir", dir)
	return &Etcd{e: e, Endpoints: []string{cu.String()}}, nil
}

// Close stops etcd.
func (e *Etcd) Close() { e.e.Close() }

// Connect opens a client to endpoints.
func Connect(endpoints []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd %v: %w", endpoints, err)
	}
	return cli, nil
}

// EtcdCatalog keeps the table catalog in one etcd key; every commit is a
// transaction that compares the key's mod revision with the one loaded.
type EtcdCatalog struct {
	cli *clientv3.Client

	mu      sync.Mutex
	version uint64 // last loaded or committed
	modRev  int64  // its mod revision (0: the key does not exist)
}

// NewEtcdCatalog is the catalog backend over cli.
func NewEtcdCatalog(cli *clientv3.Client) *EtcdCatalog { return &EtcdCatalog{cli: cli} }

var _ datanode.CatalogBackend = (*EtcdCatalog)(nil)

// Load reads the catalog.
func (c *EtcdCatalog) Load(ctx context.Context) ([]byte, uint64, error) {
	resp, err := c.cli.Get(ctx, CatalogKey)
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
func (c *EtcdCatalog) Commit(ctx context.Context, prev, version uint64, data []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev != c.version {
		return fmt.Errorf("%w: version %d is not the one loaded (%d)", datanode.ErrCatalogConflict, prev, c.version)
	}
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(CatalogKey), "=", c.modRev)).
		Then(clientv3.OpPut(CatalogKey, string(data))).
		Commit()
	if err != nil {
		return fmt.Errorf("catalog: commit version %d to etcd: %w", version, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: version %d", datanode.ErrCatalogConflict, version)
	}
	c.version, c.modRev = version, resp.Header.Revision
	return nil
}
