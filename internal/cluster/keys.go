// Package cluster is what metasrv and the datanodes share about etcd: the
// key layout, the records stored under it (NodeInfo, Assignment), and the
// embedded etcd metasrv runs and the client both connect with. The catalog
// backend is in internal/catalog, the datanode's side (lease, assignments,
// routing) in internal/datanode/agent.
//
// Key layout (docs/cluster.md):
//
//	/strata/catalog/tables/{name}    a table of the catalog (JSON; internal/catalog)
//	/strata/catalog/sweeps/{id}      a dropped table's pending final sweep
//	/strata/catalog/next_id          the next table id
//	/strata/catalog/head             written by every catalog commit
//	/strata/datanodes/{id}           a live datanode (JSON NodeInfo), under its lease
//	/strata/regions/{table}/{region} a region's assignment (JSON Assignment)
//	/strata/election                 metasrv leader election
//	/strata/gc/options               GC scheduler options (JSON)
//	/strata/gc/regions/{table}/{region} per-region GC state (JSON)
package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/layout"
)

// Keys.
const (
	Prefix          = "/strata/"
	CatalogPrefix   = catalog.EtcdPrefix
	DatanodesPrefix = Prefix + "datanodes/"
	RegionsPrefix   = Prefix + "regions/"
	ElectionPrefix  = Prefix + "election"
	GCOptionsKey    = Prefix + "gc/options"
	GCStatePrefix   = Prefix + "gc/regions/"
)

// Defaults.
const (
	DefaultHeartbeat = 3 * time.Second
	DefaultLease     = 10 * time.Second
)

// NodeInfo is a registered datanode.
type NodeInfo struct {
	ID       string    `json:"id"`
	GRPCAddr string    `json:"grpc_addr"`
	HTTPAddr string    `json:"http_addr,omitempty"`
	Started  time.Time `json:"started"`
	Version  string    `json:"version,omitempty"` // its build (internal/version)
	Revision string    `json:"revision,omitempty"`
	// Forward is the newest encoding of forwarded writes the datanode
	// reads (internal/fwdbatch's versions); 0, an older build's: version 1.
	Forward int `json:"forward,omitempty"`
	// Partition: the datanode routes the series of a table partitioned by
	// a tag by that tag's value (catalog.Table.Partition); an older build
	// routes every table's by the whole key.
	Partition bool `json:"partition,omitempty"`
	// Leaving is set just before the datanode revokes its lease on a clean
	// shutdown, so metasrv tells a departure from a lease that expired.
	Leaving bool `json:"leaving,omitempty"`
}

// MetasrvPrefix holds one key per running metasrv replica (MetasrvInfo),
// under its election session's lease.
const MetasrvPrefix = Prefix + "metasrvs/"

// MetasrvInfo describes a metasrv replica.
type MetasrvInfo struct {
	Addr     string    `json:"addr"`
	Version  string    `json:"version"`
	Revision string    `json:"revision"`
	Started  time.Time `json:"started"`
}

// Assignment places a region on a datanode. Gen grows with every
// assignment of the region.
type Assignment struct {
	Owner string    `json:"owner"`
	Gen   uint64    `json:"gen"`
	At    time.Time `json:"at"`
}

// ReadPlacement reads the live datanodes and the region assignments, at
// one revision, which it returns. It reads nothing else under Prefix: the
// catalog, one key per table, is read by its own package.
func ReadPlacement(ctx context.Context, cli *clientv3.Client) ([]*mvccpb.KeyValue, int64, error) {
	resp, err := cli.Txn(ctx).Then(clientv3.OpGet(DatanodesPrefix, clientv3.WithPrefix()), clientv3.OpGet(RegionsPrefix, clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, 0, fmt.Errorf("read placement: %w", err)
	}
	var kvs []*mvccpb.KeyValue
	for _, r := range resp.Responses {
		kvs = append(kvs, r.GetResponseRange().GetKvs()...)
	}
	return kvs, resp.Header.Revision, nil
}

// LiveDatanodes counts the datanodes registered now: each registration
// lives under its datanode's lease, so it is gone once the lease expired
// or was revoked; one marked Leaving (a clean shutdown under way) is not
// counted. A table created without a region count gets one region per
// live datanode (catalog.DefaultRegionCount).
func LiveDatanodes(ctx context.Context, cli *clientv3.Client) (int, error) {
	nodes, err := liveNodes(ctx, cli)
	return len(nodes), err
}

func liveNodes(ctx context.Context, cli *clientv3.Client) ([]NodeInfo, error) {
	resp, err := cli.Get(ctx, DatanodesPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list live datanodes: %w", err)
	}
	var nodes []NodeInfo
	for _, kv := range resp.Kvs {
		var info NodeInfo
		if json.Unmarshal(kv.Value, &info) == nil && !info.Leaving {
			nodes = append(nodes, info)
		}
	}
	return nodes, nil
}

// ErrNoPartitioning: a live datanode is of a build that routes every
// table's series by the whole key, so a table partitioned by a tag cannot
// be created yet (its rows would land in regions its queries skip).
var ErrNoPartitioning = errors.New("a live datanode does not route by partition tag")

// CheckPartitioning returns ErrNoPartitioning, naming the datanode, if a
// live datanode's build does not route by partition tag
// (NodeInfo.Partition): a rolling upgrade still under way.
func CheckPartitioning(ctx context.Context, cli *clientv3.Client) error {
	nodes, err := liveNodes(ctx, cli)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if !n.Partition {
			return fmt.Errorf("%w: datanode %s runs %s; upgrade it first", ErrNoPartitioning, n.ID, cmp.Or(n.Version, "an older build"))
		}
	}
	return nil
}

// RegionKey is the assignment key of a region.
func RegionKey(id layout.RegionID) string {
	return fmt.Sprintf("%s%d/%d", RegionsPrefix, id.Table, id.Region)
}

// GCStateKey is the GC state key of a region.
func GCStateKey(id layout.RegionID) string {
	return fmt.Sprintf("%s%d/%d", GCStatePrefix, id.Table, id.Region)
}

// ParseRegionKey parses a key under prefix ("{table}/{region}" after it).
func ParseRegionKey(prefix, key string) (layout.RegionID, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return layout.RegionID{}, false
	}
	t, r, ok := strings.Cut(rest, "/")
	tn, err1 := strconv.ParseUint(t, 10, 32)
	rn, err2 := strconv.ParseUint(r, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return layout.RegionID{}, false
	}
	return layout.RegionID{Table: uint32(tn), Region: uint32(rn)}, true
}

// DropFencesPrefix holds, per dropped table, the WAL stream fences its
// regions recorded, for the drop's final sweep to delete (JSON list of
// keys).
const DropFencesPrefix = Prefix + "drop-fences/"

// DropFencesKey is the key of a dropped table's stream fences.
func DropFencesKey(table uint32) string { return fmt.Sprintf("%s%d", DropFencesPrefix, table) }
