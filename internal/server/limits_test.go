package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/prompb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/limits"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// setLimits changes the default tenant's limits through metasrv's admin
// API (a standalone serves it on its gRPC address) and waits until the
// node follows them (its watch of etcd: no restart).
func setLimits(t *testing.T, n *servertest.Node, kv ...string) {
	t.Helper()
	setLimitsAt(t, n.GRPCAddr(), []*limits.Watcher{n.Limits()}, kv...)
}

// setLimitsAt changes the default tenant's limits through the admin API at
// addr and waits until every watcher (a datanode's) follows them.
func setLimitsAt(t *testing.T, addr string, ws []*limits.Watcher, kv ...string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := pb.NewMetaAdminClient(conn).SetLimits(context.Background(), &pb.SetLimitsRequest{Set: kv})
	if err != nil {
		t.Fatal(err)
	}
	var want limits.Limits
	for _, l := range resp.Limits {
		if err := want.SetKey(l.Key, l.Value); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(time.Minute)
	for _, w := range ws {
		for {
			ch := w.Changed()
			if w.For(limits.DefaultTenant) == want {
				break
			}
			select {
			case <-ch:
			case <-deadline:
				t.Fatalf("a node's limits are %+v a minute after %v", w.For(limits.DefaultTenant), kv)
			}
		}
	}
}

// remoteWrite sends series name{i="0".."n-1", extra...} one sample each at
// ts, answering the status and body; a 503 (the metrics table's regions
// opening) is sent again, as Prometheus does.
func remoteWrite(t *testing.T, addr, name string, n int, ts int64, extra ...prompb.Label) (int, string) {
	t.Helper()
	req := &prompb.WriteRequest{}
	for i := range n {
		ls := append([]prompb.Label{{Name: "__name__", Value: name}, {Name: "i", Value: strconv.Itoa(i)}}, extra...)
		req.Timeseries = append(req.Timeseries, prompb.TimeSeries{Labels: ls, Samples: []prompb.Sample{{Value: float64(i), Timestamp: ts}}})
	}
	raw, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Post("http://"+addr+"/api/v1/write", "application/x-protobuf", bytes.NewReader(snappy.Encode(nil, raw)))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return resp.StatusCode, string(body)
		}
		time.Sleep(50 * time.Millisecond) // a sender's retry pace, not a wait on the server
	}
}

// promQuery evaluates an instant query at ts (seconds), answering the
// status, the result's series and the error.
func promQuery(t *testing.T, addr, query string, ts int64) (int, []map[string]any, string) {
	t.Helper()
	q := url.Values{"query": {query}, "time": {strconv.FormatInt(ts, 10)}}
	resp, err := http.Get("http://" + addr + "/api/v1/query?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Result []map[string]any `json:"result"`
		} `json:"data"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body.Data.Result, body.Error
}

// scalarOf is the value of a one-sample instant vector ("" if none).
func scalarOf(res []map[string]any) string {
	if len(res) != 1 {
		return ""
	}
	v, _ := res[0]["value"].([]any)
	if len(v) != 2 {
		return ""
	}
	s, _ := v[1].(string)
	return s
}

// activeSeries is s's strata_active_series of the default tenant.
func activeSeries(t *testing.T, s *server.Server) float64 {
	t.Helper()
	mfs, err := s.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "strata_active_series" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tenant" && l.GetValue() == limits.DefaultTenant {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

func discarded(t *testing.T, n *servertest.Node, reason string) float64 {
	return discardedOn(t, n.Server, reason)
}

func discardedOn(t *testing.T, s *server.Server, reason string) float64 {
	return servertest.Counter(t, s, "strata_discarded_samples_total", func(l map[string]string) bool {
		return l["tenant"] == limits.DefaultTenant && l["reason"] == reason
	})
}

// TestLimitsSeriesBurstThenRaised: a remote-write burst of 25 new series
// over max_active_series_per_table=10 stores the first 10 and refuses
// the other 15 with 400 and a message naming the limit; what was accepted
// reads back through PromQL, and the counter moved. The limit raised at
// run time (admin API) lets the same request through, without a restart.
func TestLimitsSeriesBurstThenRaised(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	setLimits(t, n, "max_active_series_per_table=10")
	ts := time.Now().UnixMilli()
	code, body := remoteWrite(t, n.HTTPAddr(), "burst", 25, ts)
	if code != http.StatusBadRequest || !strings.Contains(body, "limit max_active_series_per_table=10 exceeded") ||
		!strings.Contains(body, "15 of 25 samples refused, the other 10 stored") {
		t.Fatalf("burst: %d %s", code, body)
	}
	at := ts/1000 + 1
	if code, res, e := promQuery(t, n.HTTPAddr(), "count(burst)", at); code != http.StatusOK || scalarOf(res) != "10" {
		t.Fatalf("count(burst): %d %v %s, want 10", code, res, e)
	}
	// The first 10 series of the request are the ones admitted.
	if _, res, _ := promQuery(t, n.HTTPAddr(), `count(burst{i=~"[0-9]"})`, at); scalarOf(res) != "10" {
		t.Fatalf("series 0-9 not the ones stored: %v", res)
	}
	if got := discarded(t, n, limits.ReasonSeriesPerTable); got < 15 {
		t.Fatalf("strata_discarded_samples_total{reason=per_table_series_limit} = %v, want at least 15", got)
	}
	if got := activeSeries(t, n.Server); got != 10 {
		t.Fatalf("strata_active_series = %v, want 10", got)
	}
	// The active series are admitted again; a new one is not.
	if code, body := remoteWrite(t, n.HTTPAddr(), "burst", 10, ts+1000); code != http.StatusNoContent {
		t.Fatalf("active series: %d %s", code, body)
	}
	setLimits(t, n, "max_active_series_per_table=30")
	if code, body := remoteWrite(t, n.HTTPAddr(), "burst", 25, ts+2000); code != http.StatusNoContent {
		t.Fatalf("after raising the limit: %d %s", code, body)
	}
	if _, res, _ := promQuery(t, n.HTTPAddr(), "count(burst)", ts/1000+3); scalarOf(res) != "25" {
		t.Fatalf("count(burst) after raising the limit: %v, want 25", res)
	}
	// The tenant's limit over all tables.
	setLimits(t, n, "max_active_series_per_table=0", "max_active_series=27")
	code, body = remoteWrite(t, n.HTTPAddr(), "other", 5, ts)
	if code != http.StatusBadRequest || !strings.Contains(body, "limit max_active_series=27 exceeded") || !strings.Contains(body, "3 of 5 samples refused") {
		t.Fatalf("tenant limit: %d %s", code, body)
	}
}

// lineWrite posts line protocol, answering the status and body.
func lineWrite(t *testing.T, addr, body string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/api/v2/write?bucket=x&precision=s", "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestLimitsClusterPerNode: in a cluster of two datanodes, limits set
// through metasrv reach both; the rate is each datanode's own bucket (a
// request refused on dn1 passes on dn2, as docs/limits.md says); a
// series limit on the datanode a write enters stores the admitted
// series in regions of both datanodes, readable from the other.
func TestLimitsClusterPerNode(t *testing.T) {
	c := servertest.StartCluster(t, 2, servertest.ClusterOptions{DefaultRegions: 2})
	dn1, dn2 := c.Datanodes[0], c.Datanodes[1]
	ws := []*limits.Watcher{dn1.Limits(), dn2.Limits()}
	ts := time.Now().Unix()
	lines := func(m string, from, k int) string {
		var sb strings.Builder
		for i := from; i < from+k; i++ {
			fmt.Fprintf(&sb, "%s,host=h%d v=%d %d\n", m, i, i, ts)
		}
		return sb.String()
	}
	// The tables first, without limits (the first writes may meet regions
	// still opening: 503, sent again).
	for _, m := range []string{"rate", "series"} {
		deadline := time.Now().Add(time.Minute)
		for {
			code, body := lineWrite(t, dn1.HTTPAddr(), lines(m, 100, 1))
			if code == http.StatusNoContent {
				break
			}
			if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
				t.Fatalf("%s: %d %s", m, code, body)
			}
			time.Sleep(50 * time.Millisecond) // a client's retry pace
		}
	}
	setLimitsAt(t, c.MetasrvAddr, ws, "ingestion_rate=1", "ingestion_burst=10", "max_label_names_per_series=3")
	if code, body := lineWrite(t, dn1.HTTPAddr(), lines("rate", 0, 10)); code != http.StatusNoContent {
		t.Fatalf("dn1, 10 rows: %d %s", code, body)
	}
	if code, body := lineWrite(t, dn1.HTTPAddr(), lines("rate", 0, 10)); code != http.StatusTooManyRequests {
		t.Fatalf("dn1, 10 rows more: %d %s", code, body)
	}
	if code, body := lineWrite(t, dn2.HTTPAddr(), lines("rate", 0, 10)); code != http.StatusNoContent {
		t.Fatalf("dn2, 10 rows (its own bucket): %d %s", code, body)
	}
	if got := discardedOn(t, dn1, limits.ReasonRateLimited); got != 10 {
		t.Fatalf("dn1 discarded %v, want 10", got)
	}
	code, body := lineWrite(t, dn2.HTTPAddr(), fmt.Sprintf("rate,a=1,b=2,c=3 v=1 %d\n", ts))
	if code != http.StatusBadRequest || !strings.Contains(body, "max_label_names_per_series=3") {
		t.Fatalf("dn2, 4 labels: %d %s", code, body)
	}

	setLimitsAt(t, c.MetasrvAddr, ws, "ingestion_rate=0", "ingestion_burst=0", "max_active_series_per_table=6")
	// h100 is active on no node (written before the limit): 8 new series,
	// 6 admitted on dn1, spread over both datanodes' regions.
	code, body = lineWrite(t, dn1.HTTPAddr(), lines("series", 0, 8))
	if code != http.StatusBadRequest || !strings.Contains(body, "2 of 8 samples refused, the other 6 stored") {
		t.Fatalf("dn1, 8 new series over 6: %d %s", code, body)
	}
	if code, res, e := promQuery(t, dn2.HTTPAddr(), `count(series_v{host!="h100"})`, ts+1); code != http.StatusOK || scalarOf(res) != "6" {
		t.Fatalf("from dn2: %d %v %s, want 6", code, res, e)
	}
}

// TestLimitsRateAndShape: a request over the ingestion rate is refused
// whole with 429; a series over the label limits refuses its whole
// request with 400, nothing of it written; the counters move.
func TestLimitsRateAndShape(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	addr := n.HTTPAddr()
	ts := time.Now().Unix()
	lines := func(m string, k int) string {
		var sb strings.Builder
		for i := range k {
			fmt.Fprintf(&sb, "%s,host=h%d v=%d %d\n", m, i, i, ts)
		}
		return sb.String()
	}
	// The table first, without limits.
	if code, body := lineWrite(t, addr, lines("rate", 1)); code != http.StatusNoContent {
		t.Fatalf("%d %s", code, body)
	}
	// A burst of 20 and a rate of 1/s: 30 rows are never admitted, 20 are
	// once, and the next 20 not before the bucket refills.
	setLimits(t, n, "ingestion_rate=1", "ingestion_burst=20")
	code, body := lineWrite(t, addr, lines("rate", 30))
	if code != http.StatusTooManyRequests || !strings.Contains(body, "limit ingestion_rate=1 exceeded") || !strings.Contains(body, "nothing written") {
		t.Fatalf("30 rows over a burst of 20: %d %s", code, body)
	}
	if code, body := lineWrite(t, addr, lines("rate", 20)); code != http.StatusNoContent {
		t.Fatalf("20 rows: %d %s", code, body)
	}
	resp, err := http.Post("http://"+addr+"/api/v2/write?bucket=x&precision=s", "text/plain", strings.NewReader(lines("rate", 20)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The bucket refills at 1/s: 20 rows fit in about 20s.
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != http.StatusTooManyRequests || ra < 15 || ra > 21 {
		t.Fatalf("20 rows more at once: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
	}
	if got := discarded(t, n, limits.ReasonRateLimited); got != 50 {
		t.Fatalf("discarded rate_limited %v, want 50", got)
	}
	// Remote write answers 429 too.
	if code, body := remoteWrite(t, addr, "rate_rw", 25, ts*1000); code != http.StatusTooManyRequests {
		t.Fatalf("remote write over the rate: %d %s", code, body)
	}
	setLimits(t, n, "ingestion_rate=0", "ingestion_burst=0", "max_label_names_per_series=3", "max_label_value_length=8")

	// A request with one series of 3 tags (4 labels with its name) among
	// good ones: refused whole.
	bad := lines("shape", 3) + fmt.Sprintf("shape,host=z,a=1,b=2 v=1 %d\n", ts)
	code, body = lineWrite(t, addr, bad)
	if code != http.StatusBadRequest || !strings.Contains(body, "limit max_label_names_per_series=3 exceeded") || !strings.Contains(body, "nothing written") {
		t.Fatalf("too many labels: %d %s", code, body)
	}
	// A value of 9 bytes.
	code, body = lineWrite(t, addr, lines("shape", 2)+fmt.Sprintf("shape,host=123456789 v=1 %d\n", ts))
	if code != http.StatusBadRequest || !strings.Contains(body, "limit max_label_value_length=8 exceeded") {
		t.Fatalf("a long value: %d %s", code, body)
	}
	if code, res, e := promQuery(t, addr, "count(shape)", ts+1); code != http.StatusOK || len(res) != 0 {
		t.Fatalf("a refused request wrote: %d %v %s", code, res, e)
	}
	// Remote write: __name__ counts; a long value refuses the request.
	code, body = remoteWrite(t, addr, "shape_rw", 2, ts*1000, prompb.Label{Name: "job", Value: "j"}, prompb.Label{Name: "z", Value: "1"})
	if code != http.StatusBadRequest || !strings.Contains(body, "max_label_names_per_series=3") {
		t.Fatalf("remote write with 4 labels: %d %s", code, body)
	}
	code, body = remoteWrite(t, addr, "shape_rw", 2, ts*1000, prompb.Label{Name: "job", Value: "too-long-a-job"})
	if code != http.StatusBadRequest || !strings.Contains(body, "max_label_value_length=8") {
		t.Fatalf("remote write with a long value: %d %s", code, body)
	}
	if _, res, _ := promQuery(t, addr, "count(shape_rw)", ts+1); len(res) != 0 {
		t.Fatalf("a refused remote write wrote: %v", res)
	}
	if got := discarded(t, n, limits.ReasonMaxLabelNames); got != 4+2 {
		t.Fatalf("discarded max_label_names_per_series %v, want 6", got)
	}
	if got := discarded(t, n, limits.ReasonLabelValueTooLong); got != 3+2 {
		t.Fatalf("discarded label_value_too_long %v, want 5", got)
	}
	// Within the limits, the same shapes write.
	if code, body := lineWrite(t, addr, lines("shape", 3)); code != http.StatusNoContent {
		t.Fatalf("%d %s", code, body)
	}
}

// TestLimitsQuery: a query over the tenant's samples or series per query
// fails with 422 naming the limit; within them it answers.
func TestLimitsQuery(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	addr := n.HTTPAddr()
	ts := time.Now().Add(-time.Minute).UnixMilli()
	for k := range 20 { // 5 series, 20 samples each
		if code, body := remoteWrite(t, addr, "q", 5, ts+int64(k)*1000); code != http.StatusNoContent {
			t.Fatalf("%d %s", code, body)
		}
	}
	at := ts/1000 + 21
	if code, res, e := promQuery(t, addr, "sum(count_over_time(q[1m]))", at); code != http.StatusOK || scalarOf(res) != "100" {
		t.Fatalf("no limit: %d %v %s", code, res, e)
	}
	setLimits(t, n, "max_samples_per_query=50")
	code, _, e := promQuery(t, addr, "sum(count_over_time(q[1m]))", at)
	if code != http.StatusUnprocessableEntity || !strings.Contains(e, "max_samples_per_query") {
		t.Fatalf("over max_samples_per_query: %d %s", code, e)
	}
	if code, res, e := promQuery(t, addr, `sum(count_over_time(q{i="0"}[1m]))`, at); code != http.StatusOK || scalarOf(res) != "20" {
		t.Fatalf("within max_samples_per_query: %d %v %s", code, res, e)
	}
	setLimits(t, n, "max_samples_per_query=0", "max_series_per_query=3")
	code, _, e = promQuery(t, addr, "q", at)
	if code != http.StatusUnprocessableEntity || !strings.Contains(e, "max_series_per_query=3") {
		t.Fatalf("over max_series_per_query: %d %s", code, e)
	}
	if code, res, e := promQuery(t, addr, `q{i=~"[0-2]"}`, at); code != http.StatusOK || len(res) != 3 {
		t.Fatalf("within max_series_per_query: %d %v %s", code, res, e)
	}
}

// A batch that Engine.Write (the gRPC Write path) refuses as invalid
// takes no tokens and adds no series: it is validated whole before the
// limits see it.
func TestLimitsInvalidWriteTakesNothing(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	ctx := context.Background()
	ts := time.Now().UnixNano()
	pts := func(k int, v row.Value) []row.Point {
		var out []row.Point
		for i := range k {
			out = append(out, row.Point{Tags: []row.Tag{{Name: "host", Value: "h" + strconv.Itoa(i)}}, TS: ts, Fields: []row.Field{{Name: "v", Value: v}}})
		}
		return out
	}
	opts := datanode.WriteOptions{CreateTable: true}
	if _, err := n.Engine().Write(ctx, "inv", pts(1, row.FloatValue(1)), opts); err != nil {
		t.Fatal(err)
	}
	setLimits(t, n, "ingestion_rate=1", "ingestion_burst=10", "max_active_series_per_table=10")
	for range 3 {
		if _, err := n.Engine().Write(ctx, "inv", pts(10, row.StringValue("x")), opts); !errors.Is(err, region.ErrInvalidWrite) {
			t.Fatalf("a string for a float field: %v", err)
		}
	}
	if res, err := n.Engine().Write(ctx, "inv", pts(10, row.FloatValue(2)), opts); err != nil || res.Written != 10 {
		t.Fatalf("10 valid rows after the refused ones: %+v %v", res, err)
	}
	if got := discarded(t, n, limits.ReasonRateLimited); got != 0 {
		t.Fatalf("discarded rate_limited %v, want 0", got)
	}
}

// In a cluster, max_series_per_query counts an aggregation's series
// wherever they are hosted: the owners of the other datanode's regions
// send series, not their groups' partials, while the limit is set.
func TestLimitsSeriesPerQueryInACluster(t *testing.T) {
	c := servertest.StartCluster(t, 2, servertest.ClusterOptions{DefaultRegions: 2})
	dn1, dn2 := c.Datanodes[0], c.Datanodes[1]
	ts := time.Now().Add(-time.Minute).UnixMilli()
	deadline := time.Now().Add(time.Minute)
	for { // the first writes may meet regions still opening: 503, sent again
		code, body := remoteWrite(t, dn1.HTTPAddr(), "qc", 40, ts)
		if code == http.StatusNoContent {
			break
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("%d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond) // a client's retry pace
	}
	rng := func() (int, string) {
		t.Helper()
		q := url.Values{"query": {"max(max_over_time(qc[1m]))"}, "start": {strconv.FormatInt(ts/1000, 10)}, "end": {strconv.FormatInt(ts/1000+60, 10)}, "step": {"60"}}
		resp, err := http.Get("http://" + dn1.HTTPAddr() + "/api/v1/query_range?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := rng(); code != http.StatusOK || !strings.Contains(body, `"result":[{`) {
		t.Fatalf("no limit: %d %s", code, body)
	}
	setLimitsAt(t, c.MetasrvAddr, []*limits.Watcher{dn1.Limits(), dn2.Limits()}, "max_series_per_query=30")
	if code, body := rng(); code != http.StatusUnprocessableEntity || !strings.Contains(body, "max_series_per_query=30") {
		t.Fatalf("40 series over max_series_per_query=30: %d %s", code, body)
	}
}
