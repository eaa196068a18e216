package prom

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/rwload"
)

// decodeV1Gogo is what decodeV1 answers, the way it was first written:
// prompb's Unmarshal (a string for every label name and value), the
// labels copied into labels.Labels and sorted, then series.
func decodeV1Gogo(raw []byte) (*batcher, error) {
	var req prompb.WriteRequest
	if err := req.Unmarshal(raw); err != nil {
		return nil, fmt.Errorf("%w: protobuf: %v", errBadWrite, err)
	}
	b := &batcher{}
	var sb labels.ScratchBuilder
	for _, ts := range req.Timeseries {
		sb.Reset()
		for _, l := range ts.Labels {
			sb.Add(l.Name, l.Value)
		}
		sb.Sort()
		b.series(sb.Labels(), len(ts.Histograms), len(ts.Samples), func(i int) (int64, float64) { return ts.Samples[i].Timestamp, ts.Samples[i].Value })
	}
	return b, nil
}

// decodeV2Gogo is what decodeV2 answers, the way it was first written.
func decodeV2Gogo(raw []byte) (*batcher, error) {
	var req writev2.Request
	if err := req.Unmarshal(raw); err != nil {
		return nil, fmt.Errorf("%w: protobuf: %v", errBadWrite, err)
	}
	b := &batcher{}
	var sb labels.ScratchBuilder
	for _, ts := range req.Timeseries {
		refs := ts.LabelsRefs
		if len(refs)%2 != 0 {
			return nil, fmt.Errorf("%w: odd number of label references", errBadWrite)
		}
		sb.Reset()
		for i := 0; i < len(refs); i += 2 {
			if int(refs[i]) >= len(req.Symbols) || int(refs[i+1]) >= len(req.Symbols) {
				return nil, fmt.Errorf("%w: label reference past the %d symbols", errBadWrite, len(req.Symbols))
			}
			sb.Add(req.Symbols[refs[i]], req.Symbols[refs[i+1]])
		}
		sb.Sort()
		b.series(sb.Labels(), len(ts.Histograms), len(ts.Samples), func(i int) (int64, float64) { return ts.Samples[i].Timestamp, ts.Samples[i].Value })
	}
	return b, nil
}

// sameBatch reports how got differs from want (nothing: ""): the points
// (series keys, tags, timestamps, value bits), what was refused and the
// answer's text. It also checks got's own promises: each key encodes its
// tags, and points of one shape have the same tag names.
func sameBatch(got, want *batcher) string {
	if got.refused != want.refused || got.more != want.more || !slices.Equal(got.reasons, want.reasons) {
		return fmt.Sprintf("refused %d %q +%d, want %d %q +%d", got.refused, got.reasons, got.more, want.refused, want.reasons, want.more)
	}
	if len(got.points) != len(want.points) {
		return fmt.Sprintf("%d points, want %d", len(got.points), len(want.points))
	}
	if want.refused > 0 && got.refusal() != want.refusal() {
		return fmt.Sprintf("answer %q, want %q", got.refusal(), want.refusal())
	}
	shapes := map[uint32][]row.Tag{}
	for i := range got.points {
		g, w := &got.points[i], &want.points[i]
		switch {
		case string(g.Series) != string(w.Series):
			return fmt.Sprintf("point %d: series %q, want %q", i, g.Series, w.Series)
		case !slices.Equal(g.Tags, w.Tags):
			return fmt.Sprintf("point %d: tags %q, want %q", i, g.Tags, w.Tags)
		case g.TS != w.TS:
			return fmt.Sprintf("point %d: ts %d, want %d", i, g.TS, w.TS)
		case len(g.Fields) != 1 || g.Fields[0].Name != w.Fields[0].Name || !g.Fields[0].Value.Equal(w.Fields[0].Value):
			return fmt.Sprintf("point %d: fields %v, want %v", i, g.Fields, w.Fields)
		}
		if key, err := row.EncodeSeries(nil, slices.Clone(g.Tags)); err != nil || string(key) != string(g.Series) {
			return fmt.Sprintf("point %d: series %q is not its tags' %q (%v)", i, g.Series, key, err)
		}
		if g.Shape == 0 {
			continue
		}
		if tags, ok := shapes[g.Shape]; ok && !slices.EqualFunc(tags, g.Tags, func(a, b row.Tag) bool { return a.Name == b.Name }) {
			return fmt.Sprintf("point %d: shape %d has tags %q and %q", i, g.Shape, tags, g.Tags)
		}
		shapes[g.Shape] = g.Tags
	}
	return ""
}

// checkDecode decodes raw with a walker (decodeV1, decodeV2) and as it
// was first decoded (decodeV1Gogo, decodeV2Gogo). The walker accepts
// exactly what prompb accepts (it reads the wire format as gogo's
// generated code does, rwproto.go), refuses it as a bad write (400), and
// for what it accepts answers as prompb and series did. A request with
// bad label references (2.0) is refused with the same error.
func checkDecode(t *testing.T, raw []byte, walker, gogo func([]byte) (*batcher, error)) {
	t.Helper()
	want, werr := gogo(raw)
	got, gerr := walker(raw)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("walker: %v; prompb: %v", gerr, werr)
	}
	if gerr != nil {
		if !errors.Is(gerr, errBadWrite) {
			t.Fatalf("walker: %v does not wrap errBadWrite", gerr)
		}
		// Protobuf errors are worded as each reader words them.
		pb := strings.Contains(werr.Error(), ": protobuf: ")
		if pb != strings.Contains(gerr.Error(), ": protobuf: ") || !pb && gerr.Error() != werr.Error() {
			t.Fatalf("walker: %v; prompb: %v", gerr, werr)
		}
		return
	}
	defer got.release()
	if diff := sameBatch(got, want); diff != "" {
		t.Fatalf("walker and prompb differ: %s", diff)
	}
}

// FuzzDecodeV1 checks decodeV1 against prompb on any bytes, seeded with
// the remote-write tests' requests, avalanche-shaped requests (rwload) and
// requests that take every path: unsorted, duplicate, empty and invalid
// labels, out-of-range timestamps, histograms, exemplars, metadata,
// unknown fields and groups, fields out of order, packed runs.
func FuzzDecodeV1(f *testing.F) {
	for _, raw := range v1Seeds(f) {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkDecode(t, raw, decodeV1, decodeV1Gogo) })
}

// FuzzDecodeV2 is FuzzDecodeV1 for remote write 2.0, whose seeds add
// symbols after the series, references packed and not, odd or past the
// symbols.
func FuzzDecodeV2(f *testing.F) {
	for _, raw := range v2Seeds(f) {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkDecode(t, raw, decodeV2, decodeV2Gogo) })
}

func v1Seeds(tb testing.TB) [][]byte {
	const t0 = 1767225600000 // ms
	stale := math.Float64frombits(value.StaleNaN)
	lbl := func(kv ...string) []prompb.Label {
		out := make([]prompb.Label, 0, len(kv)/2)
		for i := 0; i < len(kv); i += 2 {
			out = append(out, prompb.Label{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	one := func(v float64) []prompb.Sample { return []prompb.Sample{{Value: v, Timestamp: t0}} }
	many := make([]string, 0, 30) // 15 labels, out of order, with duplicates (pdqsort's own order)
	for i := range 15 {
		many = append(many, fmt.Sprintf("l%02d", (i*7)%11), fmt.Sprint(i%3))
	}
	reqs := []*prompb.WriteRequest{
		// remotewrite_test.go's requests.
		{Timeseries: []prompb.TimeSeries{{
			Labels:  lbl("__name__", "http_requests_total", "job", "api", "instance", "a:9090"),
			Samples: []prompb.Sample{{Value: 1, Timestamp: t0}, {Value: 3, Timestamp: t0 + 15000}, {Value: stale, Timestamp: t0 + 30000}},
		}}},
		{Timeseries: []prompb.TimeSeries{{Labels: lbl("job", "x"), Samples: one(1)}}},
		{Timeseries: []prompb.TimeSeries{
			{Labels: lbl("__name__", "q", "quantile", "0.5"), Samples: []prompb.Sample{{Value: math.NaN(), Timestamp: t0}, {Value: 2, Timestamp: t0 + 15000}}},
			{Labels: lbl("__name__", "infinite", "sign", "plus"), Samples: one(math.Inf(1))},
			{Labels: lbl("__name__", "infinite", "sign", "minus"), Samples: one(math.Inf(-1))},
			{Labels: lbl("__name__", "gone"), Samples: []prompb.Sample{{Value: 7, Timestamp: t0}, {Value: stale, Timestamp: t0 + 15000}}},
		}},
		{Timeseries: []prompb.TimeSeries{
			{Labels: lbl("__name__", "ok", "job", "a"), Samples: []prompb.Sample{{Value: 1, Timestamp: t0}, {Value: 2, Timestamp: math.MaxInt64}}},
			{Labels: lbl("job", "nameless"), Samples: one(1)},
			{Labels: lbl("__name__", "bad", "x\x01", "y"), Samples: one(1)},
			{Labels: lbl("__name__", "twice", "a", "1", "a", "2"), Samples: one(1)},
			{Labels: lbl("__name__", "hist"), Histograms: []prompb.Histogram{{Timestamp: t0}}},
			{Labels: lbl("__name__", "ok", "job", "b", "value", "v", "time", "t"), Samples: one(3)},
		}},
		{Timeseries: []prompb.TimeSeries{
			{Labels: lbl("__name__", "metric_0000", "instance", "0", "job", "bench"), Samples: one(0)},
			{Labels: lbl("__name__", "metric_0000", "instance", "1", "job", "bench"), Samples: one(0)},
			{Labels: lbl("__name__", "metric_0001", "instance", "0", "job", "bench"), Samples: one(1)},
		}},
		// Labels as Prometheus never sends them, and what series makes
		// of them.
		{Timeseries: []prompb.TimeSeries{
			{Labels: lbl("job", "a", "__name__", "unsorted", "instance", "i"), Samples: one(1)},
			{Labels: lbl("__name__", "dup", "a", "", "a", "1"), Samples: one(1)},
			{Labels: lbl("__name__", "dup", "a", "1", "a", ""), Samples: one(1)},
			{Labels: lbl("__name__", "dup", "a", "1", "a", "1"), Samples: one(1)},
			{Labels: lbl("__name__", "empty_value", "a", "", "b", "2"), Samples: one(1)},
			{Labels: lbl("__name__", "empty_value", "a", "1", "b", ""), Samples: one(1)},
			{Labels: lbl("", "", "__name__", "empty_name"), Samples: one(1)},
			{Labels: lbl("", "v", "__name__", "empty_name"), Samples: one(1)},
			{Labels: lbl("", strings.Repeat("v", 100), "__name__", "empty_name"), Samples: one(1)},
			{Labels: lbl("__name__", "", "job", "a"), Samples: one(1)},
			{Labels: lbl("__name__", "a", "__name__", "b"), Samples: one(1)},
			{Labels: lbl("__name__", "bad_utf8", "\xff", "x"), Samples: one(1)},
			{Labels: lbl("__name__", "bad_utf8_empty", "\xff", ""), Samples: one(1)},
			{Labels: lbl("__name__", "long", strings.Repeat("n", 300), "x"), Samples: one(1)},
			{Labels: lbl(append([]string{"__name__", "many"}, many...)...), Samples: one(1)},
			{Labels: lbl("__name__", "ts", "job", "a"), Samples: []prompb.Sample{{Timestamp: math.MinInt64}, {Timestamp: -1, Value: math.Copysign(0, -1)}, {Timestamp: math.MaxInt64 / 1_000_000, Value: math.Float64frombits(0x7ff8000000000bad)}}},
			{Labels: lbl("__name__", "hist_and_samples"), Samples: one(2), Histograms: []prompb.Histogram{{Count: &prompb.Histogram_CountInt{CountInt: 3}, PositiveSpans: []prompb.BucketSpan{{Offset: -1, Length: 2}}, PositiveDeltas: []int64{1, -1}, NegativeCounts: []float64{1, 2}, CustomValues: []float64{3}}, {}}},
			{Labels: lbl("__name__", "no_samples"), Histograms: []prompb.Histogram{{}}},
			{Labels: lbl("__name__", "exemplar"), Samples: one(4), Exemplars: []prompb.Exemplar{{Labels: lbl("trace_id", "abc"), Value: 1, Timestamp: t0}}},
			{Samples: one(1)},
			{},
		}, Metadata: []prompb.MetricMetadata{{Type: prompb.MetricMetadata_COUNTER, MetricFamilyName: "m", Help: "h", Unit: "u"}}},
	}
	var out [][]byte
	for _, r := range reqs {
		raw, err := r.Marshal()
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, raw)
	}
	// Bytes prompb's Marshal does not write: unknown fields (a group
	// among them), fields out of order and repeated, packed and unpacked
	// runs, a field number past 2^32.
	var (
		app     = protowire.AppendTag
		bytesOf = func(num protowire.Number, b []byte) []byte {
			return protowire.AppendBytes(app(nil, num, protowire.BytesType), b)
		}
		strOf    = func(num protowire.Number, s string) []byte { return bytesOf(num, []byte(s)) }
		varintOf = func(num protowire.Number, v uint64) []byte {
			return protowire.AppendVarint(app(nil, num, protowire.VarintType), v)
		}
		f64Of = func(num protowire.Number, v float64) []byte {
			return protowire.AppendFixed64(app(nil, num, protowire.Fixed64Type), math.Float64bits(v))
		}
		group = slices.Concat(app(nil, 9, protowire.StartGroupType), varintOf(1, 5), app(nil, 9, protowire.EndGroupType))
		label = func(n, v string) []byte { return bytesOf(1, slices.Concat(strOf(1, n), strOf(2, v))) }
	)
	series := slices.Concat(
		bytesOf(2, slices.Concat(varintOf(2, t0), f64Of(1, 1), varintOf(7, 1))), // a sample before the labels
		label("job", "j"),
		bytesOf(1, slices.Concat(strOf(1, "x"), strOf(2, "ignored"), strOf(1, "__name__"), strOf(2, "late"), group)),
		bytesOf(2, slices.Concat(f64Of(1, 2), varintOf(2, t0+1), f64Of(1, 3))),
		group,
		bytesOf(4, slices.Concat(bytesOf(12, protowire.AppendVarint(nil, 3)), varintOf(12, 4), bytesOf(13, make([]byte, 16)), f64Of(16, 1))),
		bytesOf(3, slices.Concat(label("trace_id", "t"), f64Of(2, 1))),
	)
	bigKey := protowire.AppendVarint(nil, (1<<32+1)<<3|uint64(protowire.BytesType)) // number 1, as int32
	// A value's length as a 2-byte varint (5) whose first byte (0x85) is
	// the length of the rest of the label.
	oddLabel := slices.Concat(strOf(1, "a"), []byte{2<<3 | 2, 0x85, 0x00}, []byte("value"), bytesOf(3, make([]byte, 125)))
	out = append(out,
		slices.Concat(varintOf(2, 7), bytesOf(1, series), group, bytesOf(3, strOf(2, "fam")), bytesOf(1, series)),
		slices.Concat(protowire.AppendBytes(bigKey, slices.Concat(label("__name__", "wrapped"), bytesOf(2, varintOf(2, t0))))),
		bytesOf(1, slices.Concat(label("__name__", "odd"), bytesOf(1, oddLabel), bytesOf(2, varintOf(2, t0)))),
	)
	// A known field of each message with a wrong wire type: malformed.
	out = append(out,
		bytesOf(2, nil), bytesOf(3, slices.Concat(varintOf(1, 1))),
		bytesOf(1, slices.Concat(label("__name__", "w"), varintOf(2, 1))),
		bytesOf(1, bytesOf(1, varintOf(2, 1))),
		bytesOf(1, bytesOf(2, strOf(2, "x"))),
		bytesOf(1, bytesOf(3, f64Of(3, 1))),
		bytesOf(1, bytesOf(4, strOf(1, "x"))),
		bytesOf(1, bytesOf(4, bytesOf(8, f64Of(1, -1)))),
		bytesOf(1, bytesOf(4, varintOf(10, 1))),
		bytesOf(3, strOf(1, "x")),
	)
	// Avalanche-shaped requests, NaNs, churn and staleness markers
	// among them.
	return append(out, avalancheRequests(tb, rwload.V1, rwload.Shape{Names: 3, Series: 2, Labels: 3, Scrapes: 2, Interval: time.Second, Start: time.UnixMilli(t0), Churn: 0.5, NaNFraction: 0.3, StaleMarkers: true, Batch: 4})...)
}

func v2Seeds(tb testing.TB) [][]byte {
	const t0 = 1767225600000 // ms
	sym := []string{"", "__name__", "http_requests_total", "job", "api", "instance", "b:9090", "a", "1", "2", "x\x01", "help", "s"}
	one := []writev2.Sample{{Value: 1, Timestamp: t0}}
	reqs := []*writev2.Request{
		// remotewrite_test.go's requests.
		{Symbols: sym[:7], Timeseries: []writev2.TimeSeries{{
			LabelsRefs: []uint32{1, 2, 3, 4, 5, 6},
			Samples:    []writev2.Sample{{Value: 10, Timestamp: t0}, {Value: 20, Timestamp: t0 + 15000}},
		}}},
		{Symbols: []string{""}, Timeseries: []writev2.TimeSeries{{LabelsRefs: []uint32{1, 2}, Samples: one}}},
		// Series as Prometheus never sends them, and the rest of 2.0.
		{Symbols: sym, Timeseries: []writev2.TimeSeries{
			{LabelsRefs: []uint32{3, 4, 1, 2}, Samples: one, Metadata: writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_COUNTER, HelpRef: 11}},
			{LabelsRefs: []uint32{1, 2, 7, 8, 7, 9}, Samples: one},
			{LabelsRefs: []uint32{1, 2, 7, 0, 10, 8}, Samples: one},
			{LabelsRefs: []uint32{1, 2, 7, 8}, Samples: []writev2.Sample{{Value: 2, Timestamp: math.MaxInt64, StartTimestamp: t0}, {Value: math.NaN(), Timestamp: t0}}},
			{LabelsRefs: []uint32{1, 2}, Histograms: []writev2.Histogram{{Count: &writev2.Histogram_CountFloat{CountFloat: 2}, NegativeSpans: []writev2.BucketSpan{{Offset: 1, Length: 1}}, NegativeDeltas: []int64{-3}, StartTimestamp: 5}}},
			{LabelsRefs: []uint32{1, 2, 3, 4}, Samples: one, Exemplars: []writev2.Exemplar{{LabelsRefs: []uint32{12, 8}, Value: 1, Timestamp: t0}}},
			{LabelsRefs: []uint32{3, 4}, Samples: one},
			{},
		}},
		{Symbols: sym[:3], Timeseries: []writev2.TimeSeries{{LabelsRefs: []uint32{1, 2, 1}, Samples: one}}},
	}
	var out [][]byte
	for _, r := range reqs {
		raw, err := r.Marshal()
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, raw)
	}
	// Symbols after the series, references one at a time, an unknown
	// field.
	series := slices.Concat(
		protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1),
		protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{2, 3, 4}),
		protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), t0)),
		protowire.AppendVarint(protowire.AppendTag(nil, 6, protowire.VarintType), 1),
	)
	var late []byte
	late = protowire.AppendBytes(protowire.AppendTag(late, 5, protowire.BytesType), series)
	for _, s := range sym[:5] {
		late = protowire.AppendString(protowire.AppendTag(late, 4, protowire.BytesType), s)
	}
	out = append(out, late)
	// A known field of each message with a wrong wire type: malformed.
	app, bytesOf := protowire.AppendTag, func(num protowire.Number, b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
	}
	out = append(out,
		app(nil, 4, protowire.VarintType), app(nil, 5, protowire.Fixed64Type),
		bytesOf(5, app(nil, 1, protowire.Fixed64Type)),
		bytesOf(5, bytesOf(2, bytesOf(3, nil))),
		bytesOf(5, bytesOf(3, bytesOf(17, nil))),
		bytesOf(5, bytesOf(4, bytesOf(2, nil))),
		bytesOf(5, bytesOf(5, bytesOf(3, nil))),
		bytesOf(5, app(nil, 5, protowire.VarintType)),
	)
	return append(out, avalancheRequests(tb, rwload.V2, rwload.Shape{Names: 3, Series: 2, Labels: 3, Scrapes: 2, Interval: time.Second, Start: time.UnixMilli(t0), Churn: 0.5, NaNFraction: 0.3, StaleMarkers: true, Batch: 4})...)
}

// TestDecodeTruncated: every prefix of every seed decodes as prompb
// decodes it (most are malformed).
func TestDecodeTruncated(t *testing.T) {
	for _, raw := range v1Seeds(t) {
		for n := range len(raw) {
			checkDecode(t, raw[:n], decodeV1, decodeV1Gogo)
		}
	}
	for _, raw := range v2Seeds(t) {
		for n := range len(raw) {
			checkDecode(t, raw[:n], decodeV2, decodeV2Gogo)
		}
	}
}

// avalancheRequests are the decompressed bodies of the requests rwload
// sends for shape s (one worker).
func avalancheRequests(tb testing.TB, p rwload.Protocol, s rwload.Shape) [][]byte {
	g, err := rwload.NewGenerator(s)
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var out [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil {
			body, err = snappy.Decode(nil, body)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		out = append(out, body)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	res, err := rwload.Run(context.Background(), g, rwload.Options{URL: srv.URL, Protocol: p, Workers: 1})
	if err != nil || res.Failed > 0 {
		tb.Fatalf("rwload: %v %+v", err, res)
	}
	return out
}

// BenchmarkDecodeRemoteWrite decodes an avalanche-shaped remote-write
// request (2,000 series of 17 labels, one sample each: __name__,
// instance, job, 13 label_key_k, series_id), 1.0 and 2.0, as prompb did
// and as the walker does, from a kept batcher (as ServeHTTP does) and
// from a new one.
func BenchmarkDecodeRemoteWrite(b *testing.B) {
	shape := rwload.Shape{Names: 200, Series: 10, Labels: 13, Scrapes: 1, Batch: 2000, Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, p := range []struct {
		proto        rwload.Protocol
		walker, gogo func([]byte) (*batcher, error)
	}{{rwload.V1, decodeV1, decodeV1Gogo}, {rwload.V2, decodeV2, decodeV2Gogo}} {
		reqs := avalancheRequests(b, p.proto, shape)
		if len(reqs) != 1 {
			b.Fatalf("%d requests", len(reqs))
		}
		raw := reqs[0]
		check := func(bt *batcher, err error) {
			if err != nil || len(bt.points) != 2000 || len(bt.points[0].Tags) != 17 {
				b.Fatalf("%v %d points", err, len(bt.points))
			}
		}
		run := func(name string, decode func() *batcher) {
			b.Run(fmt.Sprintf("proto=%d/impl=%s", p.proto, name), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(raw)))
				for b.Loop() {
					decode()
				}
			})
		}
		run("prompb", func() *batcher {
			bt, err := p.gogo(raw)
			check(bt, err)
			return bt
		})
		run("walker", func() *batcher {
			bt, err := p.walker(raw)
			check(bt, err)
			bt.release()
			return nil
		})
		run("walker-unkept", func() *batcher {
			bt := &batcher{}
			var err error
			if p.proto == rwload.V1 {
				err = bt.walkV1(raw)
			} else {
				var rerr error
				err, rerr = bt.walkV2(raw)
				err = errors.Join(err, rerr)
			}
			check(bt, err)
			return bt
		})
	}
}
