package prom

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/errclass"
	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/hatracker"
	"github.com/stratadb/strata/internal/limits"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/tenant"
)

// Remote write (Prometheus remote write 1.0 and 2.0) on /api/v1/write:
// every sample goes to one table, catalog.MetricsTable, whose tags are
// free-form labels: a series' labels, __name__ among them, are its series
// key, and its value is the float field "value" (ValueField). A metric name
// is one more label value, so a new name costs what a new series costs (no
// table, region or catalog entry of its own). Every float64 is stored: NaN,
// ±Inf and staleness markers as sent, read back as Prometheus reads them.
//
// A request is written as far as it can be: a series or sample that can
// never be stored (no __name__, a bad label, a timestamp out of range, a
// native histogram) is refused and the rest is written; the answer is then
// 400 with the refused count and the first reasons (Mimir's and
// VictoriaMetrics' partial-write behaviour), which Prometheus logs and
// does not retry. Exemplars and metadata are dropped.
//
// With an HA tracker (SetHA, docs/ha-pairs.md), a request whose first
// series carries both the cluster and the replica label is stored only if
// that replica is its cluster's elected one (Mimir decides per request
// the same way); another replica's request is answered 202 and dropped.
// The replica label is removed from every series of such a request.

const (
	rwV2ContentType = "application/x-protobuf;proto=io.prometheus.write.v2.Request"
	// MaxRemoteWriteBytes bounds a remote-write body, compressed and not.
	MaxRemoteWriteBytes = 64 << 20
)

// RemoteWrite serves /api/v1/write.
type RemoteWrite struct {
	engine           *datanode.Engine
	samples, refused prometheus.Counter
	ha               *hatracker.Tracker
}

// SetHA deduplicates HA pairs' requests with t (nil: off). Call it before
// serving.
func (rw *RemoteWrite) SetHA(t *hatracker.Tracker) { rw.ha = t }

// NewRemoteWrite is the remote-write handler of eng; its metrics are
// Collectors.
func NewRemoteWrite(eng *datanode.Engine) *RemoteWrite {
	return &RemoteWrite{engine: eng,
		samples: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_remote_write_samples_total", Help: "Samples stored through remote write."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_remote_write_refused_samples_total", Help: "Samples (and native histograms) remote write refused as never storable; the rest of their requests was stored."}),
	}
}

// Collectors are the handler's metrics.
func (rw *RemoteWrite) Collectors() []prometheus.Collector {
	return []prometheus.Collector{rw.samples, rw.refused}
}

// errBadWrite: the request can never succeed (400, not retried).
var errBadWrite = errors.New("bad remote write request")

func (rw *RemoteWrite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v2 := false
	switch ct := strings.ReplaceAll(r.Header.Get("Content-Type"), " ", ""); ct {
	case "", "application/x-protobuf", "application/x-protobuf;proto=prometheus.WriteRequest":
	case rwV2ContentType:
		v2 = true
	default:
		http.Error(w, fmt.Sprintf("unsupported Content-Type %q (want application/x-protobuf, or %s)", ct, rwV2ContentType), http.StatusUnsupportedMediaType)
		return
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "snappy" {
		http.Error(w, fmt.Sprintf("unsupported Content-Encoding %q (want snappy)", enc), http.StatusUnsupportedMediaType)
		return
	}
	tn, err := RequestTenant(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
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
	var b *batcher
	if v2 {
		b, err = decodeV2By(raw, rw.ha)
	} else {
		b, err = decodeV1By(raw, rw.ha)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	defer b.release() // once the answer is written: it may name the points' labels
	if drop, err := b.dedup(r.Context(), rw.ha, tn); err != nil {
		http.Error(w, err.Error(), haStatus(err))
		return
	} else if drop {
		w.WriteHeader(http.StatusAccepted) // Mimir's answer to the other replica
		return
	}
	if len(b.points) > 0 {
		if err := writeMetrics(r.Context(), rw.engine, tn, b.points); err != nil {
			// Over a tenant's limit (docs/limits.md): a series limit
			// stored the rest of the request, which the message says.
			rw.samples.Add(float64(limitWritten(err)))
			if ra, ok := limits.RetryAfter(err); ok {
				w.Header().Set("Retry-After", ra)
			}
			http.Error(w, tenant.Unqualify(tn, err.Error()), writeStatus(err))
			return
		}
		rw.samples.Add(float64(len(b.points)))
	}
	if v2 {
		h := w.Header()
		h.Set("X-Prometheus-Remote-Write-Samples-Written", strconv.Itoa(len(b.points)))
		h.Set("X-Prometheus-Remote-Write-Histograms-Written", "0")
		h.Set("X-Prometheus-Remote-Write-Exemplars-Written", "0")
	}
	if b.refused > 0 {
		rw.refused.Add(float64(b.refused))
		http.Error(w, b.refusal(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// writeStatus is the HTTP status of a failed writeMetrics. Prometheus (and
// an OTLP exporter) drops a batch answered 4xx and retries one answered
// 503: only bad input and a batch over a limit (here or on the datanode
// the share went to) are the sender's to fix; the rest is a 503, retried.
//
// Over a tenant's ingestion rate it is 429, which Prometheus retries
// (retry_on_http_429) later; over another limit (shape, series) 400.
func writeStatus(err error) int {
	c := datanode.ErrClass(err)
	if c != errclass.Invalid && c != errclass.TooLarge && c != errclass.RateLimited {
		c = errclass.Unavailable
	}
	return c.HTTP()
}

// limitWritten is how many samples a write refused in part by a tenant's
// series limit stored (0 for any other error).
func limitWritten(err error) int {
	var le *limits.Error
	if errors.As(err, &le) {
		return le.Written // expired points among the admitted ones are not stored
	}
	return 0
}

// batcher turns a request's series into points of the metrics table,
// refusing what can never be stored and keeping the rest. Its memory is
// kept for the next requests (release).
type batcher struct {
	points  []row.Point
	keys    []byte // the series keys, one after another
	enc     row.SeriesEncoder
	refused int      // samples and histograms refused
	reasons []string // the first maxReasons reasons
	more    int      // reasons past those

	// The arenas walkedSeries cuts its points' tags and fields from.
	tags   []row.Tag
	fields []row.Field
	// The series being walked, and a 2.0 request's symbols.
	wls  []wireLabel
	wss  []wireSample
	refs []uint32
	syms []string
	sb   labels.ScratchBuilder
	// The label names of the last series appendTags took, and its shape.
	names    []seenName
	shape    uint32
	reserved bool // the arenas were sized for the request (reserve)

	// HA pairs (dedupBy): the cluster and replica label names (empty:
	// off), whether the first series was seen, and its cluster and
	// replica if it carried both (the request is then deduplicated, and
	// the replica label left out of every series).
	haCluster, haReplica string
	haFirst              bool
	cluster, replica     string
}

// dedupBy makes the batcher note the HA labels of t's configuration.
func (b *batcher) dedupBy(t *hatracker.Tracker) {
	if t != nil {
		c := t.Config()
		b.haCluster, b.haReplica = c.ClusterLabel, c.ReplicaLabel
	}
}

// haStatus is the HTTP status of a failed HA election: 400 past
// --ha-max-clusters, else etcd's failure, 503 (retried).
func haStatus(err error) int {
	if errors.Is(err, hatracker.ErrTooManyClusters) {
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

// haNote notes the first series' cluster and replica, if it has both
// (get is its labels' values).
func (b *batcher) haNote(get func(string) string) {
	b.haFirst = true
	if c, r := get(b.haCluster), get(b.haReplica); c != "" && r != "" {
		b.cluster, b.replica = c, r
	}
}

// dedup says whether the request is another replica's than its cluster's
// elected one, and its points are then to be dropped (and counted). A
// cluster is tenant tn's: two tenants' clusters of one name are two (as
// Mimir's HA tracker keys them).
func (b *batcher) dedup(ctx context.Context, t *hatracker.Tracker, tn string) (bool, error) {
	if t == nil || b.replica == "" {
		return false, nil
	}
	// The labels may be strings of the request's body: the tracker keeps them.
	ok, err := t.Accept(ctx, tenant.Qualify(tn, strings.Clone(b.cluster)), strings.Clone(b.replica))
	if err != nil || ok {
		return false, err
	}
	t.Dropped(len(b.points))
	return true, nil
}

// batchers are kept for the next requests (freelist: a sync.Pool's were
// mostly gone by the next request on a busy node). Allocated for each
// request, the arenas of 2,000 series of 17 labels (2 MiB) made decoding
// take 2.4 times as long (BenchmarkDecodeRemoteWrite).
var batchers = freelist.New[*batcher](8)

// maxKeptTags bounds the tags of a batcher that is kept (32 MiB).
const maxKeptTags = 1 << 20

func newBatcher() *batcher {
	if b, ok := batchers.Get(); ok {
		return b
	}
	return &batcher{}
}

// release hands the batcher back for another request: its points and
// their tags are not to be used any more.
func (b *batcher) release() {
	if cap(b.tags) > maxKeptTags || cap(b.points) > maxKeptTags/8 {
		return // a rare huge request: do not keep its memory
	}
	// Drop the references into the request (its labels are strings of
	// its body) and into the last series' labels; the encoder, which
	// remembers the names it last sorted, starts anew.
	clear(b.points)
	clear(b.tags)
	clear(b.wls)
	clear(b.syms)
	clear(b.names)
	*b = batcher{points: b.points[:0], keys: b.keys[:0], reasons: b.reasons[:0],
		tags: b.tags[:0], fields: b.fields[:0], wls: b.wls[:0], wss: b.wss[:0], refs: b.refs[:0], syms: b.syms[:0], names: b.names[:0]}
	batchers.Put(b)
}

// maxReasons bounds the reasons an answer names.
const maxReasons = 3

// refuse records that n samples of series ls were refused, and why.
func (b *batcher) refuse(n int, ls fmt.Stringer, why string) {
	b.refused += n
	if len(b.reasons) < maxReasons {
		b.reasons = append(b.reasons, fmt.Sprintf("%s: %s", ls, why))
	} else {
		b.more++
	}
}

// refusal is the answer's text when some samples were refused.
func (b *batcher) refusal() string {
	msg := fmt.Sprintf("%v: %d of %d samples refused, the other %d stored: %s", errBadWrite, b.refused, b.refused+len(b.points), len(b.points), strings.Join(b.reasons, "; "))
	if b.more > 0 {
		msg += fmt.Sprintf("; and %d more", b.more)
	}
	return msg
}

// series adds the n samples of one series (at returns sample i), whose
// labels ls are sorted by name, as labels are.
func (b *batcher) series(ls labels.Labels, histograms, n int, at func(i int) (int64, float64)) {
	if b.haCluster != "" && !b.haFirst {
		b.haNote(ls.Get)
	}
	drop := ""
	if b.replica != "" {
		drop = b.haReplica
	}
	if histograms > 0 {
		b.refuse(histograms, ls, "native histograms are not supported")
	}
	if n == 0 {
		return
	}
	if ls.Get(model.MetricNameLabel) == "" {
		b.refuse(n, ls, "no __name__ label")
		return
	}
	tags := make([]row.Tag, 0, ls.Len())
	var bad error
	prev := ""
	ls.Range(func(l labels.Label) {
		switch {
		case bad != nil || l.Value == "":
		case l.Name == prev:
			bad = fmt.Errorf("label %q appears twice", l.Name)
		case l.Name == drop:
		default:
			bad = schema.ValidateLabelName(l.Name)
			tags = append(tags, row.Tag{Name: l.Name, Value: l.Value})
		}
		prev = l.Name
	})
	if bad != nil {
		b.refuse(n, ls, bad.Error())
		return
	}
	start := len(b.keys)
	b.keys, _ = b.enc.Append(b.keys, tags) // names checked unique above
	key := b.keys[start:len(b.keys):len(b.keys)]
	for k := range n {
		ts, v := at(k)
		if ts > math.MaxInt64/1_000_000 || ts < math.MinInt64/1_000_000 {
			b.refuse(1, ls, fmt.Sprintf("timestamp %d ms is out of range", ts))
			continue
		}
		b.points = append(b.points, row.Point{Tags: tags, Series: key, TS: ts * 1_000_000, Fields: []row.Field{{Name: ValueField, Value: row.FloatValue(v)}}})
	}
}
