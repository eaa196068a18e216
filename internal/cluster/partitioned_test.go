package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/testseed"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// askedRemote records the regions a datanode asked other datanodes about
// (scans, column scans, label look-ups), passing every call on.
type askedRemote struct {
	datanode.Remote
	mu    sync.Mutex
	asked []uint32
}

func (r *askedRemote) ask(id layout.RegionID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, id.Region)
}

func (r *askedRemote) take() []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.asked
	r.asked = nil
	slices.Sort(a)
	return slices.Compact(a)
}

func (r *askedRemote) Scan(ctx context.Context, table string, id layout.RegionID, req scan.Request) (row.Iterator, error) {
	r.ask(id)
	return r.Remote.Scan(ctx, table, id, req)
}

func (r *askedRemote) ScanColumns(ctx context.Context, table string, id layout.RegionID, req scan.Request, emit func(*scan.Column) error) error {
	r.ask(id)
	return r.Remote.ScanColumns(ctx, table, id, req, emit)
}

func (r *askedRemote) RegionTags(ctx context.Context, table string, id layout.RegionID, q datanode.TagQuery) ([]string, error) {
	r.ask(id)
	return r.Remote.RegionTags(ctx, table, id, q)
}

// A table partitioned by hostname over three datanodes: a query naming
// hosts (equality or an alternation) asks only the owners of those hosts'
// regions, none if dn1 holds them all, and answers what a standalone
// holding the same rows unpartitioned answers; a query naming no host
// asks every other owner. Rows written through any datanode land in
// their host's region.
func TestPartitionedTableAsksOnlyTheHostsOwners(t *testing.T) {
	rng := rand.New(rand.NewSource(int64(testseed.Seed(t))))
	var asked *askedRemote
	var once sync.Once
	dns := datanodes(t, 3, func(o *datanode.Options) {
		once.Do(func() { asked = &askedRemote{Remote: o.Remote}; o.Remote = asked })
	})
	ctx := context.Background()
	tb, err := dns[1].Engine().CreateTable(ctx, catalog.TableSpec{Name: "cpu", Regions: 3, Partition: "hostname"})
	if err != nil {
		t.Fatal(err)
	}
	hosted := placedOn(t, dns, "cpu")
	if len(hosted[0]) != 1 {
		t.Fatalf("dn1 hosts regions %v of cpu, want one", hosted[0])
	}
	local := hosted[0][0].Region
	sa := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	if _, err := sa.Engine().CreateTable(ctx, catalog.TableSpec{Name: "cpu", Regions: 1}); err != nil {
		t.Fatal(err)
	}
	servertest.WaitHosted(t, sa.Engine(), "cpu")

	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var hosts []string
	for h := range 24 {
		hosts = append(hosts, fmt.Sprint("host_", h))
		var points []row.Point
		for core := range 2 {
			for i := range 60 {
				points = append(points, row.Point{
					Tags:   []row.Tag{{Name: "hostname", Value: hosts[h]}, {Name: "core", Value: fmt.Sprint(core)}, {Name: "rack", Value: fmt.Sprint(h % 5)}},
					TS:     base.Add(time.Duration(i) * 10 * time.Second).UnixNano(),
					Fields: []row.Field{{Name: "usage_user", Value: row.FloatValue(float64(rng.Intn(1000)) / 10)}},
				})
			}
		}
		for _, e := range []*datanode.Engine{dns[rng.Intn(3)].Engine(), sa.Engine()} {
			if _, err := e.Write(ctx, "cpu", slices.Clone(points), datanode.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	regionOf := func(h string) uint32 { return layout.RouteValue(h, 3) }
	// Each datanode holds its region's hosts' series, all of them.
	for i, dn := range dns {
		id := hosted[i][0]
		sc, err := dn.Engine().ScanRegion(ctx, "cpu", id, scan.Request{Start: base.UnixNano(), End: base.Add(time.Hour).UnixNano(), SeriesOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		series := 0
		for sc.Next() {
			for _, en := range sc.Batch() {
				if h := row.SeriesTag(en.Series, "hostname"); regionOf(h) != id.Region {
					t.Fatalf("dn%d's region %s holds %s, of region %d", i+1, id, h, regionOf(h))
				}
				series++
			}
		}
		sc.Close()
		want := 0
		for _, h := range hosts {
			if regionOf(h) == id.Region {
				want += 2
			}
		}
		if series != want {
			t.Fatalf("dn%d's region %s holds %d series, want %d", i+1, id, series, want)
		}
	}

	get := func(addr, path string, q url.Values) string {
		t.Helper()
		return labelGet(t, addr, path+"?"+q.Encode())
	}
	// remote is the regions of hs that dn1 does not host.
	remote := func(hs ...string) []uint32 {
		var out []uint32
		for _, h := range hs {
			if n := regionOf(h); n != local {
				out = append(out, n)
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	var here, there string
	for _, h := range hosts {
		if regionOf(h) == local && here == "" {
			here = h
		}
		if regionOf(h) != local && there == "" {
			there = h
		}
	}
	rangeQ := func(expr string) url.Values {
		return url.Values{"query": {expr}, "start": {fmt.Sprint(base.Unix())}, "end": {fmt.Sprint(base.Add(10 * time.Minute).Unix())}, "step": {"60"}}
	}
	for _, c := range []struct {
		path  string
		q     url.Values
		hosts []string // named; nil: none
	}{
		{"/api/v1/query_range", rangeQ(fmt.Sprintf(`max(max_over_time(cpu_usage_user{hostname=~%q}[1m]))`, here)), []string{here}},
		{"/api/v1/query_range", rangeQ(fmt.Sprintf(`max(max_over_time(cpu_usage_user{hostname=~%q}[1m]))`, there)), []string{there}},
		{"/api/v1/query_range", rangeQ(fmt.Sprintf(`cpu_usage_user{hostname=%q, core="1"}`, there)), []string{there}},
		{"/api/v1/query_range", rangeQ(fmt.Sprintf(`avg by (hostname) (avg_over_time(cpu_usage_user{hostname=~"%s|%s|%s"}[5m]))`, hosts[3], hosts[4], hosts[5])), hosts[3:6]},
		{"/api/v1/query_range", rangeQ(`max by (rack) (cpu_usage_user{rack="2"})`), nil},
		{"/api/v1/label/core/values", url.Values{"match[]": {fmt.Sprintf(`cpu_usage_user{hostname=%q}`, there)}, "start": {fmt.Sprint(base.Unix())}, "end": {fmt.Sprint(base.Add(time.Hour).Unix())}}, []string{there}},
		{"/api/v1/series", url.Values{"match[]": {fmt.Sprintf(`cpu_usage_user{hostname=~"%s|%s"}`, here, there)}, "start": {fmt.Sprint(base.Unix())}, "end": {fmt.Sprint(base.Add(time.Hour).Unix())}}, []string{here, there}},
	} {
		asked.take()
		got := get(dns[0].HTTPAddr(), c.path, c.q)
		gotAsked := asked.take()
		want := get(sa.HTTPAddr(), c.path, c.q)
		if got != want {
			t.Errorf("%s %v:\ncluster    %s\nstandalone %s", c.path, c.q, got, want)
		}
		var n struct{ Data json.RawMessage }
		if json.Unmarshal([]byte(got), &n) != nil || string(n.Data) == "[]" || strings.Contains(string(n.Data), `"result":[]`) {
			t.Errorf("%s %v: an empty answer %s", c.path, c.q, got)
		}
		wantAsked := []uint32{}
		if c.hosts == nil {
			wantAsked = remote(hosts...)
		} else if r := remote(c.hosts...); r != nil {
			wantAsked = r
		}
		if !slices.Equal(append([]uint32{}, gotAsked...), wantAsked) {
			t.Errorf("%s %v: dn1 asked regions %v, want %v (dn1 hosts %d)", c.path, c.q, gotAsked, wantAsked, local)
		}
	}
	if tb.Partition != "hostname" {
		t.Fatalf("created %+v", tb)
	}
}

// A table partitioned by a tag can be created only once every live
// datanode routes by partition tag: a datanode of an older build (its
// registration without NodeInfo.Partition) refuses it, naming the node,
// until it is gone.
func TestPartitioningWaitsForEveryDatanode(t *testing.T) {
	cli := clustertest.Etcd(t)
	ctx := context.Background()
	if err := cluster.CheckPartitioning(ctx, cli); err != nil {
		t.Fatalf("no datanodes: %v", err)
	}
	leases := map[string]clientv3.LeaseID{}
	for _, id := range []string{"new", "old"} {
		g, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		leases[id] = g.ID
		data, _ := json.Marshal(cluster.NodeInfo{ID: id, Version: "v0.9.0", Partition: id == "new"})
		if _, err := cli.Put(ctx, cluster.DatanodesPrefix+id, string(data), clientv3.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
	}
	err := cluster.CheckPartitioning(ctx, cli)
	if !errors.Is(err, cluster.ErrNoPartitioning) || !strings.Contains(err.Error(), "datanode old runs v0.9.0") {
		t.Fatalf("with an older datanode live: %v", err)
	}
	if _, err := cli.Revoke(ctx, leases["old"]); err != nil {
		t.Fatal(err)
	}
	if err := cluster.CheckPartitioning(ctx, cli); err != nil {
		t.Fatalf("once the older datanode is gone: %v", err)
	}
}

// Metasrv places no region of a partitioned table on a datanode of an
// older build (one that registers without NodeInfo.Partition), nor moves
// one there, while other tables' regions go there as before; and neither
// metasrv nor a datanode creates a partitioned table while such a
// datanode is live.
func TestOlderDatanodesHostNoPartitionedRegion(t *testing.T) {
	cli := clustertest.Etcd(t)
	c := servertest.StartCluster(t, 2, servertest.ClusterOptions{DefaultRegions: 1,
		Etcd: func(testing.TB) ([]string, func()) { return cli.Endpoints(), func() {} }})
	ctx := context.Background()
	register := func() clientv3.LeaseID {
		t.Helper()
		g, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(cluster.NodeInfo{ID: "old", GRPCAddr: "127.0.0.1:1", Version: "v0.9.0"})
		if _, err := cli.Put(ctx, cluster.DatanodesPrefix+"old", string(data), clientv3.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
		return g.ID
	}
	meta := admin(t, c.MetasrvAddr)
	lease := register()
	_, err := meta.CreateTable(ctx, &pb.CreateTableRequest{Name: "p", Regions: 6, PartitionBy: "host"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "datanode old runs v0.9.0") {
		t.Fatalf("metasrv created a partitioned table beside an older datanode: %v", err)
	}
	_, err = c.Datanodes[0].Engine().CreateTable(ctx, catalog.TableSpec{Name: "p", Regions: 6, Partition: "host"})
	if !errors.Is(err, catalog.ErrInvalidTable) || !errors.Is(err, cluster.ErrNoPartitioning) {
		t.Fatalf("a datanode created a partitioned table beside an older datanode: %v", err)
	}

	// Created while only new datanodes are live; the older one joins.
	if _, err := cli.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if _, err := meta.CreateTable(ctx, &pb.CreateTableRequest{Name: "p", Regions: 6, PartitionBy: "host"}); err != nil {
		t.Fatal(err)
	}
	placed(t, meta, 6, time.Minute, "")
	register()
	if _, err := meta.CreateTable(ctx, &pb.CreateTableRequest{Name: "w", Regions: 6}); err != nil {
		t.Fatal(err)
	}
	st := placed(t, meta, 12, time.Minute, "")
	onOld := 0
	var pRegion string
	for _, r := range st.Regions {
		switch {
		case r.Table == "p" && r.Owner == "old":
			t.Fatalf("region %s of partitioned table p placed on the older datanode", r.Region)
		case r.Table == "p":
			pRegion = r.Region
		case r.Owner == "old":
			onOld++
		}
	}
	if onOld == 0 {
		t.Fatalf("no region of w placed on the older datanode: %v", st.Regions)
	}
	_, err = meta.MoveRegion(ctx, &pb.MoveRegionRequest{Region: pRegion, To: "old"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("moving region %s of p to the older datanode: %v", pRegion, err)
	}
}
