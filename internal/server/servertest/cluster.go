package servertest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/metasrv"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/tlsutil"
)

// ClusterOptions tune a test's cluster.
type ClusterOptions struct {
	// DefaultRegions is the region count, for the metasrv and every
	// datanode, of tables created without one (0: one per live datanode
	// at the table's creation, as in a cluster started without a region
	// flag).
	DefaultRegions uint32
	// Tune adjusts every datanode's engine options (what the binaries
	// cannot be told).
	Tune func(*datanode.Options)
	// Etcd, if set, gives the etcd the cluster runs on: its client
	// endpoints, and what closes it (and deletes its data) when the
	// cluster stops (clustertest.EtcdPool.Get). Default: a new embedded
	// etcd.
	Etcd func(testing.TB) (endpoints []string, stop func())
	// Config, if set, adjusts every datanode's configuration.
	Config func(*server.Config)
}

// Cluster is a cluster running in this process: an embedded etcd, a
// metasrv and datanodes.
type Cluster struct {
	// Datanodes are dn1, dn2, … in order.
	Datanodes []*server.Server
	// Meta is the metasrv, its admin gRPC served at MetasrvAddr.
	Meta        *metasrv.Server
	MetasrvAddr string
	t           testing.TB
	dir         string // the datanodes' directories and the store, and etcd's unless given
	stopMeta    func()
	closeEtcd   []func() // the client, then etcd
	stopped     bool
}

// StartCluster starts, in this process, an embedded etcd, a metasrv and n
// datanodes (dn1, dn2, …) on one file:// store, under a new temporary
// directory; it stops at the test's end unless Stop ran first. Every
// datanode is registered (live) once it returns.
func StartCluster(t testing.TB, n int, o ClusterOptions) *Cluster {
	t.Helper()
	c := &Cluster{t: t, dir: t.TempDir()}
	t.Cleanup(func() {
		if !c.stopped {
			c.Stop()
		}
	})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var endpoints []string
	if o.Etcd != nil {
		var stop func()
		endpoints, stop = o.Etcd(t)
		c.closeEtcd = []func(){stop}
	} else {
		e, err := cluster.StartEtcd(filepath.Join(c.dir, "etcd"), "", tlsutil.Config{}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		endpoints, c.closeEtcd = e.Endpoints, []func(){e.Close}
	}
	cli, err := cluster.Connect(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	c.closeEtcd = append([]func(){func() { _ = cli.Close() }}, c.closeEtcd...)
	c.Meta, c.stopMeta, c.MetasrvAddr = startMetasrv(t, cli, o.DefaultRegions)
	store := filepath.Join(c.dir, "store")
	if err := os.Mkdir(store, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		name := fmt.Sprint("dn", i+1)
		dir := filepath.Join(c.dir, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := server.Config{NodeID: name, Etcd: endpoints, Store: "file://" + store, DataDir: dir,
			DefaultRegions: o.DefaultRegions, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Logger: quiet, Tune: o.Tune}
		if o.Config != nil {
			o.Config(&cfg)
		}
		s, err := server.Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		c.Datanodes = append(c.Datanodes, s)
	}
	return c
}

// Stop stops the metasrv first (no region moves while the datanodes
// leave), then the datanodes together (each flushes its regions), then
// etcd, and deletes the cluster's directory. A datanode's shutdown error
// is logged, not failed: tests break their clusters on purpose.
func (c *Cluster) Stop() {
	c.t.Helper()
	c.stopped = true
	if c.stopMeta != nil {
		c.stopMeta()
	}
	var wg sync.WaitGroup
	errs := make([]error, len(c.Datanodes))
	for i, s := range c.Datanodes {
		wg.Go(func() { errs[i] = s.Shutdown(context.Background()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			c.t.Logf("dn%d: shutdown: %v", i+1, err)
		}
	}
	for _, f := range c.closeEtcd {
		f()
	}
	if err := os.RemoveAll(c.dir); err != nil {
		c.t.Error(err)
	}
}

// Metasrv runs a metasrv in this process on etcd cli until the test ends;
// defaultRegions is its region count of tables created without one (0:
// one per live datanode).
func Metasrv(t testing.TB, cli *clientv3.Client, defaultRegions uint32) {
	t.Helper()
	_, stop, _ := startMetasrv(t, cli, defaultRegions)
	t.Cleanup(stop)
}

// startMetasrv starts a metasrv and returns it, what stops it and its
// admin address.
func startMetasrv(t testing.TB, cli *clientv3.Client, defaultRegions uint32) (meta *metasrv.Server, stop func(), addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	meta, err = metasrv.Start(context.Background(), metasrv.Options{Client: cli, Addr: ln.Addr().String(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DefaultRegions: defaultRegions})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	meta.Register(g)
	go func() { _ = g.Serve(ln) }()
	return meta, func() { g.Stop(); meta.Close() }, ln.Addr().String()
}

// Counter sums dn's counter name over its series whose labels keep
// takes.
func Counter(t testing.TB, dn *server.Server, name string, keep func(labels map[string]string) bool) float64 {
	t.Helper()
	mfs, err := dn.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if keep(labels) {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// PeerBytes is how many bytes of gRPC messages dn sent to or received from
// other datanodes (direction "sent" or "received") in calls of the
// methods whose names end with method (strata_peer_grpc_bytes_total).
func PeerBytes(t testing.TB, dn *server.Server, direction, method string) float64 {
	t.Helper()
	return Counter(t, dn, "strata_peer_grpc_bytes_total", func(l map[string]string) bool {
		return l["direction"] == direction && strings.HasSuffix(l["method"], method)
	})
}
