package prom_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/server/servertest"
)

type marshaler interface{ Marshal() ([]byte, error) }

func send(t testing.TB, base string, m marshaler, contentType string) *http.Response {
	t.Helper()
	raw, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", base+"/api/v1/write", bytes.NewReader(snappy.Encode(nil, raw)))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Content-Encoding", "snappy")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// Remote write 1.0 and 2.0 requests, built as the spec describes (snappy
// block-compressed protobuf), store each metric as a table read back under
// its bare name; 2.0 answers with the written counts; bad requests are
// 400 (not retried) and unknown formats 415.
func TestRemoteWriteV1AndV2(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	base := "http://" + n.HTTPAddr()
	const t0 = 1767225600000 // ms
	v1 := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:  []prompb.Label{{Name: "__name__", Value: "http_requests_total"}, {Name: "job", Value: "api"}, {Name: "instance", Value: "a:9090"}},
		Samples: []prompb.Sample{{Value: 1, Timestamp: t0}, {Value: 3, Timestamp: t0 + 15000}, {Value: math.Float64frombits(value.StaleNaN), Timestamp: t0 + 30000}},
	}}}
	if resp := send(t, base, v1, "application/x-protobuf"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("v1: %d", resp.StatusCode)
	}
	// 2.0: labels by reference into the symbols table ("" first).
	v2 := &writev2.Request{
		Symbols: []string{"", "__name__", "http_requests_total", "job", "api", "instance", "b:9090"},
		Timeseries: []writev2.TimeSeries{{
			LabelsRefs: []uint32{1, 2, 3, 4, 5, 6},
			Samples:    []writev2.Sample{{Value: 10, Timestamp: t0}, {Value: 20, Timestamp: t0 + 15000}},
		}},
	}
	resp := send(t, base, v2, "application/x-protobuf;proto=io.prometheus.write.v2.Request")
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-Prometheus-Remote-Write-Samples-Written") != "2" ||
		resp.Header.Get("X-Prometheus-Remote-Write-Histograms-Written") != "0" || resp.Header.Get("X-Prometheus-Remote-Write-Exemplars-Written") != "0" {
		t.Fatalf("v2: %d %v", resp.StatusCode, resp.Header)
	}
	c := client{t, base}
	code, r := c.get("/api/v1/query", url.Values{"query": {`sum(http_requests_total{job="api"})`}, "time": {strconv.Itoa(t0/1000 + 20)}})
	if code != 200 || !strings.Contains(string(r.Data), `"23"`) {
		t.Fatalf("sum after both writes: %d %s", code, r.Data)
	}
	// Bad data: 400; an unknown format: 415.
	noName := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: []prompb.Label{{Name: "job", Value: "x"}}, Samples: []prompb.Sample{{Value: 1, Timestamp: t0}}}}}
	if resp := send(t, base, noName, "application/x-protobuf"); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("no __name__: %d", resp.StatusCode)
	}
	badRef := &writev2.Request{Symbols: []string{""}, Timeseries: []writev2.TimeSeries{{LabelsRefs: []uint32{1, 2}, Samples: []writev2.Sample{{Value: 1, Timestamp: t0}}}}}
	if resp := send(t, base, badRef, "application/x-protobuf;proto=io.prometheus.write.v2.Request"); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("v2 reference past the symbols: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest("POST", base+"/api/v1/write", strings.NewReader("not snappy"))
	req.Header.Set("Content-Type", "application/x-protobuf")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("not snappy: %v %v", resp, err)
	}
	if resp := send(t, base, v1, "application/json"); resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("json: %d", resp.StatusCode)
	}
}

// Every float64 Prometheus sends is stored and read back as Prometheus
// reads it: NaN and ±Inf as values, a staleness marker ending its series
// at once (not after the lookback delta), from the memtable and from SSTs
// alike.
func TestRemoteWriteStoresNaNInfinitiesAndStaleness(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	base := "http://" + n.HTTPAddr()
	const t0 = 1767225600000 // ms
	stale := math.Float64frombits(value.StaleNaN)
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		{Labels: []prompb.Label{{Name: "__name__", Value: "q"}, {Name: "quantile", Value: "0.5"}},
			Samples: []prompb.Sample{{Value: math.NaN(), Timestamp: t0}, {Value: 2, Timestamp: t0 + 15000}}},
		{Labels: []prompb.Label{{Name: "__name__", Value: "infinite"}, {Name: "sign", Value: "plus"}},
			Samples: []prompb.Sample{{Value: math.Inf(1), Timestamp: t0}}},
		{Labels: []prompb.Label{{Name: "__name__", Value: "infinite"}, {Name: "sign", Value: "minus"}},
			Samples: []prompb.Sample{{Value: math.Inf(-1), Timestamp: t0}}},
		{Labels: []prompb.Label{{Name: "__name__", Value: "gone"}},
			Samples: []prompb.Sample{{Value: 7, Timestamp: t0}, {Value: stale, Timestamp: t0 + 15000}}},
	}}
	if resp := send(t, base, req, "application/x-protobuf"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write: %d", resp.StatusCode)
	}
	c := client{t, base}
	at := func(query string, ms int64) string {
		t.Helper()
		code, r := c.get("/api/v1/query", url.Values{"query": {query}, "time": {strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64)}})
		if code != 200 {
			t.Fatalf("%s: %d %s", query, code, r.Data)
		}
		return string(r.Data)
	}
	check := func(when string) {
		t.Helper()
		for _, c := range []struct {
			query string
			ms    int64
			want  string
		}{
			{`q`, t0, `"NaN"`},
			{`q`, t0 + 15000, `"2"`},
			{`infinite{sign="plus"}`, t0, `"+Inf"`},
			{`infinite{sign="minus"}`, t0, `"-Inf"`},
			{`gone`, t0 + 5000, `"7"`},
			{`count_over_time(q[1m])`, t0 + 20000, `"2"`},
		} {
			if got := at(c.query, c.ms); !strings.Contains(got, c.want) {
				t.Errorf("%s: %s at %d: %s, want %s", when, c.query, c.ms, got, c.want)
			}
		}
		// The marker ends the series: nothing after it, though the
		// lookback delta (5m) would reach the sample before it.
		if got := at(`gone`, t0+20000); strings.Contains(got, `"7"`) {
			t.Errorf("%s: gone after its staleness marker: %s", when, got)
		}
	}
	check("from the memtable")
	if err := n.Engine().Flush(context.Background(), catalog.MetricsTable); err != nil {
		t.Fatal(err)
	}
	check("from an SST")
}

// A request is stored as far as it can be: the series and samples that can
// never be stored are refused, counted and named in a 400 (not retried by
// Prometheus), and everything else in the request is written.
func TestRemoteWritePartial(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	base := "http://" + n.HTTPAddr()
	const t0 = 1767225600000 // ms
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		{Labels: []prompb.Label{{Name: "__name__", Value: "ok"}, {Name: "job", Value: "a"}},
			Samples: []prompb.Sample{{Value: 1, Timestamp: t0}, {Value: 2, Timestamp: math.MaxInt64}}},
		{Labels: []prompb.Label{{Name: "job", Value: "nameless"}}, Samples: []prompb.Sample{{Value: 1, Timestamp: t0}}},
		{Labels: []prompb.Label{{Name: "__name__", Value: "bad"}, {Name: "x\x01", Value: "y"}}, Samples: []prompb.Sample{{Value: 1, Timestamp: t0}}},
		{Labels: []prompb.Label{{Name: "__name__", Value: "twice"}, {Name: "a", Value: "1"}, {Name: "a", Value: "2"}}, Samples: []prompb.Sample{{Value: 1, Timestamp: t0}}},
		{Labels: []prompb.Label{{Name: "__name__", Value: "hist"}}, Histograms: []prompb.Histogram{{Timestamp: t0}}},
		// Labels named like the table's columns are labels like any other.
		{Labels: []prompb.Label{{Name: "__name__", Value: "ok"}, {Name: "job", Value: "b"}, {Name: "value", Value: "v"}, {Name: "time", Value: "t"}},
			Samples: []prompb.Sample{{Value: 3, Timestamp: t0}}},
	}}
	raw, _ := req.Marshal()
	hreq, _ := http.NewRequest("POST", base+"/api/v1/write", bytes.NewReader(snappy.Encode(nil, raw)))
	hreq.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "5 of 7 samples refused, the other 2 stored") ||
		!strings.Contains(string(body), "out of range") || !strings.Contains(string(body), "no __name__") || !strings.Contains(string(body), "and 2 more") {
		t.Fatalf("partial write: %d %s", resp.StatusCode, body)
	}
	c := client{t, base}
	code, r := c.get("/api/v1/query", url.Values{"query": {`sum(ok)`}, "time": {strconv.Itoa(t0 / 1000)}})
	if code != 200 || !strings.Contains(string(r.Data), `"4"`) {
		t.Fatalf("the request's storable samples: %d %s", code, r.Data)
	}
	code, r = c.get("/api/v1/series", url.Values{"match[]": {`ok{value="v",time="t"}`}})
	if code != 200 || !strings.Contains(string(r.Data), `"job":"b"`) {
		t.Fatalf("labels named value and time: %d %s", code, r.Data)
	}
}

// Metric names are label values of one table: a thousand names make no
// table, region or catalog entry of their own, and the label and series
// APIs list them.
func TestRemoteWriteNamesShareOneTable(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	base := "http://" + n.HTTPAddr()
	const t0 = 1767225600000 // ms
	const names = 1000
	req := &prompb.WriteRequest{}
	for i := range names {
		for s := range 3 {
			req.Timeseries = append(req.Timeseries, prompb.TimeSeries{
				Labels:  []prompb.Label{{Name: "__name__", Value: fmt.Sprintf("metric_%04d", i)}, {Name: "instance", Value: strconv.Itoa(s)}, {Name: "job", Value: "bench"}},
				Samples: []prompb.Sample{{Value: float64(i), Timestamp: t0}},
			})
		}
	}
	if resp := send(t, base, req, "application/x-protobuf"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write: %d", resp.StatusCode)
	}
	tables := n.Engine().Tables()
	if len(tables) != 1 || tables[0].Name != catalog.MetricsTable || tables[0].Regions != 1 {
		t.Fatalf("tables after %d names: %+v", names, tables)
	}
	if cols := tables[0].Schema.Columns; len(cols) != 2 {
		t.Fatalf("the metrics table's columns grew with the labels: %+v", cols)
	}
	c := client{t, base}
	names1 := func(when string) {
		t.Helper()
		code, r := c.get("/api/v1/label/__name__/values", nil)
		var vals []string
		if code != 200 || json.Unmarshal(r.Data, &vals) != nil || len(vals) != names || vals[0] != "metric_0000" || vals[names-1] != "metric_0999" {
			t.Fatalf("names %s: %d %d values: %.200s", when, code, len(vals), r.Data)
		}
		code, r = c.get("/api/v1/label/instance/values", nil)
		if code != 200 || string(r.Data) != `["0","1","2"]` {
			t.Fatalf("instances %s: %d %s", when, code, r.Data)
		}
	}
	names1("in the memtable")
	if err := n.Engine().Flush(context.Background(), catalog.MetricsTable); err != nil {
		t.Fatal(err)
	}
	names1("in an SST")
	code, r := c.get("/api/v1/labels", nil)
	if code != 200 || string(r.Data) != `["__name__","instance","job"]` {
		t.Fatalf("label names: %d %s", code, r.Data)
	}
	code, r = c.get("/api/v1/query", url.Values{"query": {`count(count by (__name__) ({job="bench"}))`}, "time": {strconv.Itoa(t0 / 1000)}})
	if code != 200 || !strings.Contains(string(r.Data), fmt.Sprintf(`"%d"`, names)) {
		t.Fatalf("count by name: %d %s", code, r.Data)
	}
	code, r = c.get("/api/v1/query", url.Values{"query": {`sum by (instance) (metric_0042)`}, "time": {strconv.Itoa(t0 / 1000)}})
	if code != 200 || strings.Count(string(r.Data), `"42"`) != 3 {
		t.Fatalf("one name: %d %s", code, r.Data)
	}
}

// The metrics table is written by remote write alone: a line-protocol
// point there is refused (it could retype the value column and refuse every
// remote write after). A metric written both by line protocol (table up,
// field value) and by remote write (as a store upgraded from one table a
// metric has) reads as one series, not two with one labelset.
func TestMetricsTableIsRemoteWriteOnlyAndMergesWithATable(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	base := "http://" + n.HTTPAddr()
	const t0 = 1767225600000 // ms
	line := func(body string) int {
		t.Helper()
		resp, err := http.Post(base+"/write?db=x&precision=ms", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := line(fmt.Sprintf("up,job=api value=1 %d\nup,job=api value=1 %d\n", t0, t0+15000)); code != http.StatusNoContent {
		t.Fatalf("line protocol: %d", code)
	}
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:  []prompb.Label{{Name: "__name__", Value: "up"}, {Name: "job", Value: "api"}},
		Samples: []prompb.Sample{{Value: 2, Timestamp: t0 + 15000}, {Value: 2, Timestamp: t0 + 30000}},
	}}}
	if resp := send(t, base, req, "application/x-protobuf"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("remote write: %d", resp.StatusCode)
	}
	if code := line(fmt.Sprintf("__metrics,job=x value=\"s\" %d\n", t0)); code != http.StatusBadRequest {
		t.Fatalf("line protocol into the metrics table: %d", code)
	}
	c := client{t, base}
	for q, want := range map[string]string{
		`count(up)`:                `"1"`,
		`count_over_time(up[1m])`:  `"3"`, // t0, t0+15s (remote write's), t0+30s
		`sum_over_time(up[1m])`:    `"5"`, // 1 + 2 + 2
		`count(rate(up[1m]) >= 0)`: `"1"`,
	} {
		code, r := c.get("/api/v1/query", url.Values{"query": {q}, "time": {strconv.Itoa(t0/1000 + 40)}})
		if code != 200 || !strings.Contains(string(r.Data), want) {
			t.Errorf("%s: %d %s, want %s", q, code, r.Data, want)
		}
	}
	// Remote write still works after the refused line.
	if resp := send(t, base, req, "application/x-protobuf"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("remote write after: %d", resp.StatusCode)
	}
}
