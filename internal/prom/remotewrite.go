package prom

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
)

// Remote write (Prometheus remote write 1.0 and 2.0) on /api/v1/write: a
// metric m becomes table m with one float field "value" (ValueField), its
// labels the table's tags, so the series reads back under its bare name.
// Staleness markers are not stored (a series goes stale by the lookback
// delta instead); native histograms and exemplars are not supported.

const (
	rwV2ContentType = "application/x-protobuf;proto=io.prometheus.write.v2.Request"
	// MaxRemoteWriteBytes bounds a remote-write body, compressed and not.
	MaxRemoteWriteBytes = 64 << 20
)

// RemoteWrite serves /api/v1/write.
type RemoteWrite struct {
	Engine *datanode.Engine
}

// errBadWrite: the request can never succeed (400, not retried).
var errBadWrite = errors.New("bad remote write request")

func (rw *RemoteWrite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v2 := false
	switch ct := strings.ReplaceAll(r.Header.Get("Content-Type"), " ", ""); {
	case ct == "" || ct == "application/x-protobuf" || ct == "application/x-protobuf;proto=prometheus.WriteRequest":
	case ct == rwV2ContentType:
		v2 = true
	default:
		http.Error(w, fmt.Sprintf("unsupported Content-Type %q (want application/x-protobuf, or %s)", ct, rwV2ContentType), http.StatusUnsupportedMediaType)
		return
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "snappy" {
		http.Error(w, fmt.Sprintf("unsupported Content-Encoding %q (want snappy)", enc), http.StatusUnsupportedMediaType)
		return
	}
	compressed, err := io.ReadAll(io.LimitReader(r.Body, MaxRemoteWriteBytes+1))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if n, err := snappy.DecodedLen(compressed); err != nil || len(compressed) > MaxRemoteWriteBytes || n > MaxRemoteWriteBytes {
		http.Error(w, fmt.Sprintf("%v: the body is not snappy, or is over %d bytes", errBadWrite, MaxRemoteWriteBytes), http.StatusBadRequest)
		return
	}
	raw, err := snappy.Decode(nil, compressed)
	if err != nil {
		http.Error(w, fmt.Sprintf("%v: snappy: %v", errBadWrite, err), http.StatusBadRequest)
		return
	}
	var batches []datanode.TableBatch
	var samples int
	if v2 {
		batches, samples, err = decodeV2(raw)
	} else {
		batches, samples, err = decodeV1(raw)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if _, err := rw.Engine.WriteTables(r.Context(), batches, datanode.WriteOptions{CreateTable: true}); err != nil {
		switch {
		case errors.Is(err, region.ErrInvalidWrite), errors.Is(err, catalog.ErrInvalidTable), errors.Is(err, schema.ErrBadName):
			http.Error(w, err.Error(), http.StatusBadRequest)
		case errors.Is(err, region.ErrBatchTooLarge):
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		default:
			http.Error(w, err.Error(), http.StatusServiceUnavailable) // retryable
		}
		return
	}
	if v2 {
		h := w.Header()
		h.Set("X-Prometheus-Remote-Write-Samples-Written", strconv.Itoa(samples))
		h.Set("X-Prometheus-Remote-Write-Histograms-Written", "0")
		h.Set("X-Prometheus-Remote-Write-Exemplars-Written", "0")
	}
	w.WriteHeader(http.StatusNoContent)
}

// batcher groups samples by metric (table).
type batcher struct {
	byTable map[string]int
	batches []datanode.TableBatch
	samples int
}

// series adds the n samples of one series (at returns sample i); its
// labels become the points' tags once, shared by its points (sorted by
// name already, as labels are).
func (b *batcher) series(ls labels.Labels, histograms, n int, at func(i int) (int64, float64)) error {
	if histograms > 0 {
		return fmt.Errorf("%w: native histograms are not supported", errBadWrite)
	}
	name := ls.Get(labels.MetricName)
	if name == "" {
		return fmt.Errorf("%w: a series has no __name__ label: %s", errBadWrite, ls)
	}
	i, ok := b.byTable[name]
	if !ok {
		i = len(b.batches)
		b.byTable[name] = i
		b.batches = append(b.batches, datanode.TableBatch{Table: name})
	}
	var tags []row.Tag
	ls.Range(func(l labels.Label) {
		if l.Name != labels.MetricName && l.Value != "" {
			tags = append(tags, row.Tag{Name: l.Name, Value: l.Value})
		}
	})
	for k := range n {
		ts, v := at(k)
		if value.IsStaleNaN(v) {
			continue
		}
		if ts > math.MaxInt64/1_000_000 || ts < math.MinInt64/1_000_000 {
			return fmt.Errorf("%w: timestamp %d ms is out of range", errBadWrite, ts)
		}
		b.batches[i].Points = append(b.batches[i].Points, row.Point{Tags: tags, TS: ts * 1_000_000, Fields: []row.Field{{Name: ValueField, Value: row.FloatValue(v)}}})
		b.samples++
	}
	return nil
}

func decodeV1(raw []byte) ([]datanode.TableBatch, int, error) {
	var req prompb.WriteRequest
	if err := req.Unmarshal(raw); err != nil {
		return nil, 0, fmt.Errorf("%w: protobuf: %v", errBadWrite, err)
	}
	b := &batcher{byTable: map[string]int{}}
	var sb labels.ScratchBuilder
	for _, ts := range req.Timeseries {
		sb.Reset()
		for _, l := range ts.Labels {
			sb.Add(l.Name, l.Value)
		}
		sb.Sort()
		err := b.series(sb.Labels(), len(ts.Histograms), len(ts.Samples), func(i int) (int64, float64) { return ts.Samples[i].Timestamp, ts.Samples[i].Value })
		if err != nil {
			return nil, 0, err
		}
	}
	return b.batches, b.samples, nil
}

func decodeV2(raw []byte) ([]datanode.TableBatch, int, error) {
	var req writev2.Request
	if err := req.Unmarshal(raw); err != nil {
		return nil, 0, fmt.Errorf("%w: protobuf: %v", errBadWrite, err)
	}
	b := &batcher{byTable: map[string]int{}}
	var sb labels.ScratchBuilder
	for _, ts := range req.Timeseries {
		refs := ts.LabelsRefs
		if len(refs)%2 != 0 {
			return nil, 0, fmt.Errorf("%w: odd number of label references", errBadWrite)
		}
		sb.Reset()
		for i := 0; i < len(refs); i += 2 {
			if int(refs[i]) >= len(req.Symbols) || int(refs[i+1]) >= len(req.Symbols) {
				return nil, 0, fmt.Errorf("%w: label reference past the %d symbols", errBadWrite, len(req.Symbols))
			}
			sb.Add(req.Symbols[refs[i]], req.Symbols[refs[i+1]])
		}
		sb.Sort()
		err := b.series(sb.Labels(), len(ts.Histograms), len(ts.Samples), func(i int) (int64, float64) { return ts.Samples[i].Timestamp, ts.Samples[i].Value })
		if err != nil {
			return nil, 0, err
		}
	}
	return b.batches, b.samples, nil
}
