package prom_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/version"
)

type apiResp struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

type client struct {
	t    *testing.T
	base string
}

func (c client) get(path string, q url.Values) (int, apiResp) {
	c.t.Helper()
	resp, err := http.Get(c.base + path + "?" + q.Encode())
	if err != nil {
		c.t.Fatal(err)
	}
	return decode(c.t, resp)
}

func (c client) post(path string, q url.Values) (int, apiResp) {
	c.t.Helper()
	resp, err := http.PostForm(c.base+path, q)
	if err != nil {
		c.t.Fatal(err)
	}
	return decode(c.t, resp)
}

func decode(t *testing.T, resp *http.Response) (int, apiResp) {
	t.Helper()
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var r apiResp
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("%d %s: %v", resp.StatusCode, data, err)
	}
	return resp.StatusCode, r
}

type matrix []struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
}

// points returns a matrix series' values by timestamp (seconds).
func points(t *testing.T, vals [][2]any) map[int64]float64 {
	out := map[int64]float64{}
	for _, p := range vals {
		ts := int64(p[0].(float64))
		v, err := strconv.ParseFloat(p[1].(string), 64)
		if err != nil {
			t.Fatal(err)
		}
		out[ts] = v
	}
	return out
}

// Line protocol written over HTTP reads back through /api/v1/query_range
// with the values computed here, partly from SSTs and partly from
// memtables; the series, label and metadata endpoints answer from the
// catalog and the data; errors come in Prometheus' format.
func TestQueryRangeOverLineProtocol(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{Config: func(c *server.Config) { c.Query.MaxSamples = 1000 }})
	base := "http://" + n.HTTPAddr()
	c := client{t, base}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	// Two hosts, a sample every 10 s for 20 minutes: usage_user = i (host
	// a) or 100+i (host b), count = 2i as an integer, note a string.
	write := func(from, to int) {
		var b strings.Builder
		for i := from; i < to; i++ {
			fmt.Fprintf(&b, "cpu,host=a usage_user=%d,count=%di,note=\"x\" %d\n", i, 2*i, t0+int64(i)*10)
			fmt.Fprintf(&b, "cpu,host=b usage_user=%d,count=%di %d\n", 100+i, 2*i, t0+int64(i)*10)
		}
		resp, err := http.Post(base+"/write?db=x&precision=s", "text/plain", strings.NewReader(b.String()))
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("write: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	write(0, 60)
	if err := n.Engine().Flush(context.Background(), "cpu"); err != nil {
		t.Fatal(err)
	}
	write(60, 120) // the rest stays in memtables

	rng := func(q string, step int64) matrix {
		t.Helper()
		code, r := c.get("/api/v1/query_range", url.Values{"query": {q}, "start": {strconv.FormatInt(t0, 10)},
			"end": {strconv.FormatInt(t0+1190, 10)}, "step": {strconv.FormatInt(step, 10)}})
		if code != 200 || r.Status != "success" {
			t.Fatalf("%s: %d %+v", q, code, r)
		}
		var d struct {
			ResultType string `json:"resultType"`
			Result     matrix `json:"result"`
		}
		if err := json.Unmarshal(r.Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.ResultType != "matrix" {
			t.Fatalf("%s: result type %s", q, d.ResultType)
		}
		return d.Result
	}
	// The raw series, every 60 s: the latest sample at or before each step.
	m := rng(`cpu_usage_user{host="a"}`, 60)
	if len(m) != 1 || m[0].Metric["__name__"] != "cpu_usage_user" || m[0].Metric["host"] != "a" {
		t.Fatalf("series: %+v", m)
	}
	got := points(t, m[0].Values)
	for k := int64(0); k*60 <= 1190; k++ {
		if want := float64(k * 6); got[t0+k*60] != want {
			t.Fatalf("at %ds: %v, want %v", k*60, got[t0+k*60], want)
		}
	}
	// An aggregation over a window: max over the last minute, summed over
	// both hosts (a regex alternation, filtered after the scan).
	m = rng(`sum(max_over_time(cpu_usage_user{host=~"a|b"}[1m]))`, 120)
	got = points(t, m[0].Values)
	for k := int64(0); k*120 <= 1190; k++ {
		i := k * 12 // the newest sample index in the window
		if want := float64(i + 100 + i); got[t0+k*120] != want {
			t.Fatalf("sum of max at %ds: %v, want %v", k*120, got[t0+k*120], want)
		}
	}
	// Integer fields read as floats; rate of a counter growing 2 per 10 s.
	m = rng(`rate(cpu_count{host="b"}[1m])`, 300)
	for ts, v := range points(t, m[0].Values) {
		if ts > t0 && math.Abs(v-0.2) > 1e-9 {
			t.Fatalf("rate at %d: %v, want 0.2", ts, v)
		}
	}
	// A string field is not a series; an unknown name selects nothing.
	for _, q := range []string{"cpu_note", "nope_metric", `cpu_usage_user{host="c"}`, `cpu_usage_user{zone="x"}`} {
		if m := rng(q, 600); len(m) != 0 {
			t.Fatalf("%s: %+v", q, m)
		}
	}

	// Instant queries, GET and form POST (Grafana's 1+1).
	code, r := c.post("/api/v1/query", url.Values{"query": {"1+1"}, "time": {strconv.FormatInt(t0, 10)}})
	if code != 200 || !strings.Contains(string(r.Data), `"resultType":"scalar"`) || !strings.Contains(string(r.Data), `"2"`) {
		t.Fatalf("1+1: %d %s", code, r.Data)
	}
	code, r = c.get("/api/v1/query", url.Values{"query": {`count(cpu_usage_user)`}, "time": {strconv.FormatInt(t0+600, 10)}})
	if code != 200 || !strings.Contains(string(r.Data), `"value":[1767226200,"2"]`) {
		t.Fatalf("count: %d %s", code, r.Data)
	}

	// Series, labels and label values.
	code, r = c.get("/api/v1/series", url.Values{"match[]": {"cpu_usage_user"}})
	var series []map[string]string
	if err := json.Unmarshal(r.Data, &series); err != nil {
		t.Fatal(err)
	}
	if code != 200 || len(series) != 2 {
		t.Fatalf("series: %d %s", code, r.Data)
	}
	code, r = c.get("/api/v1/labels", nil)
	var names []string
	if err := json.Unmarshal(r.Data, &names); err != nil {
		t.Fatal(err)
	}
	if code != 200 || !slices.Equal(names, []string{"__name__", "host"}) {
		t.Fatalf("labels: %d %s", code, r.Data)
	}
	code, r = c.get("/api/v1/label/__name__/values", nil)
	if err := json.Unmarshal(r.Data, &names); err != nil {
		t.Fatal(err)
	}
	if code != 200 || !slices.Equal(names, []string{"cpu_count", "cpu_usage_user"}) {
		t.Fatalf("__name__ values: %d %s", code, r.Data)
	}
	code, r = c.get("/api/v1/label/host/values", url.Values{"match[]": {`cpu_count{host!="a"}`}})
	if err := json.Unmarshal(r.Data, &names); err != nil {
		t.Fatal(err)
	}
	if code != 200 || !slices.Equal(names, []string{"b"}) {
		t.Fatalf("host values: %d %s", code, r.Data)
	}
	if code, r = c.get("/api/v1/status/buildinfo", nil); code != 200 || r.Status != "success" {
		t.Fatalf("buildinfo: %d %+v", code, r)
	}
	if code, r = c.get("/api/v1/query_exemplars", url.Values{"query": {"cpu_usage_user"}}); code != 200 || string(r.Data) != "[]" {
		t.Fatalf("exemplars: %d %s", code, r.Data)
	}
	if code, r = c.get("/api/v1/format_query", url.Values{"query": {"sum(rate(x[1m]))by(a)"}}); code != 200 || string(r.Data) != `"sum by (a) (rate(x[1m]))"` {
		t.Fatalf("format_query: %d %s", code, r.Data)
	}
	if code, r = c.get("/api/v1/rules", nil); code != 200 || string(r.Data) != `{"groups":[]}` {
		t.Fatalf("rules: %d %s", code, r.Data)
	}
	if code, r = c.get("/api/v1/alerts", nil); code != 200 || string(r.Data) != `{"alerts":[]}` {
		t.Fatalf("alerts: %d %s", code, r.Data)
	}
	if code, r = c.get("/api/v1/metadata", nil); code != 200 || !strings.Contains(string(r.Data), "cpu_usage_user") {
		t.Fatalf("metadata: %d %s", code, r.Data)
	}

	// Errors in Prometheus' format.
	for _, tc := range []struct {
		path string
		q    url.Values
		code int
		typ  string
	}{
		{"/api/v1/query", url.Values{"query": {"sum("}}, 400, "bad_data"},
		{"/api/v1/query", url.Values{}, 400, "bad_data"},
		{"/api/v1/query_range", url.Values{"query": {"up"}, "start": {"10"}, "end": {"20"}, "step": {"0"}}, 400, "bad_data"},
		{"/api/v1/query_range", url.Values{"query": {"up"}, "start": {"x"}, "end": {"20"}, "step": {"1"}}, 400, "bad_data"},
		{"/api/v1/series", url.Values{}, 400, "bad_data"},
		// Over the sample limit (1000): a clear error; writes go on.
		{"/api/v1/query_range", url.Values{"query": {"cpu_usage_user"}, "start": {strconv.FormatInt(t0, 10)}, "end": {strconv.FormatInt(t0+1190, 10)}, "step": {"1"}}, 422, "execution"},
	} {
		code, r := c.get(tc.path, tc.q)
		if code != tc.code || r.Status != "error" || r.ErrorType != tc.typ || r.Error == "" {
			t.Errorf("%s %v: %d %s %s %.200s, want %d %s", tc.path, tc.q, code, r.ErrorType, r.Error, r.Data, tc.code, tc.typ)
		}
	}
	write(120, 121)

	// Over the limit while reading (the Queryable's own count, before
	// the engine's): also a 422, and the node goes on serving.
	small := prom.NewAPI(n.Engine(), prom.Limits{MaxSamples: 100}, version.Info{Version: "test"}, nil)
	mux := http.NewServeMux()
	small.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	code, r = client{t, srv.URL}.get("/api/v1/query", url.Values{"query": {"count_over_time(cpu_usage_user[20m])"}, "time": {strconv.FormatInt(t0+1190, 10)}})
	if code != 422 || r.ErrorType != "execution" || !strings.Contains(r.Error, "too many samples") {
		t.Fatalf("over the read limit: %d %s %s", code, r.ErrorType, r.Error)
	}
	// The same for an aggregation of a rollup, which the API evaluates
	// without the engine; and its timeout is Prometheus' 503.
	window := url.Values{"start": {strconv.FormatInt(t0, 10)}, "end": {strconv.FormatInt(t0+1190, 10)}, "step": {"1200"}}
	window.Set("query", "sum(max_over_time(cpu_usage_user[20m]))")
	code, r = client{t, srv.URL}.get("/api/v1/query_range", window)
	if code != 422 || r.ErrorType != "execution" || !strings.Contains(r.Error, "too many samples") {
		t.Fatalf("over the read limit without the engine: %d %s %s", code, r.ErrorType, r.Error)
	}
	window.Set("timeout", "0.000000001") // 1 ns: over before it starts
	code, r = c.get("/api/v1/query_range", window)
	if code != 503 || r.ErrorType != "timeout" {
		t.Fatalf("timed out without the engine: %d %s %s", code, r.ErrorType, r.Error)
	}
}

// With the stats parameter a query's answer says how many samples it
// read (data.stats.samples.totalQueryableSamples, Prometheus' name): the
// samples its scans read, each once; without it there is no stats object.
func TestQueryStatsCountSamplesRead(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	base := "http://" + n.HTTPAddr()
	c := client{t, base}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	var b strings.Builder
	for i := range 120 { // 20 minutes of two hosts, a sample every 10 s
		fmt.Fprintf(&b, "cpu,host=a usage_user=%d %d\n", i, t0+int64(i)*10)
		fmt.Fprintf(&b, "cpu,host=b usage_user=%d %d\n", i, t0+int64(i)*10)
	}
	resp, err := http.Post(base+"/write?db=x&precision=s", "text/plain", strings.NewReader(b.String()))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write: %v %v", resp, err)
	}
	resp.Body.Close()
	read := func(path string, q url.Values) (int64, bool) {
		t.Helper()
		code, r := c.get(path, q)
		if code != 200 {
			t.Fatalf("%s %v: %d %+v", path, q, code, r)
		}
		var d struct {
			Stats *struct {
				Samples struct {
					Total *int64 `json:"totalQueryableSamples"`
				} `json:"samples"`
			} `json:"stats"`
		}
		if err := json.Unmarshal(r.Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.Stats == nil {
			return 0, false
		}
		if d.Stats.Samples.Total == nil {
			t.Fatalf("%s: stats without totalQueryableSamples: %s", path, r.Data)
		}
		return *d.Stats.Samples.Total, true
	}
	span := func(q string, step string, stats bool) url.Values {
		v := url.Values{"query": {q}, "start": {strconv.FormatInt(t0+600, 10)}, "end": {strconv.FormatInt(t0+1190, 10)}, "step": {step}}
		if stats {
			v.Set("stats", "all")
		}
		return v
	}
	if _, ok := read("/api/v1/query_range", span("cpu_usage_user", "10", false)); ok {
		t.Fatal("stats without the stats parameter")
	}
	// The samples of (t0+600-5m, t0+1190] of both hosts: 30 + 59 each.
	if got, ok := read("/api/v1/query_range", span("cpu_usage_user", "10", true)); !ok || got != 2*89 {
		t.Fatalf("raw selection read %d samples (stats %v), want %d", got, ok, 2*89)
	}
	// avg_over_time over 1-minute windows stepped by a minute, rolled up
	// as the scan reads: the samples of (t0+540, t0+1190] of each host.
	if got, ok := read("/api/v1/query_range", span("avg_over_time(cpu_usage_user[1m])", "60", true)); !ok || got != 2*65 {
		t.Fatalf("rolled-up selection read %d samples (stats %v), want %d", got, ok, 2*65)
	}
	if got, ok := read("/api/v1/query", url.Values{"query": {"cpu_usage_user[1m]"}, "time": {strconv.FormatInt(t0+1190, 10)}, "stats": {"all"}}); !ok || got != 2*6 {
		t.Fatalf("instant range selection read %d samples (stats %v), want %d", got, ok, 2*6)
	}
}
