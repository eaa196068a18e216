package prom

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/tenant"
)

// Cardinality statistics: /api/v1/status/tsdb in Prometheus' format,
// counted from the regions' series indexes and memtables, never their
// rows (datanode.Engine.Cardinality): exact for flushed files and
// memtables together, a series in several of them counting once.
//
// The series counted are the PromQL series (storage.go's naming): a
// series of the metrics table is one series, named by its __name__; a
// series of another table (a line-protocol measurement, a logical table,
// or a table created by name) is one series per numeric field of its
// table, m_f{tags} (m{tags} for the field "value"), each with its tags
// and __name__ as labels. Which fields a series has rows of would take
// its rows to know: each counts under every numeric field of its table.
// A table without numeric fields has no PromQL series, and counts none.
// A labelset written both to the metrics table and as a measurement's
// field (a series PromQL merges) counts once per table.

// maxTSDBLimit is the most entries a list may ask for (Prometheus').
const maxTSDBLimit = 10000

// TSDBStat is one entry of a list: a name and its count.
type TSDBStat struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}

// HeadStats are the totals. Strata has no head block: they are of all
// the series counted, in files and memtables.
type HeadStats struct {
	NumSeries     uint64 `json:"numSeries"`
	NumLabelPairs int    `json:"numLabelPairs"`
	ChunkCount    int64  `json:"chunkCount"`
	MinTime       int64  `json:"minTime"`
	MaxTime       int64  `json:"maxTime"`
}

// TSDBStatus is Prometheus' answer (web/api/v1's TSDBStatus), and
// VictoriaMetrics' seriesCountByFocusLabelValue when focusLabel is asked.
type TSDBStatus struct {
	HeadStats                    HeadStats  `json:"headStats"`
	SeriesCountByMetricName      []TSDBStat `json:"seriesCountByMetricName"`
	LabelValueCountByLabelName   []TSDBStat `json:"labelValueCountByLabelName"`
	MemoryInBytesByLabelName     []TSDBStat `json:"memoryInBytesByLabelName"`
	SeriesCountByLabelValuePair  []TSDBStat `json:"seriesCountByLabelValuePair"`
	SeriesCountByFocusLabelValue []TSDBStat `json:"seriesCountByFocusLabelValue,omitempty"`
}

// CardinalityRequest is what /api/v1/status/tsdb is asked.
type CardinalityRequest struct {
	// Start and End bound the series counted (nanoseconds, [Start, End)):
	// a series counts if a file or memtable holding it overlaps them.
	Start, End int64
	// Limit is the length of each list.
	Limit int
	// Table, if set, counts that table only (catalog.MetricsTable for
	// what remote write stored); else every table.
	Table string
	// FocusLabel, if set, also lists the values of that label by series.
	FocusLabel string
}

// tsdbStatus serves /api/v1/status/tsdb: limit (default 10, at most
// 10000), start and end (Prometheus times) or date (YYYY-MM-DD, a UTC
// day: VictoriaMetrics'), default all time; table and focusLabel.
func (a *API) tsdbStatus(w http.ResponseWriter, r *http.Request) {
	req, aerr := cardinalityRequest(r)
	if aerr != nil {
		fail(w, aerr)
		return
	}
	t, err := RequestTenant(r) // a tenant's counts: not federated
	if err != nil {
		fail(w, badData(err))
		return
	}
	ctx, done, ok := a.slot(w, r)
	if !ok {
		return
	}
	defer done()
	st, err := a.q.ForTenant(t).Cardinality(ctx, req)
	if err != nil {
		if errors.Is(err, catalog.ErrTableNotFound) {
			fail(w, badData(err))
			return
		}
		fail(w, queryError(err))
		return
	}
	respond(w, st)
}

func cardinalityRequest(r *http.Request) (CardinalityRequest, *apiError) {
	req := CardinalityRequest{Start: math.MinInt64, End: math.MaxInt64, Limit: 10, Table: r.FormValue("table"), FocusLabel: r.FormValue("focusLabel")}
	if s := r.FormValue("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return req, badData(errors.New("limit must be a positive number"))
		}
		if n > maxTSDBLimit {
			return req, badData(fmt.Errorf("limit must not exceed %d", maxTSDBLimit))
		}
		req.Limit = n
	}
	if s := r.FormValue("date"); s != "" {
		if r.FormValue("start") != "" || r.FormValue("end") != "" {
			return req, badData(errors.New("date and start or end: ask one or the other"))
		}
		d, err := time.Parse(time.DateOnly, s)
		if err != nil {
			return req, badData(fmt.Errorf("invalid parameter \"date\": want YYYY-MM-DD: %w", err))
		}
		req.Start, req.End = d.UnixNano(), d.Add(24*time.Hour).UnixNano()
		return req, nil
	}
	for _, p := range []struct {
		name string
		dst  *int64
		end  bool
	}{{"start", &req.Start, false}, {"end", &req.End, true}} {
		if s := r.FormValue(p.name); s != "" {
			t, err := parseTime(s)
			if err != nil {
				return req, badData(fmt.Errorf("invalid parameter %q: %w", p.name, err))
			}
			*p.dst = t.UnixNano()
			if p.end {
				*p.dst = t.Add(time.Millisecond).Truncate(time.Millisecond).UnixNano() // end is inclusive, to the millisecond
			}
		}
	}
	if req.End <= req.Start {
		return req, badData(errors.New("end must be after start"))
	}
	return req, nil
}

// Cardinality counts the PromQL series req asks about (see the comment
// at the head of this file).
func (q *Queryable) Cardinality(ctx context.Context, req CardinalityRequest) (*TSDBStatus, error) {
	tables := q.tables()
	if req.Table != "" {
		t, err := q.Engine.Table(tenant.Qualify(q.tenant(), req.Table))
		if err != nil || catalog.IsLines(t.Name) {
			return nil, fmt.Errorf("%w: %s", catalog.ErrTableNotFound, req.Table)
		}
		tables = []catalog.Table{t}
	}
	// The PromQL names of each table's series.
	names := map[string][]string{}
	for _, m := range metrics(tables) {
		if !m.labels {
			names[m.table] = append(names[m.table], m.name)
		}
	}
	// One count of each physical table: LinesTable's for every logical one.
	counted := map[string]*scan.Cardinality{}
	asked := map[string]bool{}
	for _, t := range tables {
		phys := t.Name
		if t.Logical {
			if req.Table == "" {
				phys = catalog.LinesOf(t.Name)
			}
		} else if !catalog.IsMetrics(t.Name) && len(names[t.Name]) == 0 {
			continue // no PromQL series
		}
		if asked[phys] {
			continue
		}
		asked[phys] = true
		got, err := q.Engine.Cardinality(ctx, phys, req.Start, req.End)
		if err != nil {
			return nil, fmt.Errorf("cardinality of table %s: %w", phys, err)
		}
		for name, c := range got {
			counted[name] = c
		}
	}
	s := newPromCounts()
	for _, t := range tables {
		c := counted[t.Name]
		if c == nil {
			continue
		}
		if catalog.IsMetrics(t.Name) {
			s.add(c, "")
			continue
		}
		for _, n := range names[t.Name] {
			s.add(c, n)
		}
	}
	return s.status(req), nil
}

// promCounts are the counts of PromQL series: of each label pair, and in
// all. The pairs of one table's counts are read where they are (a
// region's own, of a million values perhaps); of more, merged.
type promCounts struct {
	series       uint64
	parts        []promPart
	minTS, maxTS int64
}

// promPart is the series of one table: named by their __name__, or if
// name is set, all by name.
type promPart struct {
	c    *scan.Cardinality
	name string
}

func newPromCounts() *promCounts {
	return &promCounts{minTS: math.MaxInt64, maxTS: math.MinInt64}
}

// add counts the series c counted as PromQL series: named name (if not
// "", their __name__ is theirs).
func (s *promCounts) add(c *scan.Cardinality, name string) {
	if c.Series == 0 {
		return
	}
	s.series += uint64(c.Series)
	s.parts = append(s.parts, promPart{c, name})
	s.minTS, s.maxTS = min(s.minTS, c.MinTS), max(s.maxTS, c.MaxTS)
}

// pairs calls f with each label pair and its series. A pair may be
// called again (at most fixes of them), with again set: its count
// corrected (a kept count's later series: scan.Cardinality's more),
// prev its count in the first call, which may be lower than the pair's
// place among the first calls warranted. So a million pairs need no
// look-up of each among the few corrected.
func (s *promCounts) pairs(f func(t row.Tag, n, prev uint64, again bool)) {
	if len(s.parts) == 1 && s.parts[0].name == "" {
		base, more := s.parts[0].c.Split()
		for t, n := range base {
			f(t, uint64(n), 0, false)
		}
		for t, n := range more {
			if b, ok := base[t]; ok {
				f(t, uint64(b+n), uint64(b), true)
			} else {
				f(t, uint64(n), 0, false)
			}
		}
		return
	}
	merged := map[row.Tag]uint64{}
	for _, p := range s.parts {
		p.c.Each(func(t row.Tag, n int64) {
			if p.name == "" || t.Name != model.MetricNameLabel { // else not a label of a measurement's series (a tag cannot be named so)
				merged[t] += uint64(n)
			}
		})
		if p.name != "" {
			merged[row.Tag{Name: model.MetricNameLabel, Value: p.name}] += uint64(p.c.Series)
		}
	}
	for t, n := range merged {
		f(t, n, 0, false)
	}
}

// fixes is how many pairs pairs may correct.
func (s *promCounts) fixes() int {
	if len(s.parts) == 1 && s.parts[0].name == "" {
		_, more := s.parts[0].c.Split()
		return len(more)
	}
	return 0
}

// status is the answer: each list its top req.Limit, by count, then by
// name (of a pair, its label's, then its value).
func (s *promCounts) status(req CardinalityRequest) *TSDBStatus {
	type perName struct {
		name          string
		values, bytes uint64
	}
	byName := map[string]*perName{}
	byPair := func(a, b statOf[row.Tag]) bool {
		if a.n != b.n {
			return a.n > b.n
		}
		return a.key.Name < b.key.Name || a.key.Name == b.key.Name && a.key.Value < b.key.Value
	}
	// Each top list keeps room for the pairs corrected: a pair's first
	// count, lower, may hold a place its second then takes again
	// (statsOnce drops the first). Among the rest, no pair with a count
	// of its first call only is pushed out by a first count lower than
	// its second: the k first are the k first.
	k := req.Limit + s.fixes()
	pairs, metricNames, focus := newTop(k, byPair), newTop(k, byPair), newTop(k, byPair)
	numPairs := 0
	var last *perName // the pairs of one label name mostly come in a row (a million ids)
	s.pairs(func(t row.Tag, n, prev uint64, again bool) {
		b := last
		if b == nil || b.name != t.Name {
			if b = byName[t.Name]; b == nil {
				b = &perName{name: t.Name}
				byName[t.Name] = b
			}
			last = b
		}
		if again {
			b.bytes += labels.SizeOfLabels(t.Name, t.Value, n) - labels.SizeOfLabels(t.Name, t.Value, prev)
		} else {
			numPairs++
			b.values++
			b.bytes += labels.SizeOfLabels(t.Name, t.Value, n)
		}
		pairs.push(statOf[row.Tag]{t, n})
		if t.Name == model.MetricNameLabel {
			metricNames.push(statOf[row.Tag]{t, n})
		}
		if req.FocusLabel != "" && t.Name == req.FocusLabel {
			focus.push(statOf[row.Tag]{t, n})
		}
	})
	byString := func(a, b statOf[string]) bool { return a.n > b.n || a.n == b.n && a.key < b.key }
	valueCounts, memory := newTop(req.Limit, byString), newTop(req.Limit, byString)
	for name, b := range byName {
		valueCounts.push(statOf[string]{name, b.values})
		memory.push(statOf[string]{name, b.bytes})
	}
	pair := func(t row.Tag) string { return t.Name + "=" + t.Value }
	value := func(t row.Tag) string { return t.Value }
	name := func(s string) string { return s }
	out := &TSDBStatus{
		HeadStats:                   HeadStats{NumSeries: s.series, NumLabelPairs: numPairs},
		SeriesCountByMetricName:     statsOnce(metricNames, value, req.Limit),
		LabelValueCountByLabelName:  statsOnce(valueCounts, name, req.Limit),
		MemoryInBytesByLabelName:    statsOnce(memory, name, req.Limit),
		SeriesCountByLabelValuePair: statsOnce(pairs, pair, req.Limit),
	}
	if s.minTS <= s.maxTS {
		out.HeadStats.MinTime, out.HeadStats.MaxTime = s.minTS/1e6, s.maxTS/1e6
	}
	if req.FocusLabel != "" {
		out.SeriesCountByFocusLabelValue = statsOnce(focus, value, req.Limit)
	}
	return out
}

// statOf is a count of key.
type statOf[K any] struct {
	key K
	n   uint64
}

// topOf keeps the k first of the counts pushed, as first orders them: a
// heap whose root is the last of those kept, so a million label pairs
// are neither sorted nor named (only the k kept are).
type topOf[K any] struct {
	k     int
	first func(a, b statOf[K]) bool
	items []statOf[K]
}

func newTop[K any](k int, first func(a, b statOf[K]) bool) *topOf[K] {
	return &topOf[K]{k: k, first: first}
}

func (t *topOf[K]) Len() int           { return len(t.items) }
func (t *topOf[K]) Less(i, j int) bool { return t.first(t.items[j], t.items[i]) } // the root is the last
func (t *topOf[K]) Swap(i, j int)      { t.items[i], t.items[j] = t.items[j], t.items[i] }
func (t *topOf[K]) Push(x any)         { t.items = append(t.items, x.(statOf[K])) }
func (t *topOf[K]) Pop() any {
	x := t.items[len(t.items)-1]
	t.items = t.items[:len(t.items)-1]
	return x
}

func (t *topOf[K]) push(s statOf[K]) {
	switch {
	case len(t.items) < t.k:
		heap.Push(t, s)
	case t.first(s, t.items[0]):
		t.items[0] = s
		heap.Fix(t, 0)
	}
}

// statsOnce are the limit first of the counts kept, first first, named
// by name, each key once: a key kept twice (its count corrected) is its
// first, the higher count.
func statsOnce[K comparable](t *topOf[K], name func(K) string, limit int) []TSDBStat {
	slices.SortFunc(t.items, func(a, b statOf[K]) int {
		if t.first(a, b) {
			return -1
		}
		if t.first(b, a) {
			return 1
		}
		return 0
	})
	out := make([]TSDBStat, 0, min(limit, len(t.items)))
	seen := map[K]bool{}
	for _, s := range t.items {
		if len(out) == limit {
			break
		}
		if !seen[s.key] {
			seen[s.key] = true
			out = append(out, TSDBStat{Name: name(s.key), Value: s.n})
		}
	}
	return out
}
