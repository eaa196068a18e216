package prom_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/storage/remote"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// recording is an AppendableV2 that keeps the last value of each series
// appended, by series' text (series).
type recording map[string]string

func (r recording) AppenderV2(context.Context) storage.AppenderV2 { return r }

func (r recording) Append(_ storage.SeriesRef, ls labels.Labels, _, _ int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, _ storage.AOptions) (storage.SeriesRef, error) {
	var kv []string
	ls.Range(func(l labels.Label) { kv = append(kv, l.Name, l.Value) })
	r[series(kv...)] = strconv.FormatFloat(v, 'f', -1, 64)
	return 0, nil
}
func (r recording) Commit() error   { return nil }
func (r recording) Rollback() error { return nil }

// The same OTLP request, sent to Prometheus' own OTLP receiver (its
// storage/remote handler, over a recording storage) and to a standalone,
// gives the same series with the same values: every metric type Strata
// takes, units, dotted names, two resources, a promoted attribute and
// target_info.
func TestOTLPAsPrometheusReceives(t *testing.T) {
	ts := time.Now().Truncate(time.Second)
	md := pmetric.NewMetrics()
	for i, svc := range []string{"cart", "payments"} {
		rm := md.ResourceMetrics().AppendEmpty()
		attrs := rm.Resource().Attributes()
		attrs.PutStr("service.name", svc)
		attrs.PutStr("service.namespace", "shop")
		attrs.PutStr("service.instance.id", "pod-"+strconv.Itoa(i))
		attrs.PutStr("service.version", "2.0."+strconv.Itoa(i))
		attrs.PutStr("deployment.environment", "prod")
		attrs.PutStr("host.name", "node-1")
		sm := rm.ScopeMetrics().AppendEmpty()
		sm.Scope().SetName("io.example/instrumentation")
		ms := sm.Metrics()
		at := pcommon.NewTimestampFromTime(ts)
		start := pcommon.NewTimestampFromTime(ts.Add(-time.Minute))

		m := ms.AppendEmpty()
		m.SetName("http.server.request.count")
		m.SetUnit("{request}")
		sum := m.SetEmptySum()
		sum.SetIsMonotonic(true)
		sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		for j, route := range []string{"/", "/checkout"} {
			dp := sum.DataPoints().AppendEmpty()
			dp.SetStartTimestamp(start)
			dp.SetTimestamp(at)
			dp.SetIntValue(int64(10*i + j))
			dp.Attributes().PutStr("http.route", route)
			dp.Attributes().PutInt("http.response.status_code", 200)
		}

		m = ms.AppendEmpty()
		m.SetName("db.client.connections.usage")
		m.SetUnit("{connection}")
		ud := m.SetEmptySum()
		ud.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		dp := ud.DataPoints().AppendEmpty()
		dp.SetTimestamp(at)
		dp.SetIntValue(-3)

		m = ms.AppendEmpty()
		m.SetName("system.cpu.utilization")
		m.SetUnit("1")
		dp = m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetTimestamp(at)
		dp.SetDoubleValue(0.25)
		dp.Attributes().PutStr("cpu", "0")

		m = ms.AppendEmpty()
		m.SetName("http.server.request.duration")
		m.SetUnit("s")
		hist := m.SetEmptyHistogram()
		hist.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		hp := hist.DataPoints().AppendEmpty()
		hp.SetStartTimestamp(start)
		hp.SetTimestamp(at)
		hp.ExplicitBounds().FromRaw([]float64{0.005, 0.1, 1})
		hp.BucketCounts().FromRaw([]uint64{1, 4, 2, 1})
		hp.SetCount(8)
		hp.SetSum(3.7)

		m = ms.AppendEmpty()
		m.SetName("gc.pause")
		m.SetUnit("ms")
		sp := m.SetEmptySummary().DataPoints().AppendEmpty()
		sp.SetTimestamp(at)
		sp.SetCount(4)
		sp.SetSum(10)
		for _, q := range [][2]float64{{0.5, 2}, {0.99, 5}} {
			qv := sp.QuantileValues().AppendEmpty()
			qv.SetQuantile(q[0])
			qv.SetValue(q[1])
		}
	}
	body, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}

	// Prometheus, configured as the standalone is.
	want := recording{}
	cfg := config.DefaultConfig
	cfg.OTLPConfig.PromoteResourceAttributes = []string{"deployment.environment"}
	ph := remote.NewOTLPWriteHandler(slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), want, func() config.Config { return cfg }, remote.OTLPOptions{})
	req := httptest.NewRequest("POST", "/api/v1/otlp/v1/metrics", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-protobuf")
	rec := httptest.NewRecorder()
	ph.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || len(want) < 20 {
		t.Fatalf("Prometheus' receiver: %d %s, %d series", rec.Code, rec.Body, len(want))
	}

	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{Config: func(c *server.Config) {
		c.OTLP.PromoteResourceAttributes = []string{"deployment.environment"}
	}})
	base := "http://" + n.HTTPAddr()
	if code, _, out := otlpPost(t, base, body, "application/x-protobuf", ""); code != http.StatusOK {
		t.Fatalf("strata: %d %q", code, out)
	}
	equal(t, "Strata against Prometheus", instant(t, client{t, base}, `{__name__=~".+"}`, ts), want)
}
