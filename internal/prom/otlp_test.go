package prom_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

type vector []struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// instant runs query at time at (zero: now) and returns its series by
// their labels' text, each with its value.
func instant(t *testing.T, c client, query string, at time.Time) map[string]string {
	t.Helper()
	q := url.Values{"query": {query}}
	if !at.IsZero() {
		q.Set("time", strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64))
	}
	code, r := c.get("/api/v1/query", q)
	if code != http.StatusOK {
		t.Fatalf("%s: %d %s", query, code, r.Error)
	}
	var v vector
	if err := json.Unmarshal(r.Data, &struct {
		Result *vector `json:"result"`
	}{&v}); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range v {
		var kv []string
		for k, v := range s.Metric {
			kv = append(kv, k, v)
		}
		out[series(kv...)] = s.Value[1].(string)
	}
	return out
}

// series is the text instant gives the series of labels kv (name, value,
// name, value...).
func series(kv ...string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Quote(m[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func equal(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Errorf("%s:\n got %v\nwant %v", what, got, want)
	}
}

// The OpenTelemetry Go SDK's own OTLP/HTTP exporter (protobuf, gzip), fed
// by a MeterProvider with a counter, an up-down counter, a gauge and a
// histogram, exports into a standalone; PromQL reads its metrics back with
// the names and labels Prometheus' OTLP receiver gives them: _total on the
// counter, the unit as a suffix, _bucket{le}, _sum and _count, job and
// instance from service.namespace, service.name and service.instance.id,
// the promoted attribute on every series and the others on target_info.
func TestOTLPFromTheOpenTelemetrySDK(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{Config: func(c *server.Config) {
		c.OTLP.PromoteResourceAttributes = []string{"deployment.environment"}
	}})
	ctx := context.Background()
	exp, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpoint(n.HTTPAddr()), otlpmetrichttp.WithInsecure(),
		otlpmetrichttp.WithURLPath("/opentelemetry/v1/metrics"), otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression))
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "checkout"), attribute.String("service.namespace", "shop"),
		attribute.String("service.instance.id", "pod-1"), attribute.String("service.version", "1.2.3"), attribute.String("deployment.environment", "prod"))
	// An hour-long interval: only ForceFlush exports.
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(time.Hour))))
	defer func() { _ = mp.Shutdown(ctx) }()
	m := mp.Meter("strata/test")
	requests, _ := m.Int64Counter("http.server.requests", metric.WithUnit("{request}"))
	active, _ := m.Int64UpDownCounter("active.connections", metric.WithUnit("{connection}"))
	queue, _ := m.Float64Gauge("queue.size", metric.WithUnit("By"))
	latency, _ := m.Float64Histogram("request.duration", metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(0.1, 0.5, 1))
	get := metric.WithAttributes(attribute.String("http.method", "GET"))
	requests.Add(ctx, 5, get)
	requests.Add(ctx, 2, metric.WithAttributes(attribute.String("http.method", "POST")))
	active.Add(ctx, 3)
	active.Add(ctx, -1)
	queue.Record(ctx, 42)
	for _, v := range []float64{0.05, 0.3, 0.7, 2} {
		latency.Record(ctx, v, get)
	}
	if err := mp.ForceFlush(ctx); err != nil {
		t.Fatalf("export: %v", err)
	}

	c := client{t, "http://" + n.HTTPAddr()}
	// Every series: the job and instance the resource names, and its
	// promoted attribute.
	at := func(kv ...string) string {
		return series(append(kv, "job", "shop/checkout", "instance", "pod-1", "deployment_environment", "prod")...)
	}
	equal(t, "counter", instant(t, c, "http_server_requests_total", time.Time{}), map[string]string{
		at("__name__", "http_server_requests_total", "http_method", "GET"):  "5",
		at("__name__", "http_server_requests_total", "http_method", "POST"): "2",
	})
	equal(t, "up-down counter", instant(t, c, "active_connections", time.Time{}), map[string]string{
		at("__name__", "active_connections"): "2",
	})
	equal(t, "gauge", instant(t, c, "queue_size_bytes", time.Time{}), map[string]string{
		at("__name__", "queue_size_bytes"): "42",
	})
	equal(t, "histogram", instant(t, c, `{__name__=~"request_duration_seconds_.*"}`, time.Time{}), map[string]string{
		at("__name__", "request_duration_seconds_bucket", "http_method", "GET", "le", "0.1"):  "1",
		at("__name__", "request_duration_seconds_bucket", "http_method", "GET", "le", "0.5"):  "2",
		at("__name__", "request_duration_seconds_bucket", "http_method", "GET", "le", "1"):    "3",
		at("__name__", "request_duration_seconds_bucket", "http_method", "GET", "le", "+Inf"): "4",
		at("__name__", "request_duration_seconds_sum", "http_method", "GET"):                  "3.05",
		at("__name__", "request_duration_seconds_count", "http_method", "GET"):                "4",
	})
	equal(t, "histogram_quantile", instant(t, c, `histogram_quantile(0.5, request_duration_seconds_bucket)`, time.Time{}), map[string]string{
		at("http_method", "GET"): "0.5",
	})
	// The resource's other attributes are target_info's.
	equal(t, "target_info", instant(t, c, "target_info", time.Time{}), map[string]string{
		at("__name__", "target_info", "service_version", "1.2.3"): "1",
	})
	if got := counter(t, n, "strata_otlp_samples_total"); got < 11 {
		t.Errorf("strata_otlp_samples_total %v, want at least the 11 samples read back", got)
	}
}

// counter is the value of a counter n exposes.
func counter(t *testing.T, n *servertest.Node, name string) float64 {
	t.Helper()
	fams, err := n.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// otlpPost sends body as it is and returns the status, the answer's
// Content-Type and its body.
func otlpPost(t *testing.T, base string, body []byte, contentType, encoding string) (int, string, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/opentelemetry/v1/metrics", bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), out
}

// otlpStatus decodes an error answer's google.rpc.Status.
func otlpStatus(t *testing.T, body []byte, asJSON bool) string {
	t.Helper()
	var st spb.Status
	var err error
	if asJSON {
		err = protojson.Unmarshal(body, &st)
	} else {
		err = proto.Unmarshal(body, &st)
	}
	if err != nil {
		t.Fatalf("answer %q is not a Status: %v", body, err)
	}
	return st.GetMessage()
}

// otlpMetrics is a request of one resource (service.name "svc") whose
// metrics add fills in, its points at ts.
func otlpMetrics(add func(ms pmetric.MetricSlice, ts pcommon.Timestamp)) pmetricotlp.ExportRequest {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "svc")
	add(rm.ScopeMetrics().AppendEmpty().Metrics(), pcommon.NewTimestampFromTime(time.Now()))
	return pmetricotlp.NewExportRequestFromMetrics(md)
}

func gauge(ms pmetric.MetricSlice, name string, ts pcommon.Timestamp, v float64, attrs ...string) {
	m := ms.AppendEmpty()
	m.SetName(name)
	dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.SetTimestamp(ts)
	dp.SetDoubleValue(v)
	for i := 0; i+1 < len(attrs); i += 2 {
		dp.Attributes().PutStr(attrs[i], attrs[i+1])
	}
}

func deltaSum(ms pmetric.MetricSlice, name string, ts pcommon.Timestamp) {
	m := ms.AppendEmpty()
	m.SetName(name)
	s := m.SetEmptySum()
	s.SetIsMonotonic(true)
	s.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	for range 2 {
		dp := s.DataPoints().AppendEmpty()
		dp.SetTimestamp(ts)
		dp.SetIntValue(3)
	}
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A JSON body and a gzipped protobuf one are stored and answered 200 with
// an ExportMetricsServiceResponse in their own encoding, without partial
// success; a summary becomes its quantiles, _sum and _count.
func TestOTLPJSONAndGzip(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	base := "http://" + n.HTTPAddr()
	c := client{t, base}

	req := otlpMetrics(func(ms pmetric.MetricSlice, ts pcommon.Timestamp) { gauge(ms, "temperature", ts, 21.5, "room", "a") })
	body, err := req.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	code, ct, out := otlpPost(t, base, body, "application/json", "")
	if code != http.StatusOK || ct != "application/json" {
		t.Fatalf("json: %d %s %s", code, ct, out)
	}
	resp := pmetricotlp.NewExportResponse()
	if err := resp.UnmarshalJSON(out); err != nil || resp.PartialSuccess().RejectedDataPoints() != 0 || resp.PartialSuccess().ErrorMessage() != "" {
		t.Fatalf("json answer %s: %v", out, err)
	}
	equal(t, "json", instant(t, c, "temperature", time.Time{}), map[string]string{series("__name__", "temperature", "job", "svc", "room", "a"): "21.5"})

	req = otlpMetrics(func(ms pmetric.MetricSlice, ts pcommon.Timestamp) {
		m := ms.AppendEmpty()
		m.SetName("rpc.latency")
		m.SetUnit("ms")
		dp := m.SetEmptySummary().DataPoints().AppendEmpty()
		dp.SetTimestamp(ts)
		dp.SetCount(10)
		dp.SetSum(123)
		q := dp.QuantileValues().AppendEmpty()
		q.SetQuantile(0.99)
		q.SetValue(40)
	})
	body, err = req.MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	code, ct, out = otlpPost(t, base, gzipped(t, body), "application/x-protobuf", "gzip")
	if code != http.StatusOK || ct != "application/x-protobuf" {
		t.Fatalf("gzip: %d %s %s", code, ct, out)
	}
	if err := resp.UnmarshalProto(out); err != nil || resp.PartialSuccess().RejectedDataPoints() != 0 {
		t.Fatalf("gzip answer %q: %v", out, err)
	}
	equal(t, "summary", instant(t, c, `{__name__=~"rpc_latency_milliseconds.*"}`, time.Time{}), map[string]string{
		series("__name__", "rpc_latency_milliseconds", "job", "svc", "quantile", "0.99"): "40",
		series("__name__", "rpc_latency_milliseconds_sum", "job", "svc"):                 "123",
		series("__name__", "rpc_latency_milliseconds_count", "job", "svc"):               "10",
	})
}

// Requests that can never be stored are answered the OTLP/HTTP way, with a
// google.rpc.Status saying why: an unknown Content-Type or
// Content-Encoding 415, a body that is not a request 400, one over
// MaxRemoteWriteBytes (sent or once decompressed) 413, only delta sums
// 400 naming the metric, and a resource whose points span two days 400.
// Nothing of them is stored.
func TestOTLPRefusals(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	base := "http://" + n.HTTPAddr()
	c := client{t, base}
	good, err := otlpMetrics(func(ms pmetric.MetricSlice, ts pcommon.Timestamp) { gauge(ms, "g", ts, 1) }).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	if code, _, out := otlpPost(t, base, good, "text/plain", ""); code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d %s", code, out)
	}
	if code, _, out := otlpPost(t, base, good, "application/x-protobuf", "snappy"); code != http.StatusUnsupportedMediaType || !strings.Contains(otlpStatus(t, out, false), "snappy") {
		t.Errorf("snappy: %d %s", code, out)
	}
	if code, ct, out := otlpPost(t, base, []byte("\xff\xff\xff"), "application/x-protobuf", ""); code != http.StatusBadRequest || ct != "application/x-protobuf" || !strings.Contains(otlpStatus(t, out, false), "bad OTLP metrics request") {
		t.Errorf("not protobuf: %d %s %q", code, ct, out)
	}
	if code, _, out := otlpPost(t, base, []byte(`{"resourceMetrics": [`), "application/json", ""); code != http.StatusBadRequest || !strings.Contains(otlpStatus(t, out, true), "bad OTLP metrics request") {
		t.Errorf("not JSON: %d %s", code, out)
	}
	if code, _, out := otlpPost(t, base, good, "application/x-protobuf", "gzip"); code != http.StatusBadRequest || !strings.Contains(otlpStatus(t, out, false), "gzip") {
		t.Errorf("not gzip: %d %s", code, out)
	}
	huge := make([]byte, prom.MaxRemoteWriteBytes+1)
	if code, _, out := otlpPost(t, base, huge, "application/x-protobuf", ""); code != http.StatusRequestEntityTooLarge {
		t.Errorf("too large: %d %s", code, out)
	}
	if code, _, out := otlpPost(t, base, gzipped(t, huge), "application/x-protobuf", "gzip"); code != http.StatusRequestEntityTooLarge || !strings.Contains(otlpStatus(t, out, false), "decompressed") {
		t.Errorf("too large once decompressed: %d %s", code, out)
	}
	delta, err := otlpMetrics(func(ms pmetric.MetricSlice, ts pcommon.Timestamp) { deltaSum(ms, "jobs.done", ts) }).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	code, _, out := otlpPost(t, base, delta, "application/json", "")
	if msg := otlpStatus(t, out, true); code != http.StatusBadRequest || !strings.Contains(msg, `metric "jobs.done": delta temporality is not supported`) || !strings.Contains(msg, "2 of 2 data points refused") {
		t.Errorf("delta sum: %d %s", code, out)
	}
	// Points two days apart: target_info would need a sample every 2m30s
	// between them.
	apart, err := otlpMetrics(func(ms pmetric.MetricSlice, ts pcommon.Timestamp) {
		gauge(ms, "g", ts, 1)
		gauge(ms, "g", pcommon.NewTimestampFromTime(ts.AsTime().Add(-48*time.Hour)), 1)
	}).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	code, _, out = otlpPost(t, base, apart, "application/x-protobuf", "")
	if msg := otlpStatus(t, out, false); code != http.StatusBadRequest || !strings.Contains(msg, `resource service.name="svc" span 48h0m0s, more than 24h0m0s`) {
		t.Errorf("points two days apart: %d %s", code, msg)
	}
	if got := instant(t, c, `{__name__=~"g|jobs_done.*|target_info"}`, time.Time{}); len(got) != 0 {
		t.Errorf("refused requests stored %v", got)
	}
	if got := counter(t, n, "strata_otlp_refused_data_points_total"); got != 4 {
		t.Errorf("strata_otlp_refused_data_points_total %v, want the delta sum's 2 and the 2 two days apart", got)
	}
}

// A request some of whose data points can never be stored (a delta sum, an
// exponential histogram, a gauge point with a label name over the limit)
// stores the others and answers 200 with partial_success: how many were
// rejected and why.
func TestOTLPPartialSuccess(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	base := "http://" + n.HTTPAddr()
	long := strings.Repeat("k", 300)
	req := otlpMetrics(func(ms pmetric.MetricSlice, ts pcommon.Timestamp) {
		gauge(ms, "ok", ts, 7)
		gauge(ms, "bad", ts, 1, long, "v")
		deltaSum(ms, "jobs.done", ts)
		m := ms.AppendEmpty()
		m.SetName("sizes")
		eh := m.SetEmptyExponentialHistogram()
		eh.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		dp := eh.DataPoints().AppendEmpty()
		dp.SetTimestamp(ts)
		dp.SetCount(1)
	})
	body, err := req.MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	code, _, out := otlpPost(t, base, body, "application/x-protobuf", "")
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, out)
	}
	resp := pmetricotlp.NewExportResponse()
	if err := resp.UnmarshalProto(out); err != nil {
		t.Fatal(err)
	}
	ps := resp.PartialSuccess()
	msg := ps.ErrorMessage()
	if ps.RejectedDataPoints() != 4 || !strings.Contains(msg, "4 of 5 data points refused") || !strings.Contains(msg, `metric "jobs.done": delta temporality`) ||
		!strings.Contains(msg, `metric "sizes": exponential histograms`) || !strings.Contains(msg, "longer than 256 bytes") {
		t.Errorf("partial success: %d %q", ps.RejectedDataPoints(), msg)
	}
	c := client{t, base}
	equal(t, "stored", instant(t, c, `{__name__=~"ok|bad|jobs_done.*|sizes.*"}`, time.Time{}), map[string]string{series("__name__", "ok", "job", "svc"): "7"})
	if got := counter(t, n, "strata_otlp_refused_data_points_total"); got != 4 {
		t.Errorf("strata_otlp_refused_data_points_total %v, want 4", got)
	}
}

// --otlp-translation-strategy is Prometheus' translation_strategy: without
// suffixes a counter has no _total and no unit; NoTranslation keeps the
// names as sent. A strategy Prometheus does not know is refused.
func TestOTLPTranslationStrategy(t *testing.T) {
	for _, tc := range []struct {
		strategy otlptranslator.TranslationStrategyOption
		want     string
	}{
		{otlptranslator.UnderscoreEscapingWithSuffixes, series("__name__", "jobs_done_seconds_total", "job", "svc", "queue_name", "q")},
		{otlptranslator.UnderscoreEscapingWithoutSuffixes, series("__name__", "jobs_done", "job", "svc", "queue_name", "q")},
		{otlptranslator.NoTranslation, series("__name__", "jobs.done", "job", "svc", "queue.name", "q")},
	} {
		t.Run(string(tc.strategy), func(t *testing.T) {
			n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{Config: func(c *server.Config) { c.OTLP.TranslationStrategy = tc.strategy }})
			base := "http://" + n.HTTPAddr()
			body, err := otlpMetrics(func(ms pmetric.MetricSlice, ts pcommon.Timestamp) {
				m := ms.AppendEmpty()
				m.SetName("jobs.done")
				m.SetUnit("s")
				s := m.SetEmptySum()
				s.SetIsMonotonic(true)
				s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
				dp := s.DataPoints().AppendEmpty()
				dp.SetTimestamp(ts)
				dp.SetDoubleValue(9)
				dp.Attributes().PutStr("queue.name", "q")
			}).MarshalProto()
			if err != nil {
				t.Fatal(err)
			}
			if code, _, out := otlpPost(t, base, body, "application/x-protobuf", ""); code != http.StatusOK {
				t.Fatalf("%d %q", code, out)
			}
			equal(t, "stored", instant(t, client{t, base}, `{__name__=~"jobs.*", job="svc"}`, time.Time{}), map[string]string{tc.want: "9"})
		})
	}
	if err := (prom.OTLPOptions{TranslationStrategy: "Bogus"}).Check(); err == nil {
		t.Error("an unknown translation strategy passed Check")
	}
	if err := (prom.OTLPOptions{PromoteResourceAttributes: []string{" "}}).Check(); err == nil {
		t.Error("an empty promoted attribute passed Check")
	}
}

// A datanode of a cluster serves OTLP too: series sent to one datanode,
// spread over the metrics table's regions on both, read back through the
// other.
func TestOTLPOnADatanode(t *testing.T) {
	c := servertest.StartCluster(t, 2, servertest.ClusterOptions{DefaultRegions: 2})
	dn1, dn2 := "http://"+c.Datanodes[0].HTTPAddr(), "http://"+c.Datanodes[1].HTTPAddr()
	want := map[string]string{}
	body, err := otlpMetrics(func(ms pmetric.MetricSlice, ts pcommon.Timestamp) {
		for i := range 20 {
			host := "h" + strconv.Itoa(i)
			gauge(ms, "load", ts, float64(i), "host", host)
			want[series("__name__", "load", "job", "svc", "host", host)] = strconv.Itoa(i)
		}
	}).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	if code, _, out := otlpPost(t, dn2, body, "application/x-protobuf", ""); code != http.StatusOK {
		t.Fatalf("%d %q", code, out)
	}
	equal(t, "through dn1", instant(t, client{t, dn1}, "load", time.Time{}), want)
}

// A data point Prometheus' converter drops (an attribute key it cannot
// make a label name of drops the rest of its metric) is rejected like one
// refused here: counted in rejected_data_points and the counter, and a
// request of nothing else is a 400, not a 200 that stored nothing. A
// resource attribute refused in target_info is a reason, not a data point.
func TestOTLPConverterRefusalsAreRejected(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	base := "http://" + n.HTTPAddr()
	post := func(req pmetricotlp.ExportRequest) (int, []byte) {
		t.Helper()
		body, err := req.MarshalProto()
		if err != nil {
			t.Fatal(err)
		}
		code, _, out := otlpPost(t, base, body, "application/x-protobuf", "")
		return code, out
	}

	code, out := post(otlpMetrics(func(ms pmetric.MetricSlice, ts pcommon.Timestamp) {
		gauge(ms, "dropped", ts, 1, "___", "v")
	}))
	if code != http.StatusBadRequest || !strings.Contains(otlpStatus(t, out, false), "1 of 1 data points refused") {
		t.Fatalf("only a point the converter drops: %d %q, want 400 naming 1 of 1 refused", code, otlpStatus(t, out, false))
	}

	code, out = post(otlpMetrics(func(ms pmetric.MetricSlice, ts pcommon.Timestamp) {
		gauge(ms, "kept", ts, 2)
		gauge(ms, "dropped_too", ts, 1, "", "v")
	}))
	resp := pmetricotlp.NewExportResponse()
	if err := resp.UnmarshalProto(out); code != http.StatusOK || err != nil {
		t.Fatalf("%d %v %s", code, err, out)
	}
	if ps := resp.PartialSuccess(); ps.RejectedDataPoints() != 1 || !strings.Contains(ps.ErrorMessage(), "1 of 2 data points refused") {
		t.Errorf("partial success %d %q, want 1 of 2 rejected", ps.RejectedDataPoints(), ps.ErrorMessage())
	}

	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "svc")
	rm.Resource().Attributes().PutStr(strings.Repeat("a", 300), "v") // a target_info label too long
	gauge(rm.ScopeMetrics().AppendEmpty().Metrics(), "with_info", pcommon.NewTimestampFromTime(time.Now()), 3)
	code, out = post(pmetricotlp.NewExportRequestFromMetrics(md))
	resp = pmetricotlp.NewExportResponse()
	if err := resp.UnmarshalProto(out); code != http.StatusOK || err != nil {
		t.Fatalf("%d %v %s", code, err, out)
	}
	if ps := resp.PartialSuccess(); ps.RejectedDataPoints() != 0 || !strings.Contains(ps.ErrorMessage(), "longer than 256 bytes") {
		t.Errorf("target_info refused: partial success %d %q, want 0 rejected and the reason", ps.RejectedDataPoints(), ps.ErrorMessage())
	}
	if got := counter(t, n, "strata_otlp_refused_data_points_total"); got != 2 {
		t.Errorf("strata_otlp_refused_data_points_total %v, want 2", got)
	}
	c := client{t, base}
	equal(t, "stored", instant(t, c, `{__name__=~"kept|with_info|dropped.*"}`, time.Time{}),
		map[string]string{series("__name__", "kept", "job", "svc"): "2", series("__name__", "with_info", "job", "svc"): "3"})
}

// A small request that would make a huge batch is refused whole with a
// 413 before the batch is made: 4,000 resources, each with two points 23
// hours apart, repeat target_info 553 times each (2.2M samples).
func TestOTLPRequestThatWouldMakeTooManySamples(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	base := "http://" + n.HTTPAddr()
	md := pmetric.NewMetrics()
	now := time.Now()
	for i := range 4000 {
		rm := md.ResourceMetrics().AppendEmpty()
		rm.Resource().Attributes().PutStr("service.name", "svc")
		rm.Resource().Attributes().PutStr("service.instance.id", strconv.Itoa(i))
		rm.Resource().Attributes().PutStr("host.name", "h")
		ms := rm.ScopeMetrics().AppendEmpty().Metrics()
		gauge(ms, "g", pcommon.NewTimestampFromTime(now.Add(-23*time.Hour)), 1)
		gauge(ms, "g", pcommon.NewTimestampFromTime(now), 1)
	}
	body, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	code, _, out := otlpPost(t, base, body, "application/x-protobuf", "")
	if msg := otlpStatus(t, out, false); code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "more than 2000000 samples") {
		t.Fatalf("%d bytes making 2.2M samples: %d %q, want 413", len(body), code, msg)
	}
	c := client{t, base}
	equal(t, "stored", instant(t, c, `{__name__=~"g|target_info"}`, time.Time{}), map[string]string{})
}
