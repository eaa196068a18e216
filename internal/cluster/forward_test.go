package cluster_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/prompb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/fwdbatch"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// staleNaN is Prometheus's staleness marker.
var staleNaN = math.Float64frombits(0x7ff0000000000002)

// rows is a table's content as a test compares it: "tags|ts" to the
// fields' values (a float by its bits).
type rows map[string]map[string]string

func rowKey(tags map[string]string, ts int64) string {
	var kv []string
	for k, v := range tags {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return fmt.Sprintf("%s|%d", strings.Join(kv, ","), ts)
}

func valueString(v *pb.Value) string {
	switch k := v.GetKind().(type) {
	case *pb.Value_Float:
		return fmt.Sprintf("float:%016x", math.Float64bits(k.Float))
	case *pb.Value_Int:
		return fmt.Sprintf("int:%d", k.Int)
	case *pb.Value_Uint:
		return fmt.Sprintf("uint:%d", k.Uint)
	case *pb.Value_String_:
		return fmt.Sprintf("string:%q", k.String_)
	case *pb.Value_Bool:
		return fmt.Sprintf("bool:%v", k.Bool)
	}
	return "null"
}

// scanAll reads every row of table through the datanode at addr.
func scanAll(t *testing.T, c pb.DatanodeClient, table string) rows {
	t.Helper()
	st, err := c.Scan(context.Background(), &pb.ScanRequest{Table: table, Start: math.MinInt64, End: math.MaxInt64})
	if err != nil {
		t.Fatalf("scan %s: %v", table, err)
	}
	out := rows{}
	var fields []*pb.FieldInfo
	for {
		resp, err := st.Recv()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("scan %s: %v", table, err)
		}
		if resp.Fields != nil {
			fields = resp.Fields
		}
		for _, r := range resp.Rows {
			tags := map[string]string{}
			for _, tg := range resp.Series[r.Series].Tags {
				tags[tg.Name] = tg.Value
			}
			vals := map[string]string{}
			for i, v := range r.Values {
				if v.GetKind() != nil {
					vals[fields[i].Name] = valueString(v)
				}
			}
			out[rowKey(tags, r.Ts)] = vals
		}
	}
}

func diffRows(got, want rows) string {
	var d []string
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			d = append(d, "missing "+k)
			continue
		}
		if fmt.Sprint(g) != fmt.Sprint(w) {
			d = append(d, fmt.Sprintf("%s: %v, want %v", k, g, w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, "extra "+k)
		}
	}
	slices.Sort(d)
	if len(d) > 5 {
		d = append(d[:5], fmt.Sprintf("... %d differences", len(d)))
	}
	return strings.Join(d, "\n")
}

// Writes through one datanode of three, spanning regions on all three,
// read back exactly through each: line protocol to logical tables and to
// a physical table (every field kind, several fields), remote write to the
// metrics table (NaN, ±Inf, staleness markers, several metric names). Then
// forged forwarded batches (a key that does not decode, a key of another
// region, a field of the wrong kind, a region not hosted there) sent
// straight to a datanode are refused with their class and write nothing.
// Real processes (issue 39, item 6).
func TestForwardedWritesReadBackExactly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	etcd := freePort(t)
	store := "file://" + t.TempDir()
	meta := start(t, "metasrv", "metasrv", "--data-dir", t.TempDir(), "--etcd-client-addr", etcd, "--grpc-addr", "127.0.0.1:0", "--store", store, "--default-regions", "3")
	c := admin(t, meta.grpc)
	var dns []*proc
	clients := map[string]pb.DatanodeClient{}
	for _, id := range []string{"dn1", "dn2", "dn3"} {
		p := start(t, id, "datanode", "--id", id, "--etcd-endpoints", "http://"+etcd,
			"--store", store, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--default-regions", "3")
		dns = append(dns, p)
		conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		clients[id] = pb.NewDatanodeClient(conn)
	}
	for end := time.Now().Add(time.Minute); ; {
		st, err := c.ClusterStatus(context.Background(), &pb.ClusterStatusRequest{})
		if err == nil && len(st.Datanodes) == 3 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("three datanodes not registered after a minute: %v %v", st, err)
		}
		time.Sleep(100 * time.Millisecond) // polling an external process's view; no signal to wait on
	}
	if out, code := cli(t, "cluster", "create-table", "phys", "--regions", "3", "--metasrv", meta.grpc); code != 0 {
		t.Fatalf("create-table phys: exit %d\n%s", code, out)
	}
	const hosts = 60
	base := int64(1_700_000_000) * int64(time.Second)
	want := map[string]rows{"m1": {}, "m2": {}, "phys": {}, "__metrics": {}}
	var lp strings.Builder
	for h := range hosts {
		for r := range 3 {
			ts := base + int64(r)*int64(time.Second)
			tags := map[string]string{"host": fmt.Sprintf("h%d", h), "dc": fmt.Sprintf("d%d", h%4)}
			f := float64(h)*1.25 - float64(r)
			fmt.Fprintf(&lp, "m1,host=h%d,dc=d%d f=%v,i=%di,u=%du,s=\"s%d %d\",b=%v %d\n", h, h%4, f, h-r, h*r, h, r, h%2 == 0, ts)
			want["m1"][rowKey(tags, ts)] = map[string]string{"f": fmt.Sprintf("float:%016x", math.Float64bits(f)), "i": fmt.Sprintf("int:%d", h-r),
				"u": fmt.Sprintf("uint:%d", h*r), "s": fmt.Sprintf("string:%q", fmt.Sprintf("s%d %d", h, r)), "b": fmt.Sprintf("bool:%v", h%2 == 0)}
			fmt.Fprintf(&lp, "m2,host=h%d v=%d %d\n", h, h+r, ts)
			want["m2"][rowKey(map[string]string{"host": fmt.Sprintf("h%d", h)}, ts)] = map[string]string{"v": fmt.Sprintf("float:%016x", math.Float64bits(float64(h+r)))}
			fmt.Fprintf(&lp, "phys,host=h%d a=%v,b=%di %d\n", h, f, h, ts)
			want["phys"][rowKey(map[string]string{"host": fmt.Sprintf("h%d", h)}, ts)] = map[string]string{"a": fmt.Sprintf("float:%016x", math.Float64bits(f)), "b": fmt.Sprintf("int:%d", h)}
		}
	}
	var rw prompb.WriteRequest
	specials := []float64{math.NaN(), staleNaN, math.Inf(1), math.Inf(-1), 0, 1.5e300}
	for h := range hosts {
		for _, name := range []string{"up", "requests_total", "temp"} {
			ts := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: name}, {Name: "instance", Value: fmt.Sprintf("i%d", h)}}}
			for r := range 3 {
				v := specials[(h+r)%len(specials)]
				ts.Samples = append(ts.Samples, prompb.Sample{Value: v, Timestamp: base/int64(time.Millisecond) + int64(r)*1000})
				want["__metrics"][rowKey(map[string]string{"__name__": name, "instance": fmt.Sprintf("i%d", h)}, base+int64(r)*int64(time.Second))] =
					map[string]string{"value": fmt.Sprintf("float:%016x", math.Float64bits(v))}
			}
			rw.Timeseries = append(rw.Timeseries, ts)
		}
	}
	raw, err := rw.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// A first write creates __lines and __metrics; then each table's
	// three regions go one to each datanode.
	if code, body := postBody(t, "http://"+dns[0].http+"/write?db=x", "text/plain", []byte("m2,host=first v=1 1\n")); code != http.StatusNoContent {
		t.Fatalf("first line write: %d %s", code, body)
	}
	first := prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: []prompb.Label{{Name: "__name__", Value: "up"}, {Name: "instance", Value: "first"}},
		Samples: []prompb.Sample{{Value: 1, Timestamp: 1000}}}}}
	firstRaw, err := first.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if code, body := postBody(t, "http://"+dns[0].http+"/api/v1/write", "application/x-protobuf", snappy.Encode(nil, firstRaw)); code != http.StatusNoContent {
		t.Fatalf("first remote write: %d %s", code, body)
	}
	want["__metrics"][rowKey(map[string]string{"__name__": "up", "instance": "first"}, int64(time.Second))] = map[string]string{"value": fmt.Sprintf("float:%016x", math.Float64bits(1))}
	st := placed(t, c, 9, time.Minute, "")
	if len(st.Regions) != 9 {
		t.Fatalf("regions: %v", st.Regions)
	}
	// Region n of each table (phys, __lines, __metrics) goes to dn<n+1>.
	owner := map[string]string{} // region: datanode id
	for _, r := range st.Regions {
		id, err := layout.ParseRegionID(r.Region)
		if err != nil {
			t.Fatal(err)
		}
		to := fmt.Sprintf("dn%d", id.Region+1)
		owner[r.Region] = to
		if r.Owner != to {
			if _, err := c.MoveRegion(context.Background(), &pb.MoveRegionRequest{Region: r.Region, To: to}); err != nil {
				t.Fatalf("move %s to %s: %v", r.Region, to, err)
			}
		}
	}
	for end := time.Now().Add(time.Minute); ; {
		st, err := c.ClusterStatus(context.Background(), &pb.ClusterStatusRequest{})
		ok := err == nil
		for _, r := range st.GetRegions() {
			ok = ok && r.OwnerLive && r.Owner == owner[r.Region]
		}
		if ok {
			t.Logf("placement: %v", st.Regions)
			break
		}
		if time.Now().After(end) {
			t.Fatalf("regions not moved after a minute: %v %v", st, err)
		}
		time.Sleep(100 * time.Millisecond) // polling an external process's view; no signal to wait on
	}
	want["m2"][rowKey(map[string]string{"host": "first"}, 1)] = map[string]string{"v": fmt.Sprintf("float:%016x", math.Float64bits(1))}
	if code, body := postBody(t, "http://"+dns[0].http+"/write?db=x", "text/plain", []byte(lp.String())); code != http.StatusNoContent {
		t.Fatalf("line write: %d %s", code, body)
	}
	if code, body := postBody(t, "http://"+dns[0].http+"/api/v1/write", "application/x-protobuf", snappy.Encode(nil, raw)); code != http.StatusNoContent {
		t.Fatalf("remote write: %d %s", code, body)
	}
	for table, w := range want {
		for _, dn := range dns {
			if d := diffRows(scanAll(t, clients[dn.name], table), w); d != "" {
				t.Errorf("%s through %s:\n%s", table, dn.name, d)
			}
		}
	}
	// dn1 sent its shares over peerwire, none over gRPC.
	if n := metricValue(t, dns[0].http, `strata_forwarded_writes_total{transport="peerwire"}`); n < 4 {
		t.Errorf("dn1 forwarded %v shares over peerwire, want 4 or more", n)
	}
	resp, err := http.Get("http://" + dns[0].http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if m := regexp.MustCompile(`(?m)^strata_forwarded_writes_total\{transport="(grpc|points)"\}.*$`).FindAll(metrics, -1); len(m) > 0 {
		t.Errorf("dn1 forwarded shares other than over peerwire: %s", m)
	}

	// Forged batches, straight to dn2, of the physical table phys.
	desc, err := clients["dn1"].DescribeTable(context.Background(), &pb.DescribeTableRequest{Name: "phys"})
	if err != nil {
		t.Fatal(err)
	}
	tableID := desc.Table.Id
	here := layout.RegionID{Table: tableID, Region: 1}      // dn2's
	elsewhere := layout.RegionID{Table: tableID, Region: 2} // dn3's
	// keyFor finds a series key of host=forgedN that routes to region n.
	keyFor := func(n uint32) ([]row.Tag, []byte) {
		for i := 0; ; i++ {
			tags := []row.Tag{{Name: "host", Value: fmt.Sprintf("forged%d", i)}}
			k, _ := row.EncodeSeries(nil, slices.Clone(tags))
			if layout.Route(k, 3) == n {
				return tags, k
			}
		}
	}
	point := func(tags []row.Tag, v row.Value) row.Point {
		return row.Point{Tags: tags, TS: base, Fields: []row.Field{{Name: "a", Value: v}}}
	}
	forward := func(id layout.RegionID, b region.Batch) error {
		raw := fwdbatch.Append(nil, b)
		_, err := clients["dn2"].ForwardWrite(context.Background(), &pb.ForwardWriteRequest{Table: "phys", Region: id.String(),
			Compression: uint32(fwdbatch.Zstd), Size: uint64(len(raw)), Batch: fwdbatch.Compress(fwdbatch.Zstd, nil, raw)})
		return err
	}
	tagsHere, keyHere := keyFor(1)
	tagsThere, keyThere := keyFor(2)
	good := point(tagsHere, row.FloatValue(1))
	cases := []struct {
		name string
		id   layout.RegionID
		b    region.Batch
		code codes.Code
	}{
		{"a key that does not decode", here, region.Batch{Points: []row.Point{good, good}, Keys: [][]byte{keyHere, []byte("\x04host\x09forged")}}, codes.InvalidArgument},
		{"a key of another tag", here, region.Batch{Points: []row.Point{good}, Keys: [][]byte{[]byte("\x04hast\x07forged0")}}, codes.InvalidArgument},
		{"a key of another region", here, region.Batch{Points: []row.Point{good, point(tagsThere, row.FloatValue(2))}, Keys: [][]byte{keyHere, keyThere}}, codes.InvalidArgument},
		{"a field of the wrong kind", here, region.Batch{Points: []row.Point{good, point(tagsHere, row.StringValue("x"))}, Keys: [][]byte{keyHere, keyHere}}, codes.InvalidArgument},
		{"no timestamp", here, region.Batch{Points: []row.Point{good, {Tags: tagsHere, TS: row.NoTimestamp, Fields: good.Fields}}, Keys: [][]byte{keyHere, keyHere}}, codes.InvalidArgument},
		{"a region not hosted here", elsewhere, region.Batch{Points: []row.Point{point(tagsThere, row.FloatValue(3))}, Keys: [][]byte{keyThere}}, codes.Unavailable},
		{"a region of no table", layout.RegionID{Table: tableID + 1000, Region: 1}, region.Batch{Points: []row.Point{good}, Keys: [][]byte{keyHere}}, codes.InvalidArgument},
	}
	for _, tc := range cases {
		err := forward(tc.id, tc.b)
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v (want %s)", tc.name, err, tc.code)
		}
	}
	// Garbage and a lying size.
	for name, req := range map[string]*pb.ForwardWriteRequest{
		"garbage":    {Table: "phys", Region: here.String(), Compression: uint32(fwdbatch.Snappy), Size: 10, Batch: []byte("not snappy")},
		"a bad size": {Table: "phys", Region: here.String(), Size: 1 << 40, Batch: []byte{1}},
		"no region":  {Table: "phys", Region: "x", Batch: fwdbatch.Append(nil, region.Batch{Points: []row.Point{good}, Keys: [][]byte{keyHere}})},
	} {
		if _, err := clients["dn2"].ForwardWrite(context.Background(), req); status.Code(err) == codes.OK || status.Code(err) == codes.Internal {
			t.Errorf("%s: %v (want refused with its class)", name, err)
		}
	}
	for _, dn := range dns {
		if d := diffRows(scanAll(t, clients[dn.name], "phys"), want["phys"]); d != "" {
			t.Errorf("phys through %s after the forged batches:\n%s", dn.name, d)
		}
	}
	// A well-formed one is written (the checks refuse what is bad only).
	if err := forward(here, region.Batch{Points: []row.Point{good}, Keys: [][]byte{keyHere}}); err != nil {
		t.Fatalf("a good forwarded batch: %v", err)
	}
	want["phys"][rowKey(map[string]string{"host": tagsHere[0].Value}, base)] = map[string]string{"a": fmt.Sprintf("float:%016x", math.Float64bits(1))}
	if d := diffRows(scanAll(t, clients["dn1"], "phys"), want["phys"]); d != "" {
		t.Errorf("phys after a good forwarded batch:\n%s", d)
	}
}
