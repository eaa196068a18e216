package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/prompb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/auth"
	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/hatracker"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/tenant"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// tenantReq is an HTTP request of tenant h (its X-Scope-OrgID; "": none)
// with token tok ("": none), answering the status and body.
func tenantReq(t *testing.T, method, addr, path, h, tok, ctype string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if h != "" {
		req.Header.Set(tenant.Header, h)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// rwBody is a remote-write body of series name{i="0".."n-1", extra}, the
// sample of series i being base+i at ts (milliseconds).
func rwBody(t *testing.T, name string, n int, base float64, ts int64, extra ...prompb.Label) []byte {
	t.Helper()
	req := &prompb.WriteRequest{}
	for i := range n {
		ls := append([]prompb.Label{{Name: "__name__", Value: name}, {Name: "i", Value: strconv.Itoa(i)}}, extra...)
		req.Timeseries = append(req.Timeseries, prompb.TimeSeries{Labels: ls, Samples: []prompb.Sample{{Value: base + float64(i), Timestamp: ts}}})
	}
	raw, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return snappy.Encode(nil, raw)
}

// retried sends a write until it is not a 503 (regions still opening, as
// a sender retries), for a minute.
func retried(t *testing.T, send func() (int, string)) (int, string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := send()
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return code, body
		}
		time.Sleep(50 * time.Millisecond) // a sender's retry pace, not a wait on the server
	}
}

// promData is the data of a Prometheus API answer.
func promData(t *testing.T, code int, body string, v any) {
	t.Helper()
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	var out struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if err := json.Unmarshal(out.Data, v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
}

// instant evaluates query at ts (seconds) as tenant h, answering each
// series' labels and value.
func instant(t *testing.T, addr, h, tok, query string, ts int64) map[string]string {
	t.Helper()
	q := url.Values{"query": {query}, "time": {strconv.FormatInt(ts, 10)}}
	code, body := tenantReq(t, http.MethodGet, addr, "/api/v1/query?"+q.Encode(), h, tok, "", nil)
	var data struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		} `json:"result"`
	}
	promData(t, code, body, &data)
	out := map[string]string{}
	for _, r := range data.Result {
		out[fmt.Sprint(r.Metric)] = r.Value[1].(string)
	}
	return out
}

// strs is a Prometheus API answer's list of strings.
func strs(t *testing.T, addr, h, path string) []string {
	t.Helper()
	code, body := tenantReq(t, http.MethodGet, addr, path, h, "", "", nil)
	var out []string
	promData(t, code, body, &out)
	return out
}

// TestTenantsAreApart: three tenants (a, b, and the default one, which
// names none) write the same metric and table names with different
// values through one datanode of a cluster whose tables have a region on
// each (so writes are forwarded and queries scan remotely); queries,
// labels, series, metadata, deletes and drops of one never meet
// another's.
func TestTenantsAreApart(t *testing.T) {
	c := servertest.StartCluster(t, 2, servertest.ClusterOptions{DefaultRegions: 2})
	dn1, dn2 := c.Datanodes[0], c.Datanodes[1]
	now := time.Now().Add(-time.Minute)
	ts := now.Unix() + 1              // the samples' second, or the next
	tenants := []string{"a", "b", ""} // "": the default tenant
	base := map[string]float64{"a": 100, "b": 200, "": 300}
	own := func(h string) string { return "m_" + cmpOr(h, tenant.Default) } // a metric of the tenant's own
	for _, h := range tenants {
		if code, body := retried(t, func() (int, string) {
			return tenantReq(t, http.MethodPost, dn1.HTTPAddr(), "/api/v1/write", h, "", "application/x-protobuf", rwBody(t, "up", 4, base[h], now.UnixMilli()))
		}); code != http.StatusNoContent {
			t.Fatalf("tenant %q: remote write: %d %s", h, code, body)
		}
		if code, body := retried(t, func() (int, string) {
			return tenantReq(t, http.MethodPost, dn1.HTTPAddr(), "/api/v1/write", h, "", "application/x-protobuf", rwBody(t, own(h), 1, base[h], now.UnixMilli()))
		}); code != http.StatusNoContent {
			t.Fatalf("tenant %q: remote write: %d %s", h, code, body)
		}
		lp := fmt.Sprintf("cpu,host=h1 value=%g %d\ncpu,host=h2 value=%g %d\n", base[h], now.UnixNano(), base[h]+1, now.UnixNano())
		if code, body := retried(t, func() (int, string) {
			return tenantReq(t, http.MethodPost, dn1.HTTPAddr(), "/write?db=x", h, "", "text/plain", []byte(lp))
		}); code != http.StatusNoContent {
			t.Fatalf("tenant %q: line protocol: %d %s", h, code, body)
		}
	}

	// a's tables have a region on each datanode: its writes through dn1
	// were forwarded to dn2's, and queries scan both.
	for _, name := range []string{tenant.Qualify("a", catalog.MetricsTable), tenant.Qualify("a", catalog.LinesTable)} {
		tb, err := dn1.Engine().Table(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, dn := range []*server.Server{dn1, dn2} {
			if !slices.ContainsFunc(dn.Engine().Hosted(), func(id layout.RegionID) bool { return id.Table == tb.ID }) {
				t.Errorf("%s hosts no region of %s", dn.HTTPAddr(), name)
			}
		}
	}

	// Each tenant's tables are its own: a's cpu and b's are two tables.
	ids := map[string]uint32{}
	for _, h := range tenants {
		tables := listTables(t, dn2.GRPCAddr(), h)
		var names []string
		for _, tb := range tables {
			names = append(names, tb.GetName())
			if tb.GetName() == "cpu" {
				ids[h] = tb.GetId()
			}
		}
		if want := []string{"__metrics", "cpu"}; !slices.Equal(names, want) {
			t.Errorf("tenant %q: tables %v, want %v", h, names, want)
		}
	}
	if ids["a"] == 0 || ids["a"] == ids["b"] || ids["a"] == ids[""] || ids["b"] == ids[""] {
		t.Errorf("the tenants' cpu tables have ids %v", ids)
	}

	// Queries through the other datanode: each tenant's sums, of rows
	// forwarded to dn2's regions and scanned from dn1's.
	for _, h := range tenants {
		for _, dn := range []*server.Server{dn1, dn2} {
			if got, want := instant(t, dn.HTTPAddr(), h, "", "sum(up)", ts), fmt.Sprint(4*base[h]+6); got["map[]"] != want {
				t.Errorf("tenant %q on %s: sum(up) = %v, want %s", h, dn.HTTPAddr(), got, want)
			}
			if got, want := instant(t, dn.HTTPAddr(), h, "", "sum(cpu)", ts), fmt.Sprint(2*base[h]+1); got["map[]"] != want {
				t.Errorf("tenant %q: sum(cpu) = %v, want %s", h, got, want)
			}
		}
		names := strs(t, dn2.HTTPAddr(), h, "/api/v1/label/__name__/values")
		if want := []string{"cpu", own(h), "up"}; !slices.Equal(names, want) {
			t.Errorf("tenant %q: names %v, want %v", h, names, want)
		}
		labels := strs(t, dn2.HTTPAddr(), h, "/api/v1/labels")
		if want := []string{"__name__", "host", "i"}; !slices.Equal(labels, want) {
			t.Errorf("tenant %q: labels %v, want %v", h, labels, want)
		}
		var series []map[string]string
		code, body := tenantReq(t, http.MethodGet, dn2.HTTPAddr(), "/api/v1/series?"+url.Values{"match[]": {`{__name__=~".+"}`}}.Encode(), h, "", "", nil)
		promData(t, code, body, &series)
		if len(series) != 7 { // up: 4, own: 1, cpu: 2
			t.Errorf("tenant %q: %d series: %v", h, len(series), series)
		}
		for _, s := range series {
			if strings.HasPrefix(s["__name__"], "m_") && s["__name__"] != own(h) {
				t.Errorf("tenant %q sees %v", h, s)
			}
		}
		var st struct {
			HeadStats struct {
				NumSeries int `json:"numSeries"`
			} `json:"headStats"`
			ByName []struct {
				Name  string `json:"name"`
				Value int    `json:"value"`
			} `json:"seriesCountByMetricName"`
		}
		code, body = tenantReq(t, http.MethodGet, dn2.HTTPAddr(), "/api/v1/status/tsdb", h, "", "", nil)
		promData(t, code, body, &st)
		if st.HeadStats.NumSeries != 7 || !strings.Contains(body, `"name":"`+own(h)+`"`) || strings.Count(body, `"name":"m_`) != 1 {
			t.Errorf("tenant %q: /api/v1/status/tsdb: %s", h, body)
		}
		code, body = tenantReq(t, http.MethodGet, dn2.HTTPAddr(), "/api/v1/status/tsdb?table=cpu", h, "", "", nil)
		promData(t, code, body, &st)
		if st.HeadStats.NumSeries != 2 {
			t.Errorf("tenant %q: /api/v1/status/tsdb of cpu: %s", h, body)
		}
		var md map[string]any
		code, body = tenantReq(t, http.MethodGet, dn2.HTTPAddr(), "/api/v1/metadata", h, "", "", nil)
		promData(t, code, body, &md)
		if _, ok := md[own(h)]; !ok || len(md) != 3 {
			t.Errorf("tenant %q: metadata %v", h, md)
		}
	}

	// A federated read: both tenants' series, each with __tenant_id__.
	got := instant(t, dn1.HTTPAddr(), "b|a", "", "sum by (__tenant_id__) (up)", ts)
	if want := map[string]string{"map[__tenant_id__:a]": "406", "map[__tenant_id__:b]": "806"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("federated a|b: %v, want %v", got, want)
	}
	// A range query of a federation is the engine's (not computed in the
	// scan): the same answer.
	q := url.Values{"query": {"sum by (__tenant_id__) (max_over_time(up[1m]))"}, "start": {strconv.FormatInt(ts, 10)}, "end": {strconv.FormatInt(ts+60, 10)}, "step": {"60"}}
	code, body := tenantReq(t, http.MethodGet, dn1.HTTPAddr(), "/api/v1/query_range?"+q.Encode(), "a|b", "", "", nil)
	var rng struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Values [][]any           `json:"values"`
		} `json:"result"`
	}
	promData(t, code, body, &rng)
	if len(rng.Result) != 2 || rng.Result[0].Metric["__tenant_id__"] != "a" || rng.Result[0].Values[0][1] != "406" || rng.Result[1].Values[0][1] != "806" {
		t.Errorf("federated range query: %s", body)
	}
	got = instant(t, dn1.HTTPAddr(), "a|b", "", `count(up{__tenant_id__="b"})`, ts)
	if got["map[]"] != "4" {
		t.Errorf(`federated a|b, up{__tenant_id__="b"}: %v`, got)
	}
	if names := strs(t, dn1.HTTPAddr(), "a|b", "/api/v1/label/__name__/values"); !slices.Equal(names, []string{"cpu", "m_a", "m_b", "up"}) {
		t.Errorf("federated a|b: names %v", names)
	}
	if vals := strs(t, dn1.HTTPAddr(), "a|b", "/api/v1/label/__tenant_id__/values"); !slices.Equal(vals, []string{"a", "b"}) {
		t.Errorf("federated a|b: tenants %v", vals)
	}

	// OTLP writes the tenant's metrics table too.
	otlp := fmt.Appendf(nil, `{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "otel_g", "gauge": {"dataPoints": [{"asInt": "7", "timeUnixNano": "%d"}]}}]}]}]}`, now.UnixNano())
	if code, body := retried(t, func() (int, string) {
		return tenantReq(t, http.MethodPost, dn1.HTTPAddr(), "/opentelemetry/v1/metrics", "a", "", "application/json", otlp)
	}); code != http.StatusOK {
		t.Fatalf("OTLP as a: %d %s", code, body)
	}
	if got := instant(t, dn2.HTTPAddr(), "a", "", "otel_g", ts); len(got) != 1 {
		t.Errorf("a's otel_g: %v", got)
	}
	if got := instant(t, dn2.HTTPAddr(), "b", "", "otel_g", ts); len(got) != 0 {
		t.Errorf("b's otel_g: %v", got)
	}

	// A write names one tenant; a bad name is refused.
	if code, body := tenantReq(t, http.MethodPost, dn1.HTTPAddr(), "/api/v1/write", "a|b", "", "application/x-protobuf", rwBody(t, "up", 1, 0, now.UnixMilli())); code != http.StatusBadRequest || !strings.Contains(body, "only reads may be federated") {
		t.Errorf("remote write to a|b: %d %s", code, body)
	}
	if code, body := tenantReq(t, http.MethodPost, dn1.HTTPAddr(), "/write?db=x", "a|b", "", "text/plain", []byte("cpu value=1\n")); code != http.StatusBadRequest || !strings.Contains(body, "only reads may be federated") {
		t.Errorf("line protocol to a|b: %d %s", code, body)
	}
	if code, body := tenantReq(t, http.MethodPost, dn1.HTTPAddr(), "/opentelemetry/v1/metrics", "a|b", "", "application/x-protobuf", nil); code != http.StatusBadRequest || !strings.Contains(body, "only reads may be federated") {
		t.Errorf("OTLP to a|b: %d %s", code, body)
	}
	if code, body := tenantReq(t, http.MethodGet, dn1.HTTPAddr(), "/api/v1/status/tsdb", "a|b", "", "", nil); code != http.StatusBadRequest || !strings.Contains(body, "only reads may be federated") {
		t.Errorf("/api/v1/status/tsdb as a|b: %d %s", code, body)
	}
	for _, path := range []string{"/api/v1/query?query=up", "/api/v1/query_range?query=up&start=0&end=1&step=1", "/api/v1/labels", "/api/v1/label/a/values", "/api/v1/series?match[]=up", "/api/v1/metadata", "/api/v1/status/tsdb"} {
		if code, body := tenantReq(t, http.MethodGet, dn1.HTTPAddr(), path, "a/b", "", "", nil); code != http.StatusBadRequest || !strings.Contains(body, "invalid tenant") {
			t.Errorf("%s as tenant a/b: %d %s", path, code, body)
		}
	}
	// A default tenant's name that looks like another tenant's table
	// reaches no table of it.
	if code, body := tenantReq(t, http.MethodPost, dn1.HTTPAddr(), "/write?db=x", "", "", "text/plain", []byte("__t/a/cpu,host=h1 value=1\n")); code != http.StatusBadRequest {
		t.Errorf("a write to __t/a/cpu: %d %s", code, body)
	}

	// A delete of a's cpu leaves b's and the default tenant's.
	conn := dial(t, dn1.GRPCAddr())
	dnc := pb.NewDatanodeClient(conn)
	for _, host := range []string{"h1", "h2"} { // a delete names a series
		if _, err := dnc.Delete(tenant.Outgoing(context.Background(), "a"), &pb.DeleteRequest{Table: "cpu", Tags: []*pb.Tag{{Name: "host", Value: host}},
			Start: 0, End: now.Add(time.Hour).UnixNano()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range tenants {
		want := fmt.Sprint(2*base[h] + 1)
		if h == "a" {
			want = ""
		}
		if got := instant(t, dn2.HTTPAddr(), h, "", "sum(cpu)", ts); got["map[]"] != want {
			t.Errorf("after a's delete, tenant %q: sum(cpu) = %v, want %q", h, got, want)
		}
	}
	// A drop of b's cpu leaves a's table and the default tenant's rows.
	if _, err := dnc.DropTable(tenant.Outgoing(context.Background(), "b"), &pb.DropTableRequest{Name: "cpu"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's cpu dropped on every datanode", func() bool {
		for _, dn := range []*server.Server{dn1, dn2} {
			if slices.ContainsFunc(listTables(t, dn.GRPCAddr(), "b"), func(tb *pb.Table) bool { return tb.GetName() == "cpu" }) {
				return false
			}
		}
		return true
	})
	if !slices.ContainsFunc(listTables(t, dn2.GRPCAddr(), "a"), func(tb *pb.Table) bool { return tb.GetName() == "cpu" }) {
		t.Error("b's drop of cpu dropped a's")
	}
	if got := instant(t, dn2.HTTPAddr(), "", "", "sum(cpu)", ts); got["map[]"] != "601" {
		t.Errorf("after b's drop, the default tenant's sum(cpu) = %v", got)
	}
	if got := instant(t, dn2.HTTPAddr(), "b", "", "sum(up)", ts); got["map[]"] != "806" {
		t.Errorf("after b's drop of cpu, b's sum(up) = %v", got)
	}
	// A tenant's table created through gRPC is its own.
	if resp, err := dnc.CreateTable(tenant.Outgoing(context.Background(), "b"), &pb.CreateTableRequest{Name: "mem"}); err != nil || resp.GetTable().GetName() != "mem" {
		t.Errorf("b's mem: %v, %v", resp, err)
	}
	if _, err := dnc.DescribeTable(tenant.Outgoing(context.Background(), "b"), &pb.DescribeTableRequest{Name: "mem"}); err != nil {
		t.Errorf("b's mem: %v", err)
	}
	if _, err := dnc.DescribeTable(context.Background(), &pb.DescribeTableRequest{Name: "mem"}); status.Code(err) != codes.NotFound {
		t.Errorf("the default tenant's mem: %v", err)
	}
	// A tenant's errors name its tables as it does.
	if _, err := dnc.DescribeTable(tenant.Outgoing(context.Background(), "b"), &pb.DescribeTableRequest{Name: "nope"}); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "nope") || strings.Contains(err.Error(), "__t/") {
		t.Errorf("b's nope: %v", err)
	}
	if _, err := dnc.DescribeTable(tenant.Outgoing(context.Background(), "a|b"), &pb.DescribeTableRequest{Name: "cpu"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("describe as a|b: %v", err)
	}

	// metasrv's table API is the call's tenant's too.
	mc := pb.NewMetaAdminClient(dial(t, c.MetasrvAddr))
	if resp, err := mc.ListTables(tenant.Outgoing(context.Background(), "b"), &pb.ListTablesRequest{}); err != nil || len(resp.GetTables()) != 3 {
		t.Errorf("b's tables at metasrv: %v, %v", resp, err) // __metrics, __lines, mem (cpu is being dropped)
	}
	if resp, err := mc.DescribeTable(tenant.Outgoing(context.Background(), "a"), &pb.DescribeTableRequest{Name: "cpu"}); err != nil || resp.GetTable().GetName() != "cpu" || resp.GetTable().GetId() != ids["a"] {
		t.Errorf("a's cpu at metasrv: %v, %v", resp, err)
	}
	if _, err := mc.DescribeTable(tenant.Outgoing(context.Background(), "a"), &pb.DescribeTableRequest{Name: "nope"}); status.Code(err) != codes.NotFound || strings.Contains(err.Error(), "__t/") {
		t.Errorf("a's nope at metasrv: %v", err)
	}
	if _, err := mc.DescribeTable(tenant.Outgoing(context.Background(), "a|b"), &pb.DescribeTableRequest{Name: "cpu"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("describe as a|b at metasrv: %v", err)
	}
	if _, err := mc.ListTables(tenant.Outgoing(context.Background(), "a/b"), &pb.ListTablesRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("list as a/b at metasrv: %v", err)
	}
	if resp, err := mc.ListRegions(tenant.Outgoing(context.Background(), "a"), &pb.ListRegionsRequest{Table: "__metrics"}); err != nil || len(resp.GetRegions()) != 2 {
		t.Errorf("a's __metrics' regions at metasrv: %v, %v", resp, err)
	}

	// GC reports each region's tenant: metasrv's run over both datanodes,
	// and a tenant's table's run.
	// Each tenant: __metrics and __lines, 2 regions each; cpu is a
	// logical table (no regions of its own), b's mem has 2 regions (once
	// they are open: metasrv places them in the background).
	want := fmt.Sprint(map[string]int{"a": 4, "b": 6, tenant.Default: 4})
	waitFor(t, "GC's regions by tenant "+want, func() bool {
		gcr, err := pb.NewMetaAdminClient(dial(t, c.MetasrvAddr)).GcRun(context.Background(), &pb.GcRegionRequest{})
		if err != nil {
			t.Fatal(err)
		}
		regions := map[string]int{}
		for _, r := range gcr.GetRegions() {
			regions[r.GetTenant()]++
		}
		return fmt.Sprint(regions) == want
	})
	gcr, err := dnc.GcRegion(tenant.Outgoing(context.Background(), "b"), &pb.GcRegionRequest{Table: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range gcr.GetRegions() {
		if r.GetTenant() != "b" {
			t.Errorf("GC of b's mem: %v", r)
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// listTables lists tenant h's tables through a datanode's gRPC API.
func listTables(t *testing.T, addr, h string) []*pb.Table {
	t.Helper()
	resp, err := pb.NewDatanodeClient(dial(t, addr)).ListTables(tenant.Outgoing(context.Background(), cmpOr(h, tenant.Default)), &pb.ListTablesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetTables()
}

// waitFor waits until ok, for a minute.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after a minute", what)
		}
		time.Sleep(20 * time.Millisecond) // a condition polled: no signal to wait on
	}
}

// TestTenantTokens: a token bound to tenant a may name a only (403 for
// b), means a without the header, and reads a|b only if it may
// federate; the cluster's token may name any tenant.
func TestTenantTokens(t *testing.T) {
	tok := auth.New("cluster-secret").
		NewTenant("a-secret", auth.Binding{Tenants: []string{"a"}}).
		NewTenant("ab-secret", auth.Binding{Tenants: []string{"a", "b"}}).
		NewTenant("fed-secret", auth.Binding{Tenants: []string{"a", "b"}, Federate: true})
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{Config: func(c *server.Config) { c.Auth = tok }})
	addr := n.HTTPAddr()
	now := time.Now().Add(-time.Minute)
	write := func(h, tk string, base float64) (int, string) {
		return retried(t, func() (int, string) {
			return tenantReq(t, http.MethodPost, addr, "/api/v1/write", h, tk, "application/x-protobuf", rwBody(t, "up", 2, base, now.UnixMilli()))
		})
	}
	if code, body := write("", "a-secret", 10); code != http.StatusNoContent { // a, without the header
		t.Fatalf("a's token: %d %s", code, body)
	}
	if code, body := write("b", "cluster-secret", 20); code != http.StatusNoContent {
		t.Fatalf("the cluster's token as b: %d %s", code, body)
	}
	if code, body := write("b", "a-secret", 0); code != http.StatusForbidden || !strings.Contains(body, "may not name tenant b") {
		t.Errorf("a's token naming b: %d %s", code, body)
	}
	if code, body := write("", "ab-secret", 0); code != http.StatusBadRequest || !strings.Contains(body, "name one") {
		t.Errorf("a two-tenant token without the header: %d %s", code, body)
	}
	if code, body := write("a|b", "fed-secret", 0); code != http.StatusBadRequest || !strings.Contains(body, "only reads may be federated") {
		t.Errorf("a write to a|b: %d %s", code, body)
	}
	if code, body := write("", "nope", 0); code != http.StatusUnauthorized {
		t.Errorf("a bad token: %d %s", code, body)
	}
	if code, body := write("a/b", "a-secret", 0); code != http.StatusBadRequest {
		t.Errorf("a bad tenant name: %d %s", code, body)
	}
	ts := now.Unix() + 1
	for _, c := range []struct{ h, tok, want string }{
		{"", "a-secret", "21"},
		{"a", "ab-secret", "21"},
		{"b", "ab-secret", "41"},
		{"b", "cluster-secret", "41"},
		{"", "cluster-secret", ""}, // the default tenant wrote nothing
	} {
		if got := instant(t, addr, c.h, c.tok, "sum(up)", ts); got["map[]"] != c.want {
			t.Errorf("%s as %q: sum(up) = %v, want %q", c.tok, c.h, got, c.want)
		}
	}
	q := "/api/v1/query?" + url.Values{"query": {"sum by (__tenant_id__) (up)"}, "time": {strconv.FormatInt(ts, 10)}}.Encode()
	for _, tk := range []string{"fed-secret", "cluster-secret"} {
		if got := instant(t, addr, "a|b", tk, "sum by (__tenant_id__) (up)", ts); len(got) != 2 || got["map[__tenant_id__:a]"] != "21" || got["map[__tenant_id__:b]"] != "41" {
			t.Errorf("%s as a|b: %v", tk, got)
		}
	}
	if code, body := tenantReq(t, http.MethodGet, addr, q, "a|b", "ab-secret", "", nil); code != http.StatusForbidden || !strings.Contains(body, "not allowed to federate") {
		t.Errorf("a|b with a token that may not federate: %d %s", code, body)
	}
	if code, body := tenantReq(t, http.MethodGet, addr, q, "a|b", "a-secret", "", nil); code != http.StatusForbidden || !strings.Contains(body, "may not name tenant b") {
		t.Errorf("a|b with a's token: %d %s", code, body)
	}

	// The web UI's cluster views are the cluster token's; its tables are
	// the request's tenant's.
	if code, body := tenantReq(t, http.MethodGet, addr, "/ui/api/tables", "", "a-secret", "", nil); code != http.StatusForbidden || !strings.Contains(body, "cluster's token") {
		t.Errorf("the UI's tables with a's token: %d %s", code, body)
	}
	if code, body := tenantReq(t, http.MethodGet, addr, "/ui/api/tables", "b", "cluster-secret", "", nil); code != http.StatusOK || !strings.Contains(body, `"__metrics"`) {
		t.Errorf("the UI's tables of b: %d %s", code, body)
	}
	if code, body := tenantReq(t, http.MethodGet, addr, "/ui/api/tables", "", "cluster-secret", "", nil); code != http.StatusOK || strings.Contains(body, `"__metrics"`) {
		t.Errorf("the UI's tables of the default tenant (none): %d %s", code, body)
	}
	if code, body := tenantReq(t, http.MethodGet, addr, "/ui/api/tables", "a|b", "cluster-secret", "", nil); code != http.StatusBadRequest || !strings.Contains(body, "only reads may be federated") {
		t.Errorf("the UI's tables of a|b: %d %s", code, body)
	}

	// gRPC: the same rules in the metadata; regions and metasrv's admin
	// API are the cluster's.
	bearer := func(s string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+s)
	}
	dnc := pb.NewDatanodeClient(dial(t, n.GRPCAddr()))
	resp, err := dnc.ListTables(bearer("a-secret"), &pb.ListTablesRequest{})
	if err != nil || len(resp.GetTables()) != 1 || resp.GetTables()[0].GetName() != "__metrics" {
		t.Errorf("a's tables with a's token: %v, %v", resp, err)
	}
	if _, err := dnc.ListTables(tenant.Outgoing(bearer("a-secret"), "b"), &pb.ListTablesRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("b's tables with a's token: %v", err)
	}
	if _, err := dnc.ListTables(tenant.Outgoing(bearer("cluster-secret"), "b"), &pb.ListTablesRequest{}); err != nil {
		t.Errorf("b's tables with the cluster's token: %v", err)
	}
	if _, err := dnc.Write(bearer("a-secret"), &pb.WriteRequest{Table: "__metrics", Region: "1/0"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a region write with a's token: %v", err)
	}
	ctx := bearer("a-secret")
	streamErr := func(err error, recv func() error) error {
		if err != nil {
			return err
		}
		return recv()
	}
	for what, err := range map[string]error{
		"forward": func() error {
			_, err := dnc.ForwardWrite(ctx, &pb.ForwardWriteRequest{Table: "__metrics", Region: "1/0"})
			return err
		}(),
		"close": func() error { _, err := dnc.CloseTable(ctx, &pb.CloseTableRequest{TableId: 1}); return err }(),
		"scan": func() error {
			s, err := dnc.Scan(ctx, &pb.ScanRequest{Table: "__metrics", Region: "1/0"})
			return streamErr(err, func() error { _, err := s.Recv(); return err })
		}(),
		"scan columns": func() error {
			s, err := dnc.ScanColumns(ctx, &pb.ScanRequest{Table: "__metrics", Region: "1/0"})
			return streamErr(err, func() error { _, err := s.Recv(); return err })
		}(),
		"region tags": func() error {
			s, err := dnc.RegionTags(ctx, &pb.RegionTagsRequest{Table: "__metrics", Region: "1/0"})
			return streamErr(err, func() error { _, err := s.Recv(); return err })
		}(),
	} {
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("a region call (%s) with a's token: %v", what, err)
		}
	}
	if _, err := dnc.Flush(ctx, &pb.FlushRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a flush of every table with a's token: %v", err)
	}
	if _, err := dnc.Flush(ctx, &pb.FlushRequest{Table: "__metrics"}); err != nil {
		t.Errorf("a flush of a's __metrics with a's token: %v", err)
	}
	if _, err := dnc.Flush(bearer("cluster-secret"), &pb.FlushRequest{}); err != nil {
		t.Errorf("a flush of every table with the cluster's token: %v", err)
	}
	if _, err := dnc.RuleGroups(bearer("a-secret"), &pb.RuleGroupsRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("rule groups with a's token: %v", err)
	}
	if _, err := dnc.GcRegion(bearer("a-secret"), &pb.GcRegionRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("GC of every region with a's token: %v", err)
	}
	// GC's ages and full listings are the store's safety and cost: the
	// operator's, even of a tenant's own table.
	if _, err := dnc.GcRegion(bearer("a-secret"), &pb.GcRegionRequest{Table: "__metrics", Full: true, MinAgeSeconds: -1}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("GC of a's __metrics with a's token: %v", err)
	}
	if resp, err := dnc.GcRegion(tenant.Outgoing(bearer("cluster-secret"), "a"), &pb.GcRegionRequest{Table: "__metrics"}); err != nil || len(resp.GetRegions()) != 1 || resp.GetRegions()[0].GetTenant() != "a" {
		t.Errorf("GC of a's __metrics with the cluster's token: %v, %v", resp, err)
	}
	if _, err := pb.NewMetaAdminClient(dial(t, n.GRPCAddr())).ListTables(bearer("a-secret"), &pb.ListTablesRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("metasrv's admin API with a's token: %v", err)
	}
	if _, err := dnc.ListTables(tenant.Outgoing(bearer("a-secret"), "a/b"), &pb.ListTablesRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a bad tenant in the metadata: %v", err)
	}
}

// TestHAPairsPerTenant: an HA cluster is a tenant's: tenant a's elected
// replica of cluster c does not make tenant b's replicas of a cluster
// also named c another's (Mimir keys its HA tracker by tenant too).
func TestHAPairsPerTenant(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{Config: func(c *server.Config) {
		c.HA = hatracker.Config{ClusterLabel: "cluster", FailoverTimeout: time.Minute}
	}})
	now := time.Now().Add(-time.Minute)
	send := func(h, replica string, v float64) (int, string) {
		return retried(t, func() (int, string) {
			return tenantReq(t, http.MethodPost, n.HTTPAddr(), "/api/v1/write", h, "", "application/x-protobuf",
				rwBody(t, "ha_up", 1, v, now.UnixMilli(), prompb.Label{Name: "cluster", Value: "c"}, prompb.Label{Name: "__replica__", Value: replica}))
		})
	}
	for _, c := range []struct {
		h, replica string
		want       int
	}{
		{"a", "r1", http.StatusNoContent},
		{"b", "r2", http.StatusNoContent}, // b's c: its first replica, elected
		{"a", "r2", http.StatusAccepted},  // a's c elected r1
		{"b", "r1", http.StatusAccepted},  // b's c elected r2
	} {
		if code, body := send(c.h, c.replica, 1); code != c.want {
			t.Errorf("tenant %s, replica %s: %d %s, want %d", c.h, c.replica, code, body, c.want)
		}
	}
}

// TestLimitsPerTenant: tenant a's limits bound a's writes and queries
// only; the refusal names tenant a (and a's own table name), and a's
// counter moves, not b's.
func TestLimitsPerTenant(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	now := time.Now().Add(-time.Minute)
	write := func(h string, labels int) (int, string) {
		var extra []prompb.Label
		for i := range labels {
			extra = append(extra, prompb.Label{Name: fmt.Sprint("l", i), Value: "v"})
		}
		return retried(t, func() (int, string) {
			return tenantReq(t, http.MethodPost, n.HTTPAddr(), "/api/v1/write", h, "", "application/x-protobuf", rwBody(t, "lim", 3, 0, now.UnixMilli(), extra...))
		})
	}
	for _, h := range []string{"a", "b"} {
		if code, body := write(h, 0); code != http.StatusNoContent {
			t.Fatalf("tenant %s: %d %s", h, code, body)
		}
	}
	resp, err := pb.NewMetaAdminClient(dial(t, n.GRPCAddr())).SetLimits(context.Background(), &pb.SetLimitsRequest{Tenant: "a", Set: []string{"max_label_names_per_series=3", "max_series_per_query=2"}})
	if err != nil || resp.GetTenant() != "a" {
		t.Fatalf("%v, %v", resp, err)
	}
	waitFor(t, "the node follows a's limits", func() bool { return n.Limits().For("a").MaxSeriesPerQuery == 2 })
	// __name__, i and l0..l1: 4 label names.
	if code, body := write("a", 2); code != http.StatusBadRequest || !strings.Contains(body, "tenant a") || !strings.Contains(body, "max_label_names_per_series") || strings.Contains(body, "__t/") {
		t.Errorf("a over its limit: %d %s", code, body)
	}
	if code, body := write("b", 2); code != http.StatusNoContent {
		t.Errorf("b, without limits: %d %s", code, body)
	}
	discarded := func(h string) float64 {
		return servertest.Counter(t, n.Server, "strata_discarded_samples_total", func(l map[string]string) bool { return l["tenant"] == h })
	}
	if discarded("a") != 3 || discarded("b") != 0 {
		t.Errorf("discarded: a %v, b %v", discarded("a"), discarded("b"))
	}
	q := "/api/v1/query?" + url.Values{"query": {"lim"}, "time": {strconv.FormatInt(now.Unix()+1, 10)}}.Encode()
	if code, body := tenantReq(t, http.MethodGet, n.HTTPAddr(), q, "a", "", "", nil); code != http.StatusUnprocessableEntity || !strings.Contains(body, "tenant a's max_series_per_query") {
		t.Errorf("a's query over max_series_per_query=2: %d %s", code, body)
	}
	if got := instant(t, n.HTTPAddr(), "b", "", "count(lim)", now.Unix()+1); got["map[]"] != "6" {
		t.Errorf("b's query: %v", got)
	}
}
