// Package httpapi is the datanode's HTTP interface: InfluxDB line protocol
// writes (/write for 1.x clients, /api/v2/write for 2.x clients and
// Telegraf), the InfluxDB 1.x /query calls clients make at start, the
// Prometheus HTTP API (PromQL, series and labels, see package prom),
// Prometheus remote write and OTLP metrics ingest,
// Prometheus /metrics, health endpoints, and the web UI (package ui).
package httpapi

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/errclass"
	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/hatracker"
	"github.com/stratadb/strata/internal/limits"
	"github.com/stratadb/strata/internal/lineproto"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/rules"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/tenant"
	"github.com/stratadb/strata/internal/ui"
	"github.com/stratadb/strata/internal/version"
)

// DefaultMaxBodyBytes bounds a write request's body, after decompression.
const DefaultMaxBodyBytes = 64 << 20

// maxPooledBody is the largest body buffer kept for the next request.
const maxPooledBody = 16 << 20

// sized returns buf, or a buffer in its place, with room for a body of n
// bytes and the bytes.MinRead that ReadFrom wants free at its end. A
// pooled buffer too small is replaced by one of about that size: grown,
// bytes.Buffer doubles it, and requests that vary a little in size left
// every pooled buffer twice the size of one (memory that a node faults in
// and keeps).
func sized(buf *bytes.Buffer, n int64) *bytes.Buffer {
	need := int(n) + bytes.MinRead
	if buf.Cap() >= need {
		return buf
	}
	return bytes.NewBuffer(make([]byte, 0, need+need/8))
}

// keptWrites is how many body buffers and parsers are kept for the next
// requests: as many as writes usually run at once. What they hold is
// bounded by maxPooledBody each (a parser's arenas grow with the body it
// parsed), a few tens of MiB for the usual requests of a few MiB.
const keptWrites = 8

// Options configure the handler.
type Options struct {
	MaxBodyBytes int64 // default DefaultMaxBodyBytes
	Gatherer     prometheus.Gatherer
	Registerer   prometheus.Registerer
	Logger       *slog.Logger
	Build        version.Info // reported by /health and /ping
	// Pprof serves net/http/pprof under /debug/pprof/.
	Pprof bool
	// Query bounds PromQL queries (the Prometheus HTTP API).
	Query prom.Limits
	// API, if set, is the Prometheus HTTP API served (default: one over
	// the engine, bounded by Query).
	API *prom.API
	// Rules, if set, evaluates rules: /api/v1/rules and /api/v1/alerts
	// answer its state, and POST /-/reload reloads its files (default:
	// none; no groups and no alerts).
	Rules *rules.Manager
	// UI configures the web UI served at / (internal/ui, docs/ui.md).
	UI ui.Options
	// OTLP configures OTLP metrics ingest (/opentelemetry/v1/metrics).
	OTLP prom.OTLPOptions
	// HA, if set, deduplicates HA Prometheus pairs' remote writes and
	// OTLP requests (docs/ha-pairs.md).
	HA *hatracker.Tracker
}

// Handler serves the HTTP API.
type Handler struct {
	eng     *datanode.Engine
	opts    Options
	mux     *http.ServeMux
	parsers *freelist.List[*lineproto.Parser]
	bodies  *freelist.List[*bytes.Buffer] // request bodies, up to maxPooledBody
	reqs    *prometheus.CounterVec
	rows    prometheus.Counter
	latency *prometheus.HistogramVec
}

// New returns the handler.
func New(eng *datanode.Engine, opts Options) *Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Gatherer == nil {
		opts.Gatherer = prometheus.DefaultGatherer
	}
	h := &Handler{eng: eng, opts: opts, mux: http.NewServeMux(),
		reqs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_http_write_requests_total", Help: "Line-protocol write requests by HTTP status."}, []string{"code"}),
		rows: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_http_write_points_total", Help: "Points written through line protocol."}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "strata_http_write_duration_seconds", Help: "Write request latency.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"endpoint"}),
	}
	rw, otlp := prom.NewRemoteWrite(eng), prom.NewOTLP(eng, opts.OTLP)
	rw.SetHA(opts.HA)
	otlp.SetHA(opts.HA)
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(h.reqs, h.rows, h.latency)
		opts.Registerer.MustRegister(rw.Collectors()...)
		opts.Registerer.MustRegister(otlp.Collectors()...)
		if opts.HA != nil {
			opts.Registerer.MustRegister(opts.HA.Collectors()...)
		}
	}
	h.parsers, h.bodies = freelist.New[*lineproto.Parser](keptWrites), freelist.New[*bytes.Buffer](keptWrites)
	h.mux.HandleFunc("POST /write", h.write(false))
	h.mux.HandleFunc("POST /api/v2/write", h.write(true))
	h.mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}))
	if opts.API == nil {
		opts.API = prom.NewAPI(eng, opts.Query, opts.Build, opts.Logger)
	}
	opts.API.Register(h.mux)
	rules.Register(h.mux, opts.Rules)
	h.mux.Handle("POST /api/v1/write", rw)
	h.mux.Handle("POST /opentelemetry/v1/metrics", otlp)
	h.mux.HandleFunc("GET /query", h.influxQuery)
	h.mux.HandleFunc("POST /query", h.influxQuery)
	h.mux.HandleFunc("GET /health", h.health)
	h.mux.HandleFunc("GET /ping", h.ping)
	h.mux.HandleFunc("HEAD /ping", h.ping)
	h.mux.HandleFunc("GET /ready", h.ping)
	ui.Register(h.mux, opts.UI)
	if opts.Pprof {
		h.mux.HandleFunc("/debug/pprof/", pprof.Index)
		h.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		h.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		h.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"name": "strata", "status": "pass", "message": "ready for queries and writes",
		"version": h.opts.Build.Version, "revision": h.opts.Build.Revision, "go_version": h.opts.Build.GoVersion})
}

func (h *Handler) ping(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Influxdb-Version", "strata-"+h.opts.Build.Version)
	w.WriteHeader(http.StatusNoContent)
}

// apiError is written in the format of the endpoint's InfluxDB version.
type apiError struct {
	status  int
	code    string // 2.x code
	message string
}

func (h *Handler) fail(w http.ResponseWriter, v2 bool, e apiError) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Influxdb-Error", e.message)
	w.WriteHeader(e.status)
	if v2 {
		_ = json.NewEncoder(w).Encode(map[string]string{"code": e.code, "message": e.message})
	} else {
		_ = json.NewEncoder(w).Encode(map[string]string{"error": e.message})
	}
}

func (h *Handler) write(v2 bool) http.HandlerFunc {
	endpoint := "v1"
	if v2 {
		endpoint = "v2"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		status := h.serveWrite(w, r, v2)
		h.reqs.WithLabelValues(fmt.Sprint(status)).Inc()
		h.latency.WithLabelValues(endpoint).Observe(time.Since(began).Seconds())
	}
}

func (h *Handler) serveWrite(w http.ResponseWriter, r *http.Request, v2 bool) int {
	fail := func(e apiError) int { h.fail(w, v2, e); return e.status }
	q := r.URL.Query()
	// The database (1.x) or bucket (2.x) must be named, as InfluxDB
	// requires; tables are the measurements.
	if v2 && q.Get("bucket") == "" {
		return fail(apiError{http.StatusBadRequest, "invalid", "bucket is required"})
	}
	if !v2 && q.Get("db") == "" {
		return fail(apiError{http.StatusBadRequest, "invalid", "database is required"})
	}
	// The tenant whose tables the measurements are (docs/tenants.md).
	tn, err := tenant.One(r.Header.Get(tenant.Header))
	if err != nil {
		return fail(apiError{http.StatusBadRequest, "invalid", err.Error()})
	}
	prec, err := lineproto.ParsePrecision(q.Get("precision"))
	if err != nil || (v2 && (q.Get("precision") == "m" || q.Get("precision") == "h")) {
		return fail(apiError{http.StatusBadRequest, "invalid", fmt.Sprintf("invalid precision %q", q.Get("precision"))})
	}
	if r.ContentLength > h.opts.MaxBodyBytes {
		return fail(apiError{http.StatusRequestEntityTooLarge, "request too large", fmt.Sprintf("request body is %d bytes, the limit is %d", r.ContentLength, h.opts.MaxBodyBytes)})
	}
	var body io.Reader = r.Body
	if enc := r.Header.Get("Content-Encoding"); strings.EqualFold(enc, "gzip") {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			return fail(apiError{http.StatusBadRequest, "invalid", "bad gzip body: " + err.Error()})
		}
		defer gz.Close()
		body = gz
	} else if enc != "" && !strings.EqualFold(enc, "identity") {
		return fail(apiError{http.StatusUnsupportedMediaType, "invalid", fmt.Sprintf("unsupported Content-Encoding %q", enc)})
	}
	// The body is read into a pooled buffer, sized from Content-Length
	// when it is given: the parser copies what it keeps, so the buffer is
	// free again once the body is parsed. (Reading with io.ReadAll grew
	// and copied it, about a tenth of a write's CPU.)
	buf, ok := h.bodies.Get()
	if !ok {
		buf = new(bytes.Buffer)
	}
	defer func() {
		if buf.Cap() <= maxPooledBody {
			buf.Reset()
			h.bodies.Put(buf)
		}
	}()
	buf.Reset()
	if r.ContentLength > 0 && body == r.Body {
		buf = sized(buf, r.ContentLength)
	}
	if _, err := buf.ReadFrom(io.LimitReader(body, h.opts.MaxBodyBytes+1)); err != nil {
		return fail(apiError{http.StatusBadRequest, "invalid", "reading body: " + err.Error()})
	}
	data := buf.Bytes()
	if int64(len(data)) > h.opts.MaxBodyBytes {
		return fail(apiError{http.StatusRequestEntityTooLarge, "request too large", fmt.Sprintf("request body exceeds %d bytes", h.opts.MaxBodyBytes)})
	}
	// The parser's memory holds the points until the write is done; a
	// parser that took a body too large to pool is not kept either.
	p, ok := h.parsers.Get()
	if !ok {
		p = lineproto.NewParser()
	}
	defer func() {
		if len(data) <= maxPooledBody {
			h.parsers.Put(p)
		}
	}()
	b, errs := p.Parse(data, prec, time.Now())
	if len(errs) > 0 {
		// The whole request is rejected (InfluxDB 2.x behaviour): nothing
		// is written, so a retry of the fixed request cannot duplicate.
		msgs := make([]string, 0, min(len(errs), 10))
		for _, e := range errs[:min(len(errs), 10)] {
			msgs = append(msgs, e.Error())
		}
		more := ""
		if len(errs) > 10 {
			more = fmt.Sprintf(" (and %d more)", len(errs)-10)
		}
		return fail(apiError{http.StatusBadRequest, "invalid", fmt.Sprintf("unable to parse %d of %d lines, nothing written: %s%s",
			len(errs), len(errs)+b.Len(), strings.Join(msgs, "; "), more)})
	}
	batches, lines := byTable(b)
	for i := range batches {
		// Always: a default tenant's measurement named like another
		// tenant's table is qualified out of its reach.
		batches[i].Table = tenant.Qualify(tn, batches[i].Table)
	}
	res, err := h.eng.WriteTables(r.Context(), batches, datanode.WriteOptions{CreateTable: true})
	h.rows.Add(float64(res.Written))
	if err != nil {
		var be *datanode.BatchError
		var ce *schema.ConflictError
		if errors.As(err, &be) {
			table := tenant.Base(be.Table)
			line := lines[table][be.Err.Index]
			msg := fmt.Sprintf("line %d: table %s: %v; nothing written", line, table, be.Err.Err)
			if errors.As(err, &ce) {
				msg = fmt.Sprintf("line %d: field type conflict: table %s: %v; nothing written", line, table, ce)
			}
			return fail(apiError{errclass.Invalid.HTTP(), "invalid", msg})
		}
		// The class of the error, wherever it arose (another datanode's
		// keeps its own): a cancel is the client's only if it went away.
		c := datanode.ErrClass(err)
		if gone := r.Context().Err(); gone != nil && errors.Is(err, gone) {
			c = errclass.Canceled
		} else if c == errclass.Canceled && gone == nil {
			c = errclass.Unavailable // canceled here, not by the client: a retry may succeed
		}
		msg := tenant.Unqualify(tn, err.Error())
		if ra, ok := limits.RetryAfter(err); ok {
			w.Header().Set("Retry-After", ra) // over the tenant's rate: when the bucket holds the request
		}
		if c.HTTP() >= 500 {
			if c == errclass.Internal {
				h.opts.Logger.Warn("write failed", "err", err)
			}
			msg += " (the write may be partly applied; retrying it is safe)"
		}
		return fail(apiError{c.HTTP(), influxCode(c), msg})
	}
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// influxCode is the InfluxDB 2.x error code of a write's error class.
func influxCode(c errclass.Class) string {
	switch c {
	case errclass.Invalid:
		return "invalid"
	case errclass.TooLarge:
		return "request too large"
	case errclass.RateLimited:
		return "too many requests"
	case errclass.Unavailable, errclass.Timeout:
		return "unavailable"
	case errclass.Canceled:
		return "canceled"
	case errclass.NotFound:
		return "not found"
	case errclass.Exists, errclass.Busy:
		return "conflict"
	}
	return "internal error"
}

// byTable splits a request's points by table, keeping each point's line
// for error messages. A request of one table (the usual case) is passed
// on as it is; otherwise each table's slices are sized once.
func byTable(b *lineproto.Batch) ([]datanode.TableBatch, map[string][]int) {
	if b.Len() == 0 {
		return nil, nil
	}
	first := b.Measurements[0]
	if !slices.ContainsFunc(b.Measurements, func(m string) bool { return m != first }) {
		return []datanode.TableBatch{{Table: first, Points: b.Points}}, map[string][]int{first: b.Lines}
	}
	idx := map[string]int{} // table -> its place in batches
	var counts []int
	for _, m := range b.Measurements {
		j, ok := idx[m]
		if !ok {
			j = len(counts)
			idx[m] = j
			counts = append(counts, 0)
		}
		counts[j]++
	}
	batches := make([]datanode.TableBatch, len(counts))
	lines := make(map[string][]int, len(counts))
	for m, j := range idx {
		batches[j] = datanode.TableBatch{Table: m, Points: make([]row.Point, 0, counts[j])}
		lines[m] = make([]int, 0, counts[j])
	}
	for i, m := range b.Measurements {
		j := idx[m]
		batches[j].Points = append(batches[j].Points, b.Points[i])
		lines[m] = append(lines[m], b.Lines[i])
	}
	return batches, lines
}
