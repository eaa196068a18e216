package limits

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of strata_discarded_samples_total (Mimir's names where it has
// one).
const (
	ReasonRateLimited         = "rate_limited"
	ReasonSeriesPerTable      = "per_table_series_limit"
	ReasonSeriesPerTenant     = "per_tenant_series_limit"
	ReasonMaxLabelNames       = "max_label_names_per_series"
	ReasonLabelValueTooLong   = "label_value_too_long"
	DefaultActiveSeriesWindow = time.Hour
)

// Error is a write refused, in whole or in part, by a limit. Rate: a 429
// (send again later); otherwise a 400 (the same request fails again).
type Error struct {
	Tenant string
	Table  string // series per table only
	Limit  string // the key, e.g. max_active_series_per_table
	Value  string // its value
	Reason string // the counter's reason
	Rate   bool
	// Refused of Total samples were refused; Written were stored (a
	// series limit refuses the new series past it and writes the rest).
	Refused, Total, Written int
	// Detail says what went over, e.g. the series and its label count.
	Detail string
	// RetryAfter, for a rate refusal the bucket can take, is when it
	// holds enough tokens (0: never, a request over the burst).
	RetryAfter time.Duration
}

// RetryAfter is the Retry-After header (whole seconds, at least 1) of a
// write err refused by a tenant's rate limit that could pass later.
func RetryAfter(err error) (string, bool) {
	var e *Error
	if !errors.As(err, &e) || !e.Rate || e.RetryAfter <= 0 {
		return "", false
	}
	return strconv.FormatInt(int64(math.Ceil(e.RetryAfter.Seconds())), 10), true
}

func (e *Error) Error() string {
	where := "tenant " + e.Tenant
	if e.Table != "" {
		where += ", table " + e.Table
	}
	msg := fmt.Sprintf("limit %s=%s exceeded (%s)", e.Limit, e.Value, where)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Written == 0 && e.Refused == e.Total {
		return msg + fmt.Sprintf("; the request's %d samples refused, nothing written", e.Total)
	}
	return msg + fmt.Sprintf("; %d of %d samples refused, the other %d stored", e.Refused, e.Total, e.Total-e.Refused)
}

// Ingest enforces tenants' write limits on one datanode: the ingestion
// rate (a token bucket a tenant) and active series (a set of series
// hashes a tenant and table), both of the writes that enter through this
// node. Its counters are Collectors.
type Ingest struct {
	w      *Watcher
	window time.Duration
	now    func() time.Time
	seed   maphash.Seed

	mu      sync.Mutex
	tenants map[string]*tenant

	discarded *prometheus.CounterVec
}

type tenant struct {
	mu     sync.Mutex
	tokens float64
	filled time.Time // when tokens were last topped up
	// tables' active series: hash -> when last written (Unix seconds);
	// counted only while a series limit is set (Admit), so at most the
	// limit's worth.
	tables    map[string]map[uint64]int64
	total     int
	lastSweep time.Time
}

// NewIngest enforces the limits w holds. window is how long a series
// stays active after its last sample (0: DefaultActiveSeriesWindow).
func NewIngest(w *Watcher, window time.Duration) *Ingest {
	if window <= 0 {
		window = DefaultActiveSeriesWindow
	}
	return &Ingest{w: w, window: window, now: time.Now, seed: maphash.MakeSeed(), tenants: map[string]*tenant{},
		discarded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_discarded_samples_total",
			Help: "Samples refused by a tenant's limits (docs/limits.md), by tenant and reason."}, []string{"tenant", "reason"})}
}

// Collectors are the enforcement's metrics.
func (in *Ingest) Collectors() []prometheus.Collector {
	return []prometheus.Collector{in.discarded, activeCollector{in}}
}

var activeDesc = prometheus.NewDesc("strata_active_series",
	"Active series of a tenant written through this datanode, counted while a series limit is set (docs/limits.md).", []string{"tenant"}, nil)

// activeCollector reports each tenant's active series count.
type activeCollector struct{ in *Ingest }

func (c activeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- activeDesc }

func (c activeCollector) Collect(ch chan<- prometheus.Metric) {
	c.in.mu.Lock()
	names := make([]string, 0, len(c.in.tenants))
	for name := range c.in.tenants {
		names = append(names, name)
	}
	c.in.mu.Unlock()
	for _, name := range names {
		total, _ := c.in.Active(name, "")
		ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(total), name)
	}
}

// Limits is tenant's limits now.
func (in *Ingest) Limits(tenant string) Limits { return in.w.For(tenant) }

// Discarded counts n samples of tenant refused for reason.
func (in *Ingest) Discarded(tenant, reason string, n int) {
	if n > 0 {
		in.discarded.WithLabelValues(tenant, reason).Add(float64(n))
	}
}

func (in *Ingest) tenant(name string) *tenant {
	in.mu.Lock()
	defer in.mu.Unlock()
	t := in.tenants[name]
	if t == nil {
		t = &tenant{}
		in.tenants[name] = t
	}
	return t
}

// Rate takes n samples from tenant's token bucket, or refuses them all
// (nothing taken): a request is admitted whole or not at all, as Mimir's
// distributor does. A request larger than the burst is always refused.
func (in *Ingest) Rate(name string, l Limits, n int) error {
	if l.IngestionRate <= 0 || n == 0 {
		return nil
	}
	t := in.tenant(name)
	burst := l.Burst()
	t.mu.Lock()
	now := in.now() // under the lock: filled never moves back
	if t.filled.IsZero() {
		t.tokens = burst
	} else {
		t.tokens = min(burst, t.tokens+now.Sub(t.filled).Seconds()*l.IngestionRate)
	}
	t.filled = now
	ok := float64(n) <= t.tokens
	if ok {
		t.tokens -= float64(n)
	}
	short := float64(n) - t.tokens
	t.mu.Unlock()
	if ok {
		return nil
	}
	e := &Error{Tenant: name, Limit: "ingestion_rate", Value: strconv.FormatFloat(l.IngestionRate, 'f', -1, 64), Reason: ReasonRateLimited, Rate: true,
		Refused: n, Total: n, Detail: fmt.Sprintf("ingestion_burst %v", burst)}
	if float64(n) > burst {
		e.Detail = fmt.Sprintf("the request's %d samples are more than ingestion_burst %v: send smaller requests", n, burst)
	} else {
		e.RetryAfter = time.Duration(short / l.IngestionRate * float64(time.Second))
	}
	return e
}

// SeriesLimited says whether l bounds active series (and Admit must be
// called).
func (l Limits) SeriesLimited() bool { return l.MaxActiveSeriesPerTable > 0 || l.MaxActiveSeries > 0 }

// Hash is a series key's hash, as Admit takes it.
func (in *Ingest) Hash(key []byte) uint64 { return maphash.Bytes(in.seed, key) }

// Admit decides which series of a table's write are admitted: those
// active already, and new ones while the table's and the tenant's active
// series are under their limits, in the order given. hashes are the
// points' series' (Hash); refused[i] is set for the points of series
// refused (refused is hashes' length). A series admitted counts as active
// from now on, even if its write then fails: the count is never under
// the series written through this node within the window (but for two
// series of one 64-bit hash), and may be over. It returns the error
// describing the refusal (Written left for the caller), or nil.
func (in *Ingest) Admit(name, table string, l Limits, hashes []uint64, refused []bool) *Error {
	if !l.SeriesLimited() {
		return nil
	}
	t := in.tenant(name)
	now := in.now()
	sec := now.Unix()
	t.mu.Lock()
	defer t.mu.Unlock()
	in.sweep(t, now)
	if t.tables == nil {
		t.tables = map[string]map[uint64]int64{}
	}
	set := t.tables[table]
	if set == nil {
		set = map[uint64]int64{}
		t.tables[table] = set
	}
	var e *Error
	var newRefused map[uint64]struct{}
	for i, h := range hashes {
		if _, ok := set[h]; ok {
			set[h] = sec
			continue
		}
		if _, ok := newRefused[h]; ok {
			refused[i] = true
			e.Refused++
			continue
		}
		limit, val, reason := "", int64(0), ""
		switch {
		case l.MaxActiveSeriesPerTable > 0 && int64(len(set)) >= l.MaxActiveSeriesPerTable:
			limit, val, reason = "max_active_series_per_table", l.MaxActiveSeriesPerTable, ReasonSeriesPerTable
		case l.MaxActiveSeries > 0 && int64(t.total) >= l.MaxActiveSeries:
			limit, val, reason = "max_active_series", l.MaxActiveSeries, ReasonSeriesPerTenant
		default:
			set[h] = sec
			t.total++
			continue
		}
		if e == nil {
			e = &Error{Tenant: name, Limit: limit, Value: fmt.Sprint(val), Reason: reason, Total: len(hashes)}
			if reason == ReasonSeriesPerTable {
				e.Table = table
			}
			newRefused = map[uint64]struct{}{}
		}
		newRefused[h] = struct{}{}
		refused[i] = true
		e.Refused++
	}
	if e != nil {
		e.Detail = fmt.Sprintf("%d new series refused", len(newRefused))
	}
	return e
}

// sweep forgets the series not written for a window, at most every
// eighth of a window. Until swept a series counts: over, never under.
func (in *Ingest) sweep(t *tenant, now time.Time) {
	if now.Sub(t.lastSweep) < in.window/8 {
		return
	}
	t.lastSweep = now
	cutoff := now.Add(-in.window).Unix()
	for name, set := range t.tables {
		for h, seen := range set {
			if seen < cutoff {
				delete(set, h)
				t.total--
			}
		}
		if len(set) == 0 {
			delete(t.tables, name)
		}
	}
}

// Active is tenant's active series counted on this node, in all and of
// table (tests, and a gauge one day).
func (in *Ingest) Active(name, table string) (total, ofTable int) {
	in.mu.Lock()
	t := in.tenants[name]
	in.mu.Unlock()
	if t == nil {
		return 0, 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total, len(t.tables[table])
}
