package prom_test

import (
	"bytes"
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

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/server/servertest"
)

type marshaler interface{ Marshal() ([]byte, error) }

func send(t *testing.T, base string, m marshaler, contentType string) *http.Response {
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
