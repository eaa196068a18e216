package cluster_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/prompb"
	"google.golang.org/grpc"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/grpcapi"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// labelsBase is the labels tests' first timestamp (seconds); their data
// has an early stretch of 10 minutes from it, flushed, and a late one an
// hour on, in the memtables.
const labelsBase = 1_700_000_000

// labelDatanodes starts, in this process, etcd, a metasrv and three
// datanodes on one file:// store, every table with three regions (so one
// on each datanode, the metrics table's and __lines' too). The datanodes
// whose index older holds serve other datanodes the Datanode service as
// a datanode older than RegionTags does (the method unknown: grpc answers
// Unimplemented), on the gRPC address they advertise; their own agents
// are this version's.
func labelDatanodes(t *testing.T, older ...int) []*server.Server {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cli := clustertest.Etcd(t)
	servertest.Metasrv(t, cli, 1)
	store := "file://" + t.TempDir()
	var dns []*server.Server
	for i := range 3 {
		cfg := server.Config{NodeID: fmt.Sprint("dn", i+1), Etcd: cli.Endpoints(), Store: store, DataDir: t.TempDir(), DefaultRegions: 3,
			HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Logger: quiet}
		var ln net.Listener
		if slices.Contains(older, i) {
			var err error
			if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			cfg.AdvertiseGRPC = ln.Addr().String()
		}
		s, err := server.Start(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		if ln != nil {
			desc := pb.Datanode_ServiceDesc
			desc.Streams = slices.DeleteFunc(slices.Clone(desc.Streams), func(d grpc.StreamDesc) bool { return d.StreamName == "RegionTags" })
			g := grpc.NewServer()
			g.RegisterService(&desc, grpcapi.New(s.Engine()))
			go func() { _ = g.Serve(ln) }()
			t.Cleanup(g.Stop)
		}
		dns = append(dns, s)
	}
	return dns
}

// labelData writes the labels tests' data to the cluster (through its
// datanodes in turn) and to a standalone: table cpu (created with three
// regions, written by line protocol), logical tables lp and lq (line
// protocol) and, by remote write, the metrics up and node_cpu. Some
// series and tags are only in the early stretch, some only in the late
// one.
func labelData(t *testing.T, dns []*server.Server, sa *servertest.Node) {
	t.Helper()
	ctx := context.Background()
	if _, err := dns[0].Engine().CreateTable(ctx, catalog.TableSpec{Name: "cpu", Regions: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Engine().CreateTable(ctx, catalog.TableSpec{Name: "cpu", Regions: 1}); err != nil {
		t.Fatal(err)
	}
	servertest.WaitHosted(t, sa.Engine(), "cpu")
	next := 0
	send := func(lines string, ws []prompb.TimeSeries) {
		t.Helper()
		for _, addr := range []string{dns[next%len(dns)].HTTPAddr(), sa.HTTPAddr()} {
			if code, body := postBody(t, "http://"+addr+"/write?db=x", "text/plain", []byte(lines)); code != http.StatusNoContent {
				t.Fatalf("line protocol to %s: %d %s", addr, code, body)
			}
			raw, err := (&prompb.WriteRequest{Timeseries: ws}).Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if code, body := postBody(t, "http://"+addr+"/api/v1/write", "application/x-protobuf", snappy.Encode(nil, raw)); code/100 != 2 {
				t.Fatalf("remote write to %s: %d %s", addr, code, body)
			}
		}
		next++
	}
	stretch := func(from int, hosts []int) {
		var b strings.Builder
		var ws []prompb.TimeSeries
		for m := range 10 {
			ts := int64(labelsBase+from+60*m) * int64(time.Second)
			for _, h := range hosts {
				fmt.Fprintf(&b, "cpu,host=h%d,dc=d%d v=%d %d\n", h, h%3, h, ts)
				if h >= 24 {
					fmt.Fprintf(&b, "cpu,host=h%d,dc=d%d,rack=r%d v=%d %d\n", h, h%3, h%4, h, ts)
				}
				if h%3 == 0 {
					zone := fmt.Sprintf(",zone=z%d", h%4)
					if h >= 24 {
						zone += fmt.Sprintf(",pod=p%d", h%5)
					}
					fmt.Fprintf(&b, "lp,host=l%d%s v=%d %d\n", h, zone, h, ts)
				}
				if h%5 == 0 {
					fmt.Fprintf(&b, "lq,host=q%d w=%di %d\n", h, h, ts)
				}
				job := []string{"a", "b"}[h%2]
				sample := []prompb.Sample{{Value: float64(h), Timestamp: ts / 1e6}}
				if from == 0 {
					ws = append(ws, prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: "up"}, {Name: "instance", Value: fmt.Sprint("i", h)}, {Name: "job", Value: job}},
						Samples: sample})
				} else {
					ws = append(ws, prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: "node_cpu"}, {Name: "instance", Value: fmt.Sprint("i", h)},
						{Name: "mode", Value: []string{"idle", "user", "system"}[h%3]}}, Samples: sample})
				}
			}
			send(b.String(), ws)
			b.Reset()
			ws = ws[:0]
		}
	}
	var early, late []int
	for h := range 24 {
		early = append(early, h)
		late = append(late, h+12)
	}
	stretch(0, early)
	for _, e := range append([]*server.Server{sa.Server}, dns...) {
		if err := e.Engine().Flush(ctx, ""); err != nil {
			t.Fatal(err)
		}
	}
	stretch(3600, late)
	for _, table := range []string{"cpu", catalog.LinesTable, catalog.MetricsTable} {
		for i, h := range placedOn(t, dns, table) {
			if len(h) != 1 {
				t.Fatalf("dn%d hosts regions %v of %s, want one", i+1, h, table)
			}
		}
	}
}

// labelQueries are label look-ups of labelData: those the regions answer
// (no matcher but equalities: from their postings, or from a listing of
// the series the equalities select), and those with matchers to apply to
// each series' labels, whose series are listed for the asking datanode.
func labelQueries() (regions, listed []string) {
	early := fmt.Sprintf("start=%d&end=%d", labelsBase, labelsBase+600)
	late := fmt.Sprintf("start=%d&end=%d", labelsBase+3600, labelsBase+4200)
	m := func(sel string) string { return "match[]=" + url.QueryEscape(sel) }
	regions = []string{
		"/api/v1/labels",
		"/api/v1/labels?" + early,
		"/api/v1/labels?" + late,
		"/api/v1/labels?" + m("lp_v"), // lp's tags, and the metrics table's series of that name: none
		"/api/v1/labels?" + m("up"),
		"/api/v1/labels?" + m(`node_cpu{mode="idle"}`) + "&" + late,
		"/api/v1/label/__name__/values",
		"/api/v1/label/__name__/values?" + late,
		"/api/v1/label/host/values",
		"/api/v1/label/host/values?" + early,
		"/api/v1/label/host/values?" + late,
		"/api/v1/label/host/values?" + m("cpu_v"),
		"/api/v1/label/host/values?" + m(`cpu_v{dc="d1"}`),
		"/api/v1/label/rack/values",
		"/api/v1/label/instance/values",
		"/api/v1/label/instance/values?" + early,
		"/api/v1/label/instance/values?" + m("up"),
		"/api/v1/label/instance/values?" + m(`up{job="a"}`),
		"/api/v1/label/mode/values",
		"/api/v1/label/mode/values?" + m(`{__name__="node_cpu"}`) + "&" + late,
		"/api/v1/label/job/values?" + m("node_cpu"),
		"/api/v1/label/zone/values?" + m("lp_v"),
		"/api/v1/label/zone/values?" + m(`lp_v{host="l3"}`),
		"/api/v1/label/pod/values?" + m("lp_v") + "&" + early,
		"/api/v1/label/pod/values?" + m("lp_v") + "&" + late,
		"/api/v1/label/host/values?" + m("lp_v") + "&" + late,
		"/api/v1/label/host/values?" + m("lq_w"),
		"/api/v1/label/nothing/values",
	}
	listed = []string{
		"/api/v1/labels?" + m(`{__name__=~"up|node_cpu",instance=~"i1.*"}`),
		"/api/v1/label/instance/values?" + m(`{__name__=~"up|node_cpu",instance=~"i1.*"}`),
		"/api/v1/label/host/values?" + m(`lp_v{zone=~"z1|z2"}`) + "&" + early,
		"/api/v1/label/mode/values?" + m(`node_cpu{mode!="idle"}`),
	}
	return regions, listed
}

// labelGet is the body of a label look-up's answer.
func labelGet(t *testing.T, httpAddr, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s from %s: %d %s", path, httpAddr, resp.StatusCode, body)
	}
	return string(body)
}

// compareLabels asks every path of both lists through each datanode and
// the standalone, and fails unless the answers are the same; it returns
// the bytes each datanode received of Scan and of RegionTags while the
// regions' look-ups ran.
func compareLabels(t *testing.T, dns []*server.Server, sa *servertest.Node) (scans, tags []float64) {
	t.Helper()
	regions, listed := labelQueries()
	empty := 0
	for i, dn := range dns {
		scan0 := servertest.PeerBytes(t, dn, "received", "/Scan")
		tags0 := servertest.PeerBytes(t, dn, "received", "/RegionTags")
		for _, path := range regions {
			want := labelGet(t, sa.HTTPAddr(), path)
			if got := labelGet(t, dn.HTTPAddr(), path); got != want {
				t.Fatalf("%s through dn%d:\n%s\nthe standalone's:\n%s", path, i+1, got, want)
			}
			if i == 0 && strings.Contains(want, `"data":[]`) {
				empty++
			}
		}
		scan1 := servertest.PeerBytes(t, dn, "received", "/Scan")
		tags1 := servertest.PeerBytes(t, dn, "received", "/RegionTags")
		scans, tags = append(scans, scan1-scan0), append(tags, tags1-tags0)
		for _, path := range listed {
			want := labelGet(t, sa.HTTPAddr(), path)
			if got := labelGet(t, dn.HTTPAddr(), path); got != want {
				t.Fatalf("%s through dn%d:\n%s\nthe standalone's:\n%s", path, i+1, got, want)
			}
			if i == 0 && strings.Contains(want, `"data":[]`) {
				empty++
			}
		}
	}
	if empty != 3 { // node_cpu's jobs, the early pods and the values of "nothing"
		t.Fatalf("%d look-ups answered nothing, want 3", empty)
	}
	// Some answers worked out from labelData, not only compared: the
	// regions list the series of equalities.
	m := func(sel string) string { return "match[]=" + url.QueryEscape(sel) }
	hosts := func(prefix string, keep func(h int) bool) []string {
		var out []string
		for h := range 36 {
			if keep(h) {
				out = append(out, fmt.Sprint(prefix, h))
			}
		}
		slices.Sort(out)
		return out
	}
	late := fmt.Sprintf("&start=%d&end=%d", labelsBase+3600, labelsBase+4200)
	for path, want := range map[string][]string{
		"/api/v1/labels?" + m("up"):                               {"__name__", "instance", "job"},
		"/api/v1/labels?" + m(`node_cpu{mode="idle"}`) + late:     {"__name__", "instance", "mode"},
		"/api/v1/label/instance/values?" + m(`up{job="a"}`):       hosts("i", func(h int) bool { return h < 24 && h%2 == 0 }),
		"/api/v1/label/host/values?" + m(`cpu_v{dc="d1"}`):        hosts("h", func(h int) bool { return h%3 == 1 }),
		"/api/v1/label/zone/values?" + m(`lp_v{host="l3"}`):       {"z3"},
		"/api/v1/label/pod/values?" + m(`lp_v{zone="z0"}`) + late: {"p4"}, // l12 has none, l24 p4
	} {
		var got struct{ Data []string }
		promGet(t, dns[0].HTTPAddr(), path, &got)
		if !slices.Equal(got.Data, want) {
			t.Fatalf("%s: %v, want %v", path, got.Data, want)
		}
	}
	return scans, tags
}

// Label names and values asked of any datanode of a cluster of three,
// each the owner of one region of each table, are the standalone's for
// the same data: of a table, of logical tables in __lines and of the
// metrics table, over all time and over a stretch of it (series in
// files, in memtables, in both), with and without match[]. Those without
// matchers to apply to each series' labels are answered by the regions,
// the remote ones' through their owners (RegionTags), without a Scan.
func TestLabelsThroughADatanodeAreTheStandalones(t *testing.T) {
	dns := labelDatanodes(t)
	sa := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	labelData(t, dns, sa)
	scans, tags := compareLabels(t, dns, sa)
	for i := range dns {
		if scans[i] != 0 || tags[i] == 0 {
			t.Fatalf("dn%d received %v bytes of Scan and %v of RegionTags for the regions' look-ups: want RegionTags only", i+1, scans[i], tags[i])
		}
	}
	t.Logf("bytes of RegionTags received a datanode for the regions' look-ups: %v", tags)
}

// An owner older than RegionTags answers it Unimplemented (a rolling
// upgrade): the region's series are listed through it instead, and the
// answers are still the standalone's.
func TestLabelsFromAnOwnerOlderThanRegionTags(t *testing.T) {
	dns := labelDatanodes(t, 2)
	sa := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	labelData(t, dns, sa)
	scans, tags := compareLabels(t, dns, sa)
	for i := range 2 { // dn1 and dn2 ask dn3 (the older) and each other
		if scans[i] == 0 || tags[i] == 0 {
			t.Fatalf("dn%d received %v bytes of Scan and %v of RegionTags for the regions' look-ups: want both", i+1, scans[i], tags[i])
		}
	}
	if scans[2] != 0 || tags[2] == 0 { // dn3 asks the other two, which know RegionTags
		t.Fatalf("dn3 received %v bytes of Scan and %v of RegionTags for the regions' look-ups: want RegionTags only", scans[2], tags[2])
	}
}
