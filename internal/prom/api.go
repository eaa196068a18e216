package prom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/errclass"
	tlimits "github.com/stratadb/strata/internal/limits"
	"github.com/stratadb/strata/internal/tenant"
	"github.com/stratadb/strata/internal/version"
)

// Limits bound what one query may take.
type Limits struct {
	// MaxSamples is the most samples a query holds in memory at once, and
	// the most one query reads (default 50M, Prometheus' default).
	MaxSamples int
	// Timeout bounds a query's evaluation (default 2 min).
	Timeout time.Duration
	// Concurrency is how many queries evaluate at once; more wait for a
	// slot within their timeout (default 8).
	Concurrency int
}

// API serves the Prometheus HTTP API's query, series, label, metadata and
// build-info endpoints.
type API struct {
	q      *Queryable
	engine *promql.Engine
	// Tenants' query limits (SetLimits), and the engines of smaller
	// MaxSamples than limits.MaxSamples they need, by MaxSamples.
	tenants *tlimits.Watcher
	engOpts promql.EngineOpts
	engines sync.Map // int -> *promql.Engine
	parser  parser.Parser
	limits  Limits
	slots   chan struct{}
	build   version.Info
	log     *slog.Logger
}

// NewAPI returns the API over an engine.
func NewAPI(eng *datanode.Engine, limits Limits, build version.Info, log *slog.Logger) *API {
	if limits.MaxSamples <= 0 {
		limits.MaxSamples = 50_000_000
	}
	if limits.Timeout <= 0 {
		limits.Timeout = 2 * time.Minute
	}
	if limits.Concurrency <= 0 {
		limits.Concurrency = 8
	}
	if log == nil {
		log = slog.Default()
	}
	p := parser.NewParser(parser.Options{})
	opts := promql.EngineOpts{Logger: log, MaxSamples: limits.MaxSamples, Timeout: limits.Timeout,
		LookbackDelta: 5 * time.Minute, EnableAtModifier: true, EnableNegativeOffset: true, Parser: p}
	return &API{
		q:      &Queryable{Engine: eng, MaxSamples: limits.MaxSamples},
		engine: promql.NewEngine(opts), engOpts: opts,
		parser: p, limits: limits, slots: make(chan struct{}, limits.Concurrency), build: build, log: log,
	}
}

// SetLimits bounds each query by its tenant's limits as w holds them
// (max_samples_per_query, max_series_per_query; docs/limits.md), within
// the node's own (Limits): a change applies to the next query. Call it
// before serving.
func (a *API) SetLimits(w *tlimits.Watcher) { a.tenants = w }

// engineFor is the engine of queries bounded to maxSamples: the API's,
// or one made for that bound and kept (a handful: one per value a
// tenant's limit takes).
func (a *API) engineFor(maxSamples int) *promql.Engine {
	if maxSamples <= 0 || maxSamples >= a.limits.MaxSamples {
		return a.engine
	}
	if e, ok := a.engines.Load(maxSamples); ok {
		return e.(*promql.Engine)
	}
	o := a.engOpts
	o.MaxSamples = maxSamples
	e, _ := a.engines.LoadOrStore(maxSamples, promql.NewEngine(o))
	return e.(*promql.Engine)
}

// Register adds the endpoints to mux.
func (a *API) Register(mux *http.ServeMux) {
	for _, m := range []string{"GET", "POST"} {
		mux.HandleFunc(m+" /api/v1/query", a.query)
		mux.HandleFunc(m+" /api/v1/query_range", a.queryRange)
		mux.HandleFunc(m+" /api/v1/series", a.series)
		mux.HandleFunc(m+" /api/v1/labels", a.labelNames)
		// Grafana's Explore asks for exemplars with every query: there are none.
		mux.HandleFunc(m+" /api/v1/query_exemplars", func(w http.ResponseWriter, r *http.Request) { respond(w, []any{}) })
		mux.HandleFunc(m+" /api/v1/format_query", a.formatQuery)
	}
	// /api/v1/rules and /api/v1/alerts: package rules (rules.Register).
	mux.HandleFunc("GET /api/v1/label/{name}/values", a.labelValues)
	mux.HandleFunc("GET /api/v1/status/buildinfo", a.buildinfo)
	mux.HandleFunc("GET /api/v1/metadata", a.metadata)
	mux.HandleFunc("GET /api/v1/status/tsdb", a.tsdbStatus)
}

// apiError is a Prometheus-format error.
type apiError struct {
	typ    string // bad_data, execution, timeout, canceled, internal
	status int
	err    error
}

func badData(err error) *apiError { return &apiError{"bad_data", http.StatusBadRequest, err} }

func respond(w http.ResponseWriter, data any) {
	w.Header().Set("Content-Type", "application/json")
	if vs, ok := data.([]string); ok {
		b := stringsBody(vs)
		w.Header().Set("Content-Length", strconv.Itoa(len(b))) // one write, not chunks
		_, _ = w.Write(b)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": data})
}

// keptBody is the last long list of strings respond encoded, and its body.
// Asked again while nothing changed, a label endpoint answers a region's
// kept answer, the very slice it answered before (read only:
// datanode.Engine.TagValues), and the body is written again, not encoded
// again (100,000 metric names: 3 MB, 5.6 ms to encode, BenchmarkRespondNames).
// The slice is held while kept, so no other can have its address; a slice
// built for one request is dropped after it, never answered again, so it
// is never found here.
var keptBody struct {
	sync.Mutex
	vs   []string
	body []byte
}

// minKeptBody is the least list keptBody keeps.
const minKeptBody = 1000

// stringsBody returns the body of an answer of vs (read only).
func stringsBody(vs []string) []byte {
	if len(vs) < minKeptBody {
		return appendStrings(vs)
	}
	keptBody.Lock()
	if len(keptBody.vs) == len(vs) && unsafe.SliceData(keptBody.vs) == unsafe.SliceData(vs) {
		b := keptBody.body
		keptBody.Unlock()
		return b
	}
	keptBody.Unlock()
	b := appendStrings(vs)
	keptBody.Lock()
	keptBody.vs, keptBody.body = vs, b
	keptBody.Unlock()
	return b
}

// appendStrings is what respond's encoder writes of a list of strings, in
// half its time (BenchmarkRespondNames against BenchmarkRespondNamesJSON):
// a label endpoint answers 100,000 metric names, and encoding/json was a
// quarter of the request. A string that needs escaping goes through
// encoding/json alone.
func appendStrings(vs []string) []byte {
	n := 40
	for _, v := range vs {
		n += len(v) + 3
	}
	b := make([]byte, 0, n)
	b = append(b, `{"data":[`...)
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		if plainJSON(v) {
			b = append(b, '"')
			b = append(b, v...)
			b = append(b, '"')
			continue
		}
		q, _ := json.Marshal(v) // a string always encodes
		b = append(b, q...)
	}
	return append(b, "],\"status\":\"success\"}\n"...)
}

// plainJSON reports whether encoding/json writes s as it is, between
// quotes: printable ASCII but the quote, the backslash and the three bytes
// it escapes for HTML.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if !plainByte[s[i]] {
			return false
		}
	}
	return true
}

var plainByte = func() (t [256]bool) {
	for c := 0x20; c <= 0x7e; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

func fail(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "error", "errorType": e.typ, "error": e.err.Error()})
}

// queryError classifies an evaluation error as Prometheus does; a
// storage error by its class (datanode.ErrClass), so that a region
// unavailable here or on another datanode is a 503, as a timeout is.
func queryError(err error) *apiError {
	var (
		timeout  promql.ErrQueryTimeout
		canceled promql.ErrQueryCanceled
		storageE promql.ErrStorage
	)
	switch {
	case errors.As(err, &timeout):
		return &apiError{"timeout", errclass.Timeout.HTTP(), err}
	case errors.As(err, &canceled):
		return &apiError{"canceled", errclass.Canceled.HTTP(), err}
	}
	cause := err
	if errors.As(err, &storageE) {
		cause = storageE.Err // ErrStorage does not unwrap
	}
	switch c := datanode.ErrClass(cause); c {
	case errclass.Timeout:
		return &apiError{"timeout", c.HTTP(), err}
	case errclass.Canceled:
		return &apiError{"canceled", c.HTTP(), err}
	case errclass.Unavailable:
		return &apiError{"unavailable", c.HTTP(), err}
	}
	if cause != err {
		return &apiError{"internal", http.StatusInternalServerError, err}
	}
	return &apiError{"execution", http.StatusUnprocessableEntity, err}
}

// acquire waits for a query slot within the query's timeout.
func (a *API) acquire(ctx context.Context) (func(), *apiError) {
	select {
	case a.slots <- struct{}{}:
		return func() { <-a.slots }, nil
	case <-ctx.Done():
		return nil, &apiError{"timeout", http.StatusServiceUnavailable, fmt.Errorf("no query slot free within the timeout (%d queries run at once): %w", a.limits.Concurrency, ctx.Err())}
	}
}

// slot is the request's context (its timeout) and a query slot within
// it; done releases both. On an error the answer is written.
func (a *API) slot(w http.ResponseWriter, r *http.Request) (ctx context.Context, done func(), ok bool) {
	ctx, cancel, aerr := a.context(r)
	if aerr != nil {
		fail(w, aerr)
		return nil, nil, false
	}
	release, aerr := a.acquire(ctx)
	if aerr != nil {
		cancel()
		fail(w, aerr)
		return nil, nil, false
	}
	return ctx, func() { release(); cancel() }, true
}

func (a *API) context(r *http.Request) (context.Context, context.CancelFunc, *apiError) {
	timeout := a.limits.Timeout
	if s := r.FormValue("timeout"); s != "" {
		d, err := parseDuration(s)
		if err != nil {
			return nil, nil, badData(fmt.Errorf("invalid parameter \"timeout\": %w", err))
		}
		timeout = min(timeout, d)
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	return ctx, cancel, nil
}

func (a *API) query(w http.ResponseWriter, r *http.Request) {
	ts := time.Now()
	if s := r.FormValue("time"); s != "" {
		var err error
		if ts, err = parseTime(s); err != nil {
			fail(w, badData(fmt.Errorf("invalid parameter \"time\": %w", err)))
			return
		}
	}
	tenants, ok := requestTenants(w, r)
	if !ok {
		return
	}
	a.eval(w, r, tenants, func(ctx context.Context, read *atomic.Int64) (evaluation, error) {
		p := a.plan(tenants, r.FormValue("query"), read)
		q, err := p.engine.NewInstantQuery(ctx, p.queryable(), nil, p.text, ts)
		return p.wrap(q), err
	})
}

func (a *API) queryRange(w http.ResponseWriter, r *http.Request) {
	start, err := parseTime(r.FormValue("start"))
	if err != nil {
		fail(w, badData(fmt.Errorf("invalid parameter \"start\": %w", err)))
		return
	}
	end, err := parseTime(r.FormValue("end"))
	if err != nil {
		fail(w, badData(fmt.Errorf("invalid parameter \"end\": %w", err)))
		return
	}
	if end.Before(start) {
		fail(w, badData(errors.New("invalid parameter \"end\": end timestamp must not be before start time")))
		return
	}
	step, err := parseDuration(r.FormValue("step"))
	if err != nil {
		fail(w, badData(fmt.Errorf("invalid parameter \"step\": %w", err)))
		return
	}
	if step <= 0 {
		fail(w, badData(errors.New("zero or negative query resolution step widths are not accepted. Try a positive integer")))
		return
	}
	if end.Sub(start)/step > 11000 {
		fail(w, badData(errors.New("exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)")))
		return
	}
	tenants, ok := requestTenants(w, r)
	if !ok {
		return
	}
	a.eval(w, r, tenants, func(ctx context.Context, read *atomic.Int64) (evaluation, error) {
		p := a.plan(tenants, r.FormValue("query"), read)
		if d := planDirect(p.rollup, step); d != nil && p.fed == nil {
			return p.wrap(&directQuery{plan: d, q: p.q, start: start, end: end, step: step}), nil
		}
		q, err := p.engine.NewRangeQuery(ctx, p.queryable(), nil, p.text, start, end, step)
		return p.wrap(q), err
	})
}

// queryPlan is how a query is evaluated.
type queryPlan struct {
	q      *Queryable
	engine *promql.Engine // the engine of the tenant's max_samples_per_query
	text   string         // the query the engine evaluates
	rollup parser.Expr    // the parsed query if it is RollupSafe (then q computes range functions in the scan), or nil
	byName bool           // rewritten by rewriteByName: the answer's names are restored
	// fed, if set, is the Queryable of a federated read (then q is
	// unused): the engine evaluates the query as written over it.
	fed storage.Queryable
}

// queryable is what the engine evaluates the plan's query over.
func (p queryPlan) queryable() storage.Queryable {
	if p.fed != nil {
		return p.fed
	}
	return p.q
}

// plan parses query once to vet it: an aggregation by __name__ over a
// function that drops it is rewritten (byname.go), and a RollupSafe one
// has its range functions computed in the scan. read, if set, counts the
// samples the query reads (Queryable.Read).
func (a *API) plan(tenants []string, query string, read *atomic.Int64) queryPlan {
	if len(tenants) > 1 {
		f := &federated{tenants: tenants}
		for _, t := range tenants {
			q, _ := a.tenantQueryable(t)
			if read != nil {
				c := *q
				c.Read = read
				q = &c
			}
			f.qs = append(f.qs, q)
		}
		return queryPlan{engine: a.engine, text: query, fed: f}
	}
	base, engine := a.tenantQueryable(tenants[0])
	if read != nil {
		q := *base
		q.Read = read
		base = &q
	}
	expr, err := a.parser.ParseExpr(query)
	if err != nil {
		return queryPlan{q: base, engine: engine, text: query} // a bad expression fails in the engine, with its message
	}
	p := queryPlan{q: base, engine: engine, text: query}
	q := *base
	if rewriteByName(expr) {
		p.byName, p.text, q.byName = true, expr.String(), true
		p.q = &q
	}
	if RollupSafe(expr) {
		q.Rollups = true
		p.q, p.rollup = &q, expr
	}
	return p
}

// tenantQueryable is the Queryable of one query of the tenant, bounded
// by its limits, and the engine of its max_samples_per_query.
func (a *API) tenantQueryable(tenant string) (*Queryable, *promql.Engine) {
	l := a.tenants.For(tenant)
	if l.MaxSamplesPerQuery <= 0 && l.MaxSeriesPerQuery <= 0 {
		return a.q.ForTenant(tenant), a.engine
	}
	q := *a.q.ForTenant(tenant)
	if l.MaxSamplesPerQuery > 0 && (q.MaxSamples <= 0 || l.MaxSamplesPerQuery < int64(q.MaxSamples)) {
		q.MaxSamples = int(l.MaxSamplesPerQuery)
		q.SamplesLimit = "tenant " + tenant + "'s max_samples_per_query"
	}
	if l.MaxSeriesPerQuery > 0 {
		q.MaxSeries, q.Series = int(l.MaxSeriesPerQuery), new(atomic.Int64)
		q.SeriesLimit = "tenant " + tenant + "'s max_series_per_query"
	}
	return &q, a.engineFor(q.MaxSamples)
}

// samplesLimit names the bound of the engine's samples: the tenant's
// max_samples_per_query or the node's.
func (a *API) samplesLimit(tenants []string) string {
	if len(tenants) > 1 {
		return fmt.Sprintf("the node's query max samples, %d", a.limits.MaxSamples)
	}
	tenant := tenants[0]
	if l := a.tenants.For(tenant).MaxSamplesPerQuery; l > 0 && l < int64(a.limits.MaxSamples) {
		return fmt.Sprintf("limit max_samples_per_query=%d of tenant %s", l, tenant)
	}
	return fmt.Sprintf("the node's query max samples, %d", a.limits.MaxSamples)
}

// wrap is the evaluation of e as the plan asks (nil stays nil).
func (p queryPlan) wrap(e evaluation) evaluation {
	if e == nil || !p.byName {
		return e
	}
	return byNameQuery{e}
}

// evaluation is a query to run: the engine's (a promql.Query) or a
// directQuery.
type evaluation interface {
	Exec(ctx context.Context) *promql.Result
	Close()
}

// eval evaluates the query newQuery makes, and answers its value: with
// the samples it read under data.stats if the request has the stats
// parameter (Prometheus' name, totalQueryableSamples; docs/http-api.md).
func (a *API) eval(w http.ResponseWriter, r *http.Request, tenants []string, newQuery func(context.Context, *atomic.Int64) (evaluation, error)) {
	ctx, cancel, aerr := a.context(r)
	if aerr != nil {
		fail(w, aerr)
		return
	}
	defer cancel()
	if r.FormValue("query") == "" {
		fail(w, badData(errors.New("invalid parameter \"query\": empty query")))
		return
	}
	release, aerr := a.acquire(ctx)
	if aerr != nil {
		fail(w, aerr)
		return
	}
	defer release()
	var read *atomic.Int64
	if r.FormValue("stats") != "" {
		read = new(atomic.Int64)
	}
	q, err := newQuery(ctx, read)
	if err != nil {
		fail(w, badData(fmt.Errorf("invalid parameter \"query\": %w", err)))
		return
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		if errors.Is(res.Err, ErrTooManySamples) || errors.Is(res.Err, ErrTooManySeries) {
			fail(w, &apiError{"execution", http.StatusUnprocessableEntity, res.Err})
			return
		}
		var many promql.ErrTooManySamples
		if errors.As(res.Err, &many) {
			// The engine's bound: name it.
			fail(w, &apiError{"execution", http.StatusUnprocessableEntity, fmt.Errorf("%w (%s)", res.Err, a.samplesLimit(tenants))})
			return
		}
		fail(w, queryError(res.Err))
		return
	}
	if read != nil {
		respondValueStats(w, res.Value, read.Load())
		return
	}
	respondValue(w, res.Value)
}

// selectors parses match[] (required says whether one must be given).
func (a *API) selectors(r *http.Request, required bool) ([][]*labels.Matcher, *apiError) {
	_ = r.ParseForm() // as r.FormValue does: a malformed body leaves no values
	ms := r.Form["match[]"]
	if len(ms) == 0 && required {
		return nil, badData(errors.New("no match[] parameter provided"))
	}
	var out [][]*labels.Matcher
	for _, s := range ms {
		m, err := a.parser.ParseMetricSelector(s)
		if err != nil {
			return nil, badData(fmt.Errorf("invalid parameter \"match[]\": %w", err))
		}
		out = append(out, m)
	}
	return out, nil
}

// window parses start and end (defaults: all time) and limit.
func window(r *http.Request) (mint, maxt int64, limit int, aerr *apiError) {
	mint, maxt = math.MinInt64/2, math.MaxInt64/2
	for _, p := range []struct {
		name string
		dst  *int64
	}{{"start", &mint}, {"end", &maxt}} {
		if s := r.FormValue(p.name); s != "" {
			t, err := parseTime(s)
			if err != nil {
				return 0, 0, 0, badData(fmt.Errorf("invalid parameter %q: %w", p.name, err))
			}
			*p.dst = t.UnixMilli()
		}
	}
	if s := r.FormValue("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, 0, 0, badData(fmt.Errorf("invalid parameter \"limit\": %q", s))
		}
		limit = n
	}
	return mint, maxt, limit, nil
}

func (a *API) series(w http.ResponseWriter, r *http.Request) {
	sels, aerr := a.selectors(r, true)
	if aerr == nil {
		var mint, maxt int64
		var limit int
		if mint, maxt, limit, aerr = window(r); aerr == nil {
			a.withQuerier(w, r, mint, maxt, func(ctx context.Context, q storage.Querier) (any, error) {
				seen := map[string]bool{}
				out := []map[string]string{}
				for _, ms := range sels {
					ss := q.Select(ctx, false, &storage.SelectHints{Start: mint, End: maxt, Func: "series"}, ms...)
					for ss.Next() {
						ls := ss.At().Labels()
						if k := ls.String(); !seen[k] && (limit == 0 || len(out) < limit) {
							seen[k] = true
							out = append(out, ls.Map())
						}
					}
					if err := ss.Err(); err != nil {
						return nil, err
					}
				}
				return out, nil
			})
			return
		}
	}
	fail(w, aerr)
}

func (a *API) labelNames(w http.ResponseWriter, r *http.Request) {
	a.labels(w, r, func(ctx context.Context, q storage.Querier, hints *storage.LabelHints, ms []*labels.Matcher) ([]string, error) {
		names, _, err := q.LabelNames(ctx, hints, ms...)
		return names, err
	})
}

func (a *API) labelValues(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !model.UTF8Validation.IsValidLabelName(name) {
		fail(w, badData(fmt.Errorf("invalid label name: %q", name)))
		return
	}
	a.labels(w, r, func(ctx context.Context, q storage.Querier, hints *storage.LabelHints, ms []*labels.Matcher) ([]string, error) {
		vals, _, err := q.LabelValues(ctx, name, hints, ms...)
		return vals, err
	})
}

// labels answers a label endpoint: the union over every match[] (or one
// call without matchers), sorted, at most limit.
func (a *API) labels(w http.ResponseWriter, r *http.Request, f func(context.Context, storage.Querier, *storage.LabelHints, []*labels.Matcher) ([]string, error)) {
	sels, aerr := a.selectors(r, false)
	if aerr != nil {
		fail(w, aerr)
		return
	}
	mint, maxt, limit, aerr := window(r)
	if aerr != nil {
		fail(w, aerr)
		return
	}
	if len(sels) == 0 {
		sels = [][]*labels.Matcher{nil}
	}
	a.withQuerier(w, r, mint, maxt, func(ctx context.Context, q storage.Querier) (any, error) {
		var out []string
		for _, ms := range sels {
			vs, err := f(ctx, q, &storage.LabelHints{Limit: limit}, ms)
			if err != nil {
				return nil, err
			}
			if out == nil {
				out = vs // one answer is sorted and unique already: not copied
			} else {
				out = append(out, vs...)
			}
		}
		if len(sels) > 1 { // each answer is sorted and unique; their union is not
			out = sortedSet(out)
		}
		if out == nil {
			out = []string{} // [], not null, when there is none
		}
		if limit > 0 && len(out) > limit {
			out = out[:limit]
		}
		return out, nil
	})
}

func (a *API) withQuerier(w http.ResponseWriter, r *http.Request, mint, maxt int64, f func(context.Context, storage.Querier) (any, error)) {
	tenants, ok := requestTenants(w, r)
	if !ok {
		return
	}
	ctx, done, ok := a.slot(w, r)
	if !ok {
		return
	}
	defer done()
	q, err := a.readQueryable(tenants).Querier(mint, maxt)
	if err != nil {
		fail(w, queryError(err))
		return
	}
	defer q.Close()
	data, err := f(ctx, q)
	if err != nil {
		fail(w, queryError(err))
		return
	}
	respond(w, data)
}

// readQueryable is the Queryable of the series, labels and metadata
// endpoints over tenants: one's, or a federation's.
func (a *API) readQueryable(tenants []string) storage.Queryable {
	if len(tenants) == 1 {
		return a.q.ForTenant(tenants[0])
	}
	f := &federated{tenants: tenants}
	for _, t := range tenants {
		f.qs = append(f.qs, a.q.ForTenant(t))
	}
	return f
}

// formatQuery returns the expression pretty-printed (Grafana's "format
// query" button).
func (a *API) formatQuery(w http.ResponseWriter, r *http.Request) {
	expr, err := a.parser.ParseExpr(r.FormValue("query"))
	if err != nil {
		fail(w, badData(fmt.Errorf("invalid parameter \"query\": %w", err)))
		return
	}
	respond(w, parser.Prettify(expr))
}

func (a *API) buildinfo(w http.ResponseWriter, r *http.Request) {
	respond(w, map[string]string{"version": a.build.Version, "revision": a.build.Revision, "branch": "", "buildUser": "", "buildDate": "", "goVersion": a.build.GoVersion, "application": "strata"})
}

// metadata lists every series name as type unknown (Strata keeps no
// metric types).
func (a *API) metadata(w http.ResponseWriter, r *http.Request) {
	tenants, ok := requestTenants(w, r)
	if !ok {
		return
	}
	out := map[string][]map[string]string{}
	for _, t := range tenants {
		q := a.q.ForTenant(t)
		qr := &querier{q: q, mint: math.MinInt64, maxt: math.MaxInt64}
		names, _, err := qr.LabelValues(r.Context(), model.MetricNameLabel, nil)
		if err != nil {
			fail(w, queryError(err))
			return
		}
		for _, n := range names {
			out[n] = []map[string]string{{"type": "unknown", "help": "", "unit": ""}}
		}
		for _, m := range metrics(q.tables()) {
			if !m.labels {
				out[m.name] = []map[string]string{{"type": "unknown", "help": fmt.Sprintf("field %s of table %s", m.field, tenant.Base(m.table)), "unit": ""}}
			}
		}
	}
	if name := r.FormValue("metric"); name != "" {
		out = map[string][]map[string]string{name: out[name]}
		if out[name] == nil {
			out = map[string][]map[string]string{}
		}
	}
	respond(w, out)
}

// parseTime accepts RFC 3339 or Unix seconds (with a fraction).
func parseTime(s string) (time.Time, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(math.Round(frac*1000))*int64(time.Millisecond)).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("cannot parse %q to a valid timestamp", s)
}

// parseDuration accepts seconds (with a fraction) or a Prometheus duration.
func parseDuration(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f > float64(math.MaxInt64)/1e9 || f < 0 && -f > float64(math.MaxInt64)/1e9 {
			return 0, fmt.Errorf("cannot parse %q to a valid duration: it overflows int64", s)
		}
		return time.Duration(math.Round(f * 1e9)), nil
	}
	if d, err := model.ParseDuration(s); err == nil {
		return time.Duration(d), nil
	}
	return 0, fmt.Errorf("cannot parse %q to a valid duration", s)
}
