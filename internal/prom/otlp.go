package prom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/otlptranslator"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/storage/remote/otlptranslator/prometheusremotewrite"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/hatracker"
	"github.com/stratadb/strata/internal/limits"
	"github.com/stratadb/strata/internal/tenant"
)

// OTLP metrics on /opentelemetry/v1/metrics (OTLP/HTTP, protobuf or JSON,
// gzip or not): an ExportMetricsServiceRequest is translated by
// Prometheus' own OTLP converter (the one its receiver runs, with its
// settings) and its samples stored as remote write stores them, in the
// metrics table through a batcher and writeMetrics. So a metric reads back
// with the names and labels Prometheus would give it: a counter's _total,
// a histogram's _bucket{le}, _sum and _count, a summary's quantiles, job
// and instance from service.name and service.instance.id, and target_info
// with the other resource attributes.
//
// Delta temporality is refused (the metric named in the answer): turning
// deltas into cumulative sums, as Prometheus' delta-to-cumulative option
// does, needs each series' running sum in one process's memory, which a
// node behind a load balancer, or one restarted, does not have. So are
// exponential histograms, which Prometheus stores as native histograms,
// and a resource whose points span more than a day (maxResourceSpan).
//
// As OTLP/HTTP asks, a request some of whose data points are refused is
// answered 200 with partial_success (how many and the first reasons) when
// anything was stored, 400 when nothing was; a request that cannot be
// decoded is a 400, one over MaxRemoteWriteBytes a 413, an unknown
// Content-Type or Content-Encoding a 415, and a write that failed on the
// node a 503 (which exporters retry) unless it is bad input.

// OTLPOptions are Prometheus' OTLP settings (its configuration's otlp
// section) that Strata offers.
type OTLPOptions struct {
	// PromoteResourceAttributes are the resource attributes made labels of
	// every series of their resource (as well as target_info's).
	PromoteResourceAttributes []string
	// TranslationStrategy is how metric and label names are made from
	// OpenTelemetry's (default otlptranslator.UnderscoreEscapingWithSuffixes,
	// Prometheus' default).
	TranslationStrategy otlptranslator.TranslationStrategyOption
}

// AddFlags adds the options' flags to fs.
func (o *OTLPOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.PromoteResourceAttributes, "otlp-promote-resource-attributes", nil, "OTLP resource attributes made labels of every series of their resource, e.g. service.version,k8s.namespace.name (repeatable or comma-separated; Prometheus' otlp.promote_resource_attributes)")
	fs.StringVar((*string)(&o.TranslationStrategy), "otlp-translation-strategy", string(otlptranslator.UnderscoreEscapingWithSuffixes), "how OTLP metric and label names become Prometheus': UnderscoreEscapingWithSuffixes, UnderscoreEscapingWithoutSuffixes, NoUTF8EscapingWithSuffixes or NoTranslation (Prometheus' otlp.translation_strategy)")
}

// Check reports options Prometheus would refuse.
func (o OTLPOptions) Check() error {
	switch o.TranslationStrategy {
	case "", otlptranslator.UnderscoreEscapingWithSuffixes, otlptranslator.UnderscoreEscapingWithoutSuffixes,
		otlptranslator.NoUTF8EscapingWithSuffixes, otlptranslator.NoTranslation:
	default:
		return fmt.Errorf("unknown OTLP translation strategy %q (want %s, %s, %s or %s)", o.TranslationStrategy,
			otlptranslator.UnderscoreEscapingWithSuffixes, otlptranslator.UnderscoreEscapingWithoutSuffixes,
			otlptranslator.NoUTF8EscapingWithSuffixes, otlptranslator.NoTranslation)
	}
	for _, a := range o.PromoteResourceAttributes {
		if strings.TrimSpace(a) == "" {
			return errors.New("an empty OTLP resource attribute to promote")
		}
	}
	return nil
}

// OTLP serves /opentelemetry/v1/metrics.
type OTLP struct {
	engine           *datanode.Engine
	settings         prometheusremotewrite.Settings
	samples, refused prometheus.Counter
	ha               *hatracker.Tracker
}

// SetHA deduplicates HA pairs' requests with t (nil: off), as remote
// write does, deciding from the first sample the converter makes. Call it
// before serving.
func (o *OTLP) SetHA(t *hatracker.Tracker) { o.ha = t }

// NewOTLP is the OTLP metrics handler of eng (opts checked by Check; an
// unknown strategy is the default); its metrics are Collectors.
func NewOTLP(eng *datanode.Engine, opts OTLPOptions) *OTLP {
	cfg := config.DefaultOTLPConfig
	if (OTLPOptions{TranslationStrategy: opts.TranslationStrategy}).Check() == nil && opts.TranslationStrategy != "" {
		cfg.TranslationStrategy = opts.TranslationStrategy
	}
	for _, a := range opts.PromoteResourceAttributes {
		cfg.PromoteResourceAttributes = append(cfg.PromoteResourceAttributes, strings.TrimSpace(a))
	}
	return &OTLP{engine: eng,
		// As Prometheus' receiver sets them (storage/remote's rwExporter).
		settings: prometheusremotewrite.Settings{
			AddMetricSuffixes:                    cfg.TranslationStrategy.ShouldAddSuffixes(),
			AllowUTF8:                            !cfg.TranslationStrategy.ShouldEscape(),
			PromoteResourceAttributes:            prometheusremotewrite.NewPromoteResourceAttributes(cfg),
			KeepIdentifyingResourceAttributes:    cfg.KeepIdentifyingResourceAttributes,
			LabelNameUnderscoreSanitization:      cfg.LabelNameUnderscoreSanitization,
			LabelNamePreserveMultipleUnderscores: cfg.LabelNamePreserveMultipleUnderscores,
		},
		samples: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_otlp_samples_total", Help: "Samples stored through OTLP metrics ingest."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_otlp_refused_data_points_total", Help: "OTLP data points refused as never storable (delta temporality, exponential histograms, bad labels); the rest of their requests was stored."}),
	}
}

// Collectors are the handler's metrics.
func (o *OTLP) Collectors() []prometheus.Collector {
	return []prometheus.Collector{o.samples, o.refused}
}

func (o *OTLP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	asJSON := false
	switch mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt {
	case "application/x-protobuf":
	case "application/json":
		asJSON = true
	default:
		http.Error(w, fmt.Sprintf("unsupported Content-Type %q (want application/x-protobuf or application/json)", mt), http.StatusUnsupportedMediaType)
		return
	}
	tn, err := RequestTenant(r)
	if err != nil {
		otlpFail(w, asJSON, http.StatusBadRequest, err.Error())
		return
	}
	body, status, err := readOTLPBody(r)
	if err != nil {
		otlpFail(w, asJSON, status, err.Error())
		return
	}
	req := pmetricotlp.NewExportRequest()
	if asJSON {
		err = req.UnmarshalJSON(body)
	} else {
		err = req.UnmarshalProto(body)
	}
	if err != nil {
		otlpFail(w, asJSON, http.StatusBadRequest, "bad OTLP metrics request: "+err.Error())
		return
	}
	md := req.Metrics()
	total := md.DataPointCount()
	var reasons []string
	refuseUnsupported(md, &reasons)

	b := newBatcher()
	defer b.release() // once the answer is written: it may name the points' labels
	b.dedupBy(o.ha)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	app := &otlpAppender{b: b, points: map[otlpPoint]bool{}, stop: cancel}
	_, err = prometheusremotewrite.NewPrometheusConverter(app).FromMetrics(ctx, md, o.settings)
	switch {
	case app.over != nil:
		otlpFail(w, asJSON, http.StatusRequestEntityTooLarge, app.over.Error())
		return
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		otlpFail(w, asJSON, http.StatusServiceUnavailable, err.Error())
		return
	case err != nil:
		// Metrics, or the rest of them, the converter refused: their
		// points are among those not stored (app.accepted).
		reasons = append(reasons, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if drop, err := b.dedup(r.Context(), o.ha, tn); err != nil {
		otlpFail(w, asJSON, haStatus(err), err.Error())
		return
	} else if drop {
		otlpRespond(w, asJSON, pmetricotlp.NewExportResponse()) // another replica's: acknowledged
		return
	}
	if len(b.points) > 0 {
		if err := writeMetrics(r.Context(), o.engine, tn, b.points); err != nil {
			o.samples.Add(float64(limitWritten(err))) // stored in part: a tenant's series limit
			if ra, ok := limits.RetryAfter(err); ok {
				w.Header().Set("Retry-After", ra)
			}
			otlpFail(w, asJSON, writeStatus(err), tenant.Unqualify(tn, err.Error()))
			return
		}
		o.samples.Add(float64(len(b.points)))
	}
	// Every data point not stored whole is rejected: refused above, by
	// the converter, or here (a sample of it refused).
	rejected := max(0, total-app.accepted())
	reasons = append(reasons, b.reasons...)
	o.refused.Add(float64(rejected))

	var msg string
	if len(reasons) > 0 {
		more := b.more
		if len(reasons) > maxReasons {
			more += len(reasons) - maxReasons
			reasons = reasons[:maxReasons]
		}
		msg = fmt.Sprintf("%d of %d data points refused: %s", rejected, total, strings.Join(reasons, "; "))
		if more > 0 {
			msg += fmt.Sprintf("; and %d more", more)
		}
	}
	if len(b.points) == 0 && (rejected > 0 || len(reasons) > 0) {
		otlpFail(w, asJSON, http.StatusBadRequest, msg)
		return
	}
	resp := pmetricotlp.NewExportResponse()
	if msg != "" {
		resp.PartialSuccess().SetRejectedDataPoints(int64(rejected))
		resp.PartialSuccess().SetErrorMessage(msg)
	}
	otlpRespond(w, asJSON, resp)
}

// otlpRespond answers resp, 200.
func otlpRespond(w http.ResponseWriter, asJSON bool, resp pmetricotlp.ExportResponse) {
	var out []byte
	var err error
	if asJSON {
		out, err = resp.MarshalJSON()
	} else {
		out, err = resp.MarshalProto()
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	otlpAnswer(w, asJSON, http.StatusOK, out)
}

// readOTLPBody reads a request's body, decompressed, or says why not with
// the status to answer.
func readOTLPBody(r *http.Request) ([]byte, int, error) {
	enc := r.Header.Get("Content-Encoding")
	if enc != "" && enc != "gzip" && enc != "identity" {
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("unsupported Content-Encoding %q (want gzip or none)", enc)
	}
	tooLarge := fmt.Errorf("the body is over %d bytes", MaxRemoteWriteBytes)
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRemoteWriteBytes+1))
	switch {
	case err != nil:
		return nil, http.StatusBadRequest, err
	case len(body) > MaxRemoteWriteBytes:
		return nil, http.StatusRequestEntityTooLarge, tooLarge
	case enc != "gzip":
		return body, 0, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("gzip: %w", err)
	}
	if body, err = io.ReadAll(io.LimitReader(zr, MaxRemoteWriteBytes+1)); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("gzip: %w", err)
	}
	if len(body) > MaxRemoteWriteBytes {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("%w, decompressed", tooLarge)
	}
	return body, 0, nil
}

// otlpFail answers an error as OTLP/HTTP does: a google.rpc.Status in the
// request's encoding.
func otlpFail(w http.ResponseWriter, asJSON bool, code int, msg string) {
	st := &spb.Status{Message: msg}
	var out []byte
	if asJSON {
		out, _ = protojson.Marshal(st)
	} else {
		out, _ = proto.Marshal(st)
	}
	otlpAnswer(w, asJSON, code, out)
}

func otlpAnswer(w http.ResponseWriter, asJSON bool, code int, body []byte) {
	if asJSON {
		w.Header().Set("Content-Type", "application/json")
	} else {
		w.Header().Set("Content-Type", "application/x-protobuf")
	}
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// maxResourceSpan bounds the time a resource's data points in one request
// may span: the converter adds a target_info sample every 2m30s (half the
// lookback delta) from the earliest to the latest, so that a request of
// two points decades apart would make millions.
const maxResourceSpan = 24 * time.Hour

// refuseUnsupported takes out of md the metrics Strata refuses whole (see
// unsupported) and the resources whose data points span more than
// maxResourceSpan, adding a reason for each to reasons (their data points
// are among those the handler finds not stored).
func refuseUnsupported(md pmetric.Metrics, reasons *[]string) {
	md.ResourceMetrics().RemoveIf(func(rm pmetric.ResourceMetrics) bool {
		points, lo, hi := 0, pcommon.Timestamp(math.MaxUint64), pcommon.Timestamp(0)
		sms := rm.ScopeMetrics()
		for j := range sms.Len() {
			sms.At(j).Metrics().RemoveIf(func(m pmetric.Metric) bool {
				if why := unsupported(m); why != "" {
					*reasons = append(*reasons, fmt.Sprintf("metric %q: %s", m.Name(), why))
					return true
				}
				var k int
				k, lo, hi = pointSpan(m, lo, hi)
				points += k
				return false
			})
		}
		if points == 0 || hi.AsTime().Sub(lo.AsTime()) <= maxResourceSpan {
			return false
		}
		name, _ := rm.Resource().Attributes().Get("service.name")
		*reasons = append(*reasons, fmt.Sprintf("the data points of resource service.name=%q span %v, more than %v (target_info would need a sample every %v over it): send them in separate requests",
			name.AsString(), hi.AsTime().Sub(lo.AsTime()).Round(time.Second), maxResourceSpan, targetInfoInterval))
		return true
	})
}

// targetInfoInterval is how often the converter repeats target_info
// between a resource's earliest and latest data points.
const targetInfoInterval = 150 * time.Second

// pointSpan returns how many data points m has, and lo and hi widened to
// their timestamps.
func pointSpan(m pmetric.Metric, lo, hi pcommon.Timestamp) (int, pcommon.Timestamp, pcommon.Timestamp) {
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		return span[pmetric.NumberDataPoint](m.Gauge().DataPoints(), lo, hi)
	case pmetric.MetricTypeSum:
		return span[pmetric.NumberDataPoint](m.Sum().DataPoints(), lo, hi)
	case pmetric.MetricTypeHistogram:
		return span[pmetric.HistogramDataPoint](m.Histogram().DataPoints(), lo, hi)
	case pmetric.MetricTypeSummary:
		return span[pmetric.SummaryDataPoint](m.Summary().DataPoints(), lo, hi)
	}
	return 0, lo, hi
}

func span[P interface{ Timestamp() pcommon.Timestamp }, S interface {
	Len() int
	At(int) P
}](points S, lo, hi pcommon.Timestamp) (int, pcommon.Timestamp, pcommon.Timestamp) {
	for i := range points.Len() {
		lo, hi = min(lo, points.At(i).Timestamp()), max(hi, points.At(i).Timestamp())
	}
	return points.Len(), lo, hi
}

// unsupported says why metric m cannot be stored ("" if it can).
func unsupported(m pmetric.Metric) string {
	temporality := func(t pmetric.AggregationTemporality) string {
		switch t {
		case pmetric.AggregationTemporalityCumulative:
			return ""
		case pmetric.AggregationTemporalityDelta:
			return "delta temporality is not supported: export cumulative temporality (the OpenTelemetry SDKs' default; the Collector's deltatocumulative processor converts)"
		}
		return "the aggregation temporality is unspecified"
	}
	switch m.Type() {
	case pmetric.MetricTypeGauge, pmetric.MetricTypeSummary:
		return ""
	case pmetric.MetricTypeSum:
		return temporality(m.Sum().AggregationTemporality())
	case pmetric.MetricTypeHistogram:
		return temporality(m.Histogram().AggregationTemporality())
	case pmetric.MetricTypeExponentialHistogram:
		return "exponential histograms are not supported (they would be native histograms): export explicit-bucket histograms"
	}
	return "no data type"
}

// otlpPoint names one data point as the converter's samples carry it: its
// metric family, timestamp and labels but those that tell its samples
// apart (a histogram's buckets, a summary's quantiles, their _sum and
// _count).
type otlpPoint struct {
	family string
	t      int64
	labels uint64
}

// otlpAppender gathers the converter's samples into a batcher. Unlike
// Appendable's appender it never fails an Append for a bad sample (the
// converter would drop the rest of the metric): it notes which data
// points it stored whole and which had a sample refused, and the handler
// writes the rest. A request that would make more than maxOTLPSamples
// samples, or more than maxOTLPLabelBytes of labels, stops the
// conversion (over; stop cancels the converter's context), so that a
// small request cannot make a huge batch (a resource's target_info is
// repeated every 2m30s over its points' span, a histogram's labels copied
// into each bucket).
type otlpAppender struct {
	b *batcher
	// points are the data points seen but target_info's, each true if a
	// sample of it was refused.
	points  map[otlpPoint]bool
	buf     []byte
	samples int
	bytes   uint64
	over    error
	stop    context.CancelFunc
}

// maxOTLPSamples and maxOTLPLabelBytes bound what one OTLP request may
// make (a region takes at most 1,000,000 rows a batch by default).
const (
	maxOTLPSamples    = 2_000_000
	maxOTLPLabelBytes = 512 << 20
)

func (a *otlpAppender) Append(_ storage.SeriesRef, ls labels.Labels, _, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AOptions) (storage.SeriesRef, error) {
	if a.over != nil {
		return 0, a.over
	}
	a.samples++
	a.bytes += ls.ByteSize()
	if a.samples > maxOTLPSamples || a.bytes > maxOTLPLabelBytes {
		a.over = fmt.Errorf("the request makes more than %d samples or %d MiB of labels (target_info is repeated every %v over a resource's points, a histogram's labels in each bucket): send it in smaller requests",
			maxOTLPSamples, maxOTLPLabelBytes>>20, targetInfoInterval)
		a.stop()
		return 0, a.over
	}
	refused := a.b.refused
	if h != nil || fh != nil {
		a.b.refuse(1, ls, errHistogram.Error())
	} else {
		a.b.series(ls, 0, 1, func(int) (int64, float64) { return t, v })
	}
	if opts.MetricFamilyName == targetInfo {
		return 0, nil // not a data point: its refusal is among the reasons
	}
	var hash uint64
	hash, a.buf = ls.HashWithoutLabels(a.buf, model.MetricNameLabel, model.BucketLabel, model.QuantileLabel)
	p := otlpPoint{opts.MetricFamilyName, t, hash}
	a.points[p] = a.points[p] || a.b.refused > refused
	return 0, nil
}

// targetInfo is the metric family of a resource's attributes.
const targetInfo = "target_info"

// accepted is how many data points had every sample stored.
func (a *otlpAppender) accepted() int {
	n := 0
	for _, refused := range a.points {
		if !refused {
			n++
		}
	}
	return n
}

// Commit and Rollback do nothing: the handler writes the batcher's points.
func (a *otlpAppender) Commit() error   { return nil }
func (a *otlpAppender) Rollback() error { return nil }
