package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/rwload"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// With no region flag, the tables writes create spread over the cluster:
// in a cluster of three datanodes the first remote write creates __metrics
// with three regions and the first line-protocol write __lines with
// three, each table's regions on three different datanodes, and every
// sample, row, metric name and label value reads back through another
// datanode. Tables created without --regions (strata cluster
// create-table, strata table create) get three as well. A fourth datanode
// joining later changes no existing table's count (it is fixed at
// creation); a table created after it joined gets four.
func TestWriteCreatedTablesSpread(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	etcd := freePort(t)
	store := "file://" + t.TempDir()
	meta := start(t, "metasrv", "metasrv", "--data-dir", t.TempDir(), "--etcd-client-addr", etcd, "--grpc-addr", "127.0.0.1:0", "--store", store)
	datanode := func(id string) *proc {
		// No region flag. start returns once the datanode serves, which
		// is after it registered: the write below sees every one live.
		return start(t, id, "datanode", "--id", id, "--etcd-endpoints", "http://"+etcd,
			"--store", store, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	}
	var dns []*proc
	for _, id := range []string{"dn1", "dn2", "dn3"} {
		dns = append(dns, datanode(id))
	}
	c := admin(t, meta.grpc)
	// spread checks that table has want regions, each on another datanode.
	spread := func(st *pb.ClusterStatusResponse, table string, want int) {
		t.Helper()
		owners := map[string]bool{}
		n := 0
		for _, r := range st.Regions {
			if r.Table == table {
				n++
				owners[r.Owner] = true
			}
		}
		if n != want || len(owners) != want {
			t.Fatalf("%s: %d regions on %d datanodes, want %d on %d: %v", table, n, len(owners), want, want, st.Regions)
		}
	}

	// Remote write through dn1 creates __metrics.
	ctx := context.Background()
	g, err := rwload.NewGenerator(rwload.Shape{Names: 100, Series: 10, Labels: 2, Scrapes: 3, Interval: 15 * time.Second,
		Start: time.Now().Add(-time.Hour).Truncate(time.Millisecond), Batch: 500, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	write, _, err := rwload.Endpoints("http://" + dns[0].http)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := rwload.Run(ctx, g, rwload.Options{URL: write, Workers: 2}); err != nil || res.Failed != 0 {
		t.Fatalf("remote write: %+v, %v", res, err)
	}
	spread(placed(t, c, 3, 30*time.Second, ""), "__metrics", 3)

	// Line protocol through dn2 creates __lines (cpu is a logical table
	// in it).
	var b strings.Builder
	want := map[string]bool{}
	for i := range 200 {
		ts := int64(i+1) * int64(time.Second)
		fmt.Fprintf(&b, "cpu,host=h%d v=%d %d\n", i%40, i, ts)
		want[fmt.Sprintf("h%d/%d", i%40, ts)] = true
	}
	resp, err := http.Post("http://"+dns[1].http+"/write?db=x", "text/plain", strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("line-protocol write: %s", resp.Status)
	}
	st := placed(t, c, 6, 30*time.Second, "")
	spread(st, "__metrics", 3)
	spread(st, "__lines", 3)

	// Everything reads back through a datanode that did not take it: the
	// samples and series of every name, the names (label values of
	// __metrics' regions), the rows and the hosts of cpu.
	_, base, _ := rwload.Endpoints("http://" + dns[2].http)
	chk, err := rwload.Verify(ctx, g, rwload.VerifyOptions{URL: base, Settle: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !chk.OK() {
		t.Fatalf("remote-written data through dn3: %+v", chk)
	}
	if _, err := rwload.RunProbe(ctx, g, rwload.ProbeOptions{URL: base, LabelValues: 1, CountByName: 1}); err != nil {
		t.Fatal(err)
	}
	have, missing := readBack(t, dns[0].grpc, want)
	if missing != 0 || len(have) != len(want) {
		t.Fatalf("cpu through dn1: %d rows, %d of %d missing", len(have), missing, len(want))
	}
	var hosts struct{ Data []string }
	promGet(t, dns[2].http, "/api/v1/label/host/values?"+url.Values{"match[]": {"cpu_v"}}.Encode(), &hosts)
	if len(hosts.Data) != 40 || !slices.Contains(hosts.Data, "h39") {
		t.Fatalf("hosts of cpu through dn3: %v", hosts.Data)
	}

	// Created without --regions, through metasrv and through a datanode
	// (partitioned by a tag: every datanode announces it routes by one).
	if out, code := cli(t, "cluster", "create-table", "viameta", "--partition-by", "host", "--metasrv", meta.grpc); code != 0 || !strings.Contains(out, "3 regions, partitioned by host") {
		t.Fatalf("cluster create-table: exit %d: %s", code, out)
	}
	if out, code := cli(t, "table", "create", "viadn", "--partition-by", "host", "--server", dns[1].grpc); code != 0 || !strings.Contains(out, "3 regions, partitioned by host") {
		t.Fatalf("table create: exit %d: %s", code, out)
	}
	if out, code := cli(t, "table", "list", "-o", "csv", "--server", dns[2].grpc); code != 0 || !strings.Contains(out, "\nviadn,") || !strings.Contains(out, ",3,host,") {
		t.Fatalf("table list: exit %d: %s", code, out)
	}
	if out, code := cli(t, "table", "create", "named", "--regions", "2", "--server", dns[1].grpc); code != 0 || !strings.Contains(out, "2 regions") {
		t.Fatalf("table create --regions 2: exit %d: %s", code, out)
	}

	// A fourth datanode: the tables keep their counts; the next gets four.
	datanode("dn4")
	if out, code := cli(t, "cluster", "create-table", "after", "--metasrv", meta.grpc); code != 0 || !strings.Contains(out, "4 regions") {
		t.Fatalf("cluster create-table with four datanodes: exit %d: %s", code, out)
	}
	st = placed(t, c, 3+3+3+3+2+4, 30*time.Second, "")
	spread(st, "__metrics", 3)
	spread(st, "__lines", 3)
	spread(st, "after", 4)
}

// Live datanodes are the registrations under a lease; one leaving (a clean
// shutdown under way) and one whose lease is gone are not counted, nor is
// a record that is not a datanode's.
func TestLiveDatanodes(t *testing.T) {
	cli := clustertest.Etcd(t)
	ctx := context.Background()
	count := func(want int) {
		t.Helper()
		if n, err := cluster.LiveDatanodes(ctx, cli); err != nil || n != want {
			t.Fatalf("live datanodes: %d, %v; want %d", n, err, want)
		}
	}
	count(0)
	leases := map[string]clientv3.LeaseID{}
	for _, id := range []string{"a", "b", "c"} {
		g, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		leases[id] = g.ID
		data, _ := json.Marshal(cluster.NodeInfo{ID: id, Leaving: id == "c"})
		if _, err := cli.Put(ctx, cluster.DatanodesPrefix+id, string(data), clientv3.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Put(ctx, cluster.DatanodesPrefix+"junk", "not json"); err != nil {
		t.Fatal(err)
	}
	count(2)
	if _, err := cli.Revoke(ctx, leases["b"]); err != nil {
		t.Fatal(err)
	}
	count(1)
}
