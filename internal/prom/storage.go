// Package prom answers PromQL over Strata with Prometheus' own engine: a
// storage.Queryable over the engine's scans, and the Prometheus HTTP API's
// query, series and label endpoints. It is the one package of the server
// that imports github.com/prometheus/prometheus (pinned: its interfaces
// change between minor releases); internal/rwload, the load generator,
// uses only its remote-write wire types and staleness marker.
//
// Series naming (VictoriaMetrics' convention): the field f of table
// (measurement) m is the series m_f{tags}; a field named "value" is the
// series m{tags}. Names are resolved against the catalog's (table, field)
// pairs, never by splitting on "_". Float, integer, unsigned and boolean
// fields read as float64; string fields are not series. The metrics table
// (catalog.MetricsTable, what remote write stores) is the exception: its
// series keys hold every label, __name__ among them, so its names are
// label values, matched in its scans like any other label.
package prom

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/rollup"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/tenant"
)

// ValueField is the field a bare metric name reads.
const ValueField = "value"

// metric is one (table, field) pair and the name it is exposed under;
// or, with labels set, the metrics table, whose series keys hold their
// names and whose labels are not columns.
type metric struct {
	name   string
	table  string
	field  string
	tags   []string // the table's tag columns
	labels bool
}

// hasTag reports whether series of mt may have tag name.
func (mt *metric) hasTag(name string) bool { return mt.labels || slices.Contains(mt.tags, name) }

// matchers are the matchers a scan of mt applies: all of them for the
// metrics table, whose keys hold __name__; the rest for another table,
// whose name matched already.
func (mt *metric) matchers(all, rest []*labels.Matcher) []*labels.Matcher {
	if mt.labels {
		return all
	}
	return rest
}

// metrics lists the series names the catalog defines, sorted by name, and
// last the metrics table if it exists. tables are one tenant's (under
// their catalog names): a series is named by the tenant's own name of its
// table.
func metrics(tables []catalog.Table) []metric {
	var out []metric
	labelsTable := ""
	for _, t := range tables {
		if catalog.IsMetrics(t.Name) {
			labelsTable = t.Name
			continue
		}
		base := tenant.Base(t.Name)
		var tags []string
		var fields []string
		for _, c := range t.Schema.Columns {
			switch {
			case c.Role == schema.RoleTag:
				tags = append(tags, c.Name)
			case c.Role == schema.RoleField && c.Type != row.String.String():
				fields = append(fields, c.Name)
			}
		}
		for _, f := range fields {
			name := base + "_" + f
			if f == ValueField {
				name = base
			}
			out = append(out, metric{name: name, table: t.Name, field: f, tags: tags})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	if labelsTable != "" {
		out = append(out, metric{table: labelsTable, field: ValueField, labels: true})
	}
	return out
}

// Queryable is a storage.Queryable over an engine.
type Queryable struct {
	Engine *datanode.Engine
	// Tenant is the tenant whose tables are read ("": the default).
	Tenant string
	// MaxSamples bounds the samples one Select reads (0: no bound); over
	// it, the query fails with ErrTooManySamples.
	MaxSamples int
	// Rollups computes the range functions the Select hints name in the
	// scan (internal/rollup), at the regions' owners: only for queries
	// RollupSafe passes.
	Rollups bool
	// byName sets nameLabel on every series Select returns (byname.go).
	byName bool
	// MaxSeries bounds the series a query's Selects return together
	// (0: no bound); over it, the query fails with ErrTooManySeries.
	// Series counts them for one query (a per-query copy: API.plan).
	MaxSeries int
	Series    *atomic.Int64
	// Read, if set, counts the samples the query's Selects hand out (a
	// per-query copy: API.plan, for the stats parameter). A window a
	// rollup computed where the samples are counts one.
	Read *atomic.Int64
	// Limit names the tenant's limit in the errors of MaxSamples and
	// MaxSeries, e.g. "tenant default's max_samples_per_query" (empty:
	// the node's --query-max-samples).
	SamplesLimit, SeriesLimit string
}

// tables are the tenant's tables, under their catalog names.
func (q *Queryable) tables() []catalog.Table { return q.Engine.TablesOf(q.tenant()) }

func (q *Queryable) tenant() string { return cmp.Or(q.Tenant, tenant.Default) }

// ForTenant is q reading tenant t's tables.
func (q *Queryable) ForTenant(t string) *Queryable {
	c := *q
	c.Tenant = t
	return &c
}

// ErrTooManySeries: a query selected more series than the limit allows.
var ErrTooManySeries = errors.New("prom: the query selects too many series")

// countSeries counts n series selected to the query's, failing over
// MaxSeries.
func (q *Queryable) countSeries(n int) error {
	if q.MaxSeries <= 0 || q.Series == nil {
		return nil
	}
	if got := q.Series.Add(int64(n)); got > int64(q.MaxSeries) {
		return fmt.Errorf("%w: %d or more, over %s=%d", ErrTooManySeries, got, cmp.Or(q.SeriesLimit, "max_series_per_query"), q.MaxSeries)
	}
	return nil
}

var _ storage.Queryable = (*Queryable)(nil)

// ErrTooManySamples: a query read more samples than the limit allows.
var ErrTooManySamples = fmt.Errorf("prom: the query reads too many samples")

// Querier returns a querier of [mint, maxt] (milliseconds).
func (q *Queryable) Querier(mint, maxt int64) (storage.Querier, error) {
	return &querier{q: q, mint: mint, maxt: maxt}, nil
}

type querier struct {
	q          *Queryable
	mint, maxt int64
	// raw: no rollups in this Select's scans (two tables gave a series
	// of one labelset, whose samples must merge before a rollup).
	raw bool
}

func (qr *querier) Close() error { return nil }

// matchersOn splits ms into those on label name and the others.
func matchersOn(ms []*labels.Matcher, name string) (on, rest []*labels.Matcher) {
	for _, m := range ms {
		if m.Name == name {
			on = append(on, m)
		} else {
			rest = append(rest, m)
		}
	}
	return on, rest
}

// matching returns the metrics whose name, table and tags can match ms,
// and the matchers left to apply to each series' labels.
func (qr *querier) matching(ms []*labels.Matcher) ([]metric, []*labels.Matcher) {
	names, rest := matchersOn(ms, model.MetricNameLabel)
	var out []metric
	for _, mt := range metrics(qr.q.tables()) {
		ok := true
		for _, m := range names {
			if mt.labels {
				break // matched in the scan
			}
			ok = ok && m.Matches(mt.name)
		}
		if ok {
			out = append(out, mt)
		}
	}
	return out, rest
}

// Select reads the series of every metric the matchers name: one scan per
// (table, field), with the time range and equality matchers pushed down
// and only that field read; the other matchers filter the series after.
func (qr *querier) Select(ctx context.Context, _ bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	out, err := qr.sel(ctx, hints, nil, ms)
	if err == nil {
		err = qr.q.countSeries(len(out))
	}
	if err != nil {
		return storage.ErrSeriesSet(err)
	}
	return &seriesSet{series: out, pos: -1}
}

// sel is Select, always sorted, with agg, if set, computed by the owners
// of the regions other datanodes host where it can be: the series rolled
// up and aggregated by group there, each group's partial among the
// series (series.partial). It can be where every matcher of a metric is
// applied by its scan (none is left to apply to its series after), and
// only one metric has series (two metrics' series of one labelset are one
// series: mergeEqual).
func (qr *querier) sel(ctx context.Context, hints *storage.SelectHints, agg *scan.Aggregate, ms []*labels.Matcher) ([]storage.Series, error) {
	mint, maxt := qr.mint, qr.maxt
	if hints != nil {
		mint, maxt = max(mint, hints.Start), min(maxt, hints.End)
	}
	if qr.q.byName {
		agg = nil // the label Select adds is not a tag
	}
	mts, rest := qr.matching(ms)
	var out []storage.Series
	samples, answered := 0, 0
	for _, mt := range mts {
		mrest := mt.matchers(ms, rest)
		if missingTag(mrest, &mt) {
			continue
		}
		req, post := pushDown(mt, mrest, mint, maxt)
		var ss []storage.Series
		var n int
		var err error
		if hints != nil && hints.Func == "series" {
			// Labels only (the series API): from the series indexes.
			ss, err = qr.list(ctx, mt, req, post)
		} else {
			if agg != nil && allPushed(post, &mt) {
				req.Aggregate = agg
			}
			ss, n, err = qr.scan(ctx, mt, req, post, qr.q.MaxSamples-samples, hints)
		}
		if err != nil {
			return nil, err
		}
		samples += n
		if len(ss) > 0 {
			answered++
		}
		out = append(out, ss...)
	}
	if answered > 1 {
		if slices.ContainsFunc(out, func(s storage.Series) bool { p, ok := s.(*series); return ok && p.partial }) {
			return qr.sel(ctx, hints, nil, ms) // partials cannot merge as series do
		}
		merged := mergeEqual(out)
		if len(merged) < len(out) && !qr.raw && rollupOf(hints) != nil && qr.q.Rollups {
			// Rolled up apart, the two halves of a series would merge
			// wrong: read them again as samples (rare: a metric in two
			// tables).
			raw := *qr
			raw.raw = true
			return raw.sel(ctx, hints, nil, ms)
		}
		out = merged
	} else {
		// Sorted even when the engine does not ask: an aggregation adds
		// series in this order, and columns come from the regions (and
		// from other datanodes) in any order, so unsorted a sum's last
		// bits would depend on which region answered first.
		slices.SortFunc(out, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	}
	if qr.q.byName {
		// The label sorts right after __name__ and holds its value: the
		// order stays.
		ss := make([]*series, len(out))
		for i, s := range out {
			var ok bool
			if ss[i], ok = s.(*series); !ok {
				return nil, fmt.Errorf("prom: a %T from a scan", s)
			}
		}
		if err := withNameLabel(ss); err != nil {
			return nil, err
		}
	}
	if qr.q.Read != nil {
		qr.q.Read.Add(int64(samples))
	}
	return out, nil
}

// allPushed reports whether the matchers post, left after pushDown for
// metric mt, select every series its scan gives: each is a set of values
// of a tag, which the scan applies exactly (scan.Request.In).
func allPushed(post []*labels.Matcher, mt *metric) bool {
	for _, m := range post {
		if m.Type != labels.MatchRegexp || len(m.SetMatches()) == 0 || !mt.hasTag(m.Name) {
			return false
		}
	}
	return true
}

// mergeEqual sorts out by labels and makes one series of those with equal
// labels that two tables gave: a metric written both by line protocol and
// by remote write, or by remote write before and after it moved to the
// metrics table. Their samples are merged by timestamp, the later table's
// standing at an equal one (the metrics table is the last; out holds each
// table's series after the one's before it).
func mergeEqual(out []storage.Series) []storage.Series {
	slices.SortStableFunc(out, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
	k := 0
	for i := range out {
		if k > 0 && labels.Equal(out[k-1].Labels(), out[i].Labels()) {
			b := out[i].(*series)
			out[k-1].(*series).MergeNewer(b.TS, func(j int) (float64, bool) { return b.VS[j], true })
			continue
		}
		out[k] = out[i]
		k++
	}
	return out[:k]
}

// pushDown is the scan of metric mt over [mint, maxt] (milliseconds) with
// the tag matchers ms pushed down where the scan can apply them, and the
// matchers left to apply to each series after.
func pushDown(mt metric, ms []*labels.Matcher, mint, maxt int64) (scan.Request, []*labels.Matcher) {
	// Rows in maxt's millisecond floor to it: the scan ends at the next.
	end := rollup.Nanos(maxt)
	if end < math.MaxInt64-1e6 {
		end += 1e6
	}
	req := scan.Request{Start: rollup.Nanos(mint), End: end, Fields: []string{mt.field}}
	var post []*labels.Matcher
	for _, m := range ms {
		switch {
		case !mt.hasTag(m.Name):
			post = append(post, m)
		case m.Type == labels.MatchEqual:
			req.Tags = append(req.Tags, row.Tag{Name: m.Name, Value: m.Value})
		case m.Type == labels.MatchRegexp && len(m.SetMatches()) > 0:
			// An alternation (a|b|c) is a set: pushed down (the
			// matcher is still applied after; it is cheap per series).
			req.In = append(req.In, row.TagIn{Name: m.Name, Values: m.SetMatches()})
			post = append(post, m)
		default:
			post = append(post, m)
		}
	}
	return req, post
}

// missingTag says whether an equality matcher asks for a non-empty value of
// a tag mt's table does not have: then no series of it matches.
func missingTag(ms []*labels.Matcher, mt *metric) bool {
	for _, m := range ms {
		if m.Type == labels.MatchEqual && m.Value != "" && !mt.hasTag(m.Name) {
			return true
		}
	}
	return false
}

// labeler turns series keys of one metric into label sets, dropping those
// the post-scan matchers reject. An empty name: the keys hold __name__.
type labeler struct {
	name string
	post []*labels.Matcher
	tags []row.Tag
}

func (l *labeler) labels(key string) (labels.Labels, bool, error) {
	var err error
	if l.tags, err = row.DecodeSeries(l.tags[:0], key); err != nil {
		return labels.EmptyLabels(), false, err
	}
	lb := labels.NewScratchBuilder(len(l.tags) + 1)
	if l.name != "" {
		lb.Add(model.MetricNameLabel, l.name)
	}
	for _, t := range l.tags {
		lb.Add(t.Name, t.Value)
	}
	lb.Sort()
	ls := lb.Labels()
	for _, m := range l.post {
		if !m.Matches(ls.Get(m.Name)) {
			return ls, false, nil
		}
	}
	return ls, true, nil
}

// list lists one metric's series without samples: a series-only scan,
// answered from the regions' series indexes and memtables (no SST read).
// A series is listed if a file or memtable holding it overlaps the range.
func (qr *querier) list(ctx context.Context, mt metric, req scan.Request, post []*labels.Matcher) ([]storage.Series, error) {
	req.SeriesOnly = true
	sc, err := qr.q.Engine.Scan(ctx, mt.table, req)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	l := labeler{name: mt.name, post: post}
	var out []storage.Series
	for sc.Next() {
		for _, e := range sc.Batch() {
			ls, ok, err := l.labels(e.Series)
			if err != nil {
				return nil, err
			}
			if ok {
				out = append(out, &series{labels: ls})
			}
		}
	}
	return out, sc.Err()
}

// scan reads one metric's series, column by column; budget bounds its
// samples (<= 0 with a limit set: none left). With a rollup to compute,
// the scan asks the regions' owners for it (scan.Request.Rollup): their
// columns come Rolled and are taken as they are, and with
// req.Aggregate, Aggregated: each a group's partial, kept apart. An owner
// that does not know rollups (an older binary) sends samples, which are
// rolled up here as they come if they come in time order, as they do
// unless rows were written out of order across files; if not, the scan
// is read again with the samples kept.
func (qr *querier) scan(ctx context.Context, mt metric, req scan.Request, post []*labels.Matcher, budget int, hints *storage.SelectHints) ([]storage.Series, int, error) {
	var fn *rollup.Func
	if qr.q.Rollups && !qr.raw {
		fn = rollupOf(hints)
	}
	if fn == nil {
		req.Aggregate = nil
	} else {
		spec := fn.Spec()
		req.Rollup = &spec
		ss, n, err := qr.scanWith(ctx, mt, req, post, budget, fn, true)
		if !errors.Is(err, rollup.ErrUnordered) {
			return ss, n, err
		}
		rollup.Rescanned()
	}
	return qr.scanWith(ctx, mt, req, post, budget, fn, false)
}

// rollupOf is the rollup Select computes for hints, or nil: a rollup
// function directly over a range selector, evaluated at steps no closer
// than its range.
func rollupOf(hints *storage.SelectHints) *rollup.Func {
	if hints == nil || hints.Range <= 0 || !rollup.Known(hints.Func) {
		return nil
	}
	f, err := rollup.New(scan.Rollup{Func: hints.Func, Range: hints.Range, Start: hints.Start, End: hints.End, Step: hints.Step})
	if err != nil {
		return nil // steps closer than the range, or times out of bounds: the engine computes it
	}
	return f
}

func (qr *querier) scanWith(ctx context.Context, mt metric, req scan.Request, post []*labels.Matcher, budget int, fn *rollup.Func, fused bool) ([]storage.Series, int, error) {
	byKey := map[string]*series{} // nil: a series the post-scan matchers reject
	var out []*series
	n := 0
	l := labeler{name: mt.name, post: post}
	var mu sync.Mutex // emit is called from several goroutines; a series from one at a time
	err := qr.q.Engine.ScanColumns(ctx, mt.table, req, func(c *scan.Column) error {
		mu.Lock()
		s, seen := byKey[c.Series]
		if c.Aggregated {
			// A group's partial (of one region, or a piece of its
			// windows): its key holds the group's tags, not a series',
			// and post was applied by the scan (allPushed).
			ls, _, err := l.labels(c.Series)
			if err != nil {
				mu.Unlock()
				return err
			}
			s = &series{labels: ls, partial: true, ties: c.Ties}
			out = append(out, s)
		} else if !seen {
			ls, ok, err := l.labels(c.Series)
			if err != nil {
				mu.Unlock()
				return err
			}
			if ok {
				s = &series{labels: ls}
				out = append(out, s)
			}
			byKey[c.Series] = s
		}
		mu.Unlock()
		if s == nil {
			return nil
		}
		added, err := s.Add(c, fn, fused)
		if err != nil {
			return err
		}
		// Count the column's samples to the query's, within its budget.
		mu.Lock()
		n += added
		over := qr.q.MaxSamples > 0 && n > budget
		mu.Unlock()
		if over {
			if qr.q.SamplesLimit != "" {
				return fmt.Errorf("%w: over %s=%d", ErrTooManySamples, qr.q.SamplesLimit, qr.q.MaxSamples)
			}
			return fmt.Errorf("%w (limit %d)", ErrTooManySamples, qr.q.MaxSamples)
		}
		return nil
	})
	if err != nil {
		return nil, n, err
	}
	// Series with no sample in range are not series of the result.
	kept := make([]storage.Series, 0, len(out))
	for _, s := range out {
		s.Finish(fn)
		if len(s.TS) > 0 {
			kept = append(kept, s)
		}
	}
	return kept, n, nil
}

// LabelNames are __name__ and the tag columns of the tables whose metrics
// can match: from the catalog, without reading data; and the label names
// of the metrics table's series the matchers select, from its series
// indexes (datanode.Engine.TagNames, unless matchers are left to apply
// to each series' labels: then its series are listed here).
func (qr *querier) LabelNames(ctx context.Context, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	mts, _ := qr.matching(ms)
	var out []string
	for _, mt := range mts {
		if !mt.labels {
			out = append(out, model.MetricNameLabel)
			out = append(out, mt.tags...)
			continue
		}
		req, post := pushDown(mt, ms, qr.mint, qr.maxt)
		if len(post) == 0 {
			// The engine's answer (without a filter, from the postings).
			names, err := qr.q.Engine.TagNames(ctx, mt.table, req)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, names...)
			continue
		}
		ss, err := qr.list(ctx, mt, req, post)
		if err != nil {
			return nil, nil, err
		}
		seen := map[string]bool{}
		for _, s := range ss {
			s.Labels().Range(func(l labels.Label) {
				if !seen[l.Name] {
					seen[l.Name] = true
					out = append(out, l.Name)
				}
			})
		}
	}
	return limit(sortedSet(out), hints), nil, nil
}

// LabelValues of __name__ come from the catalog; of a tag, from the series
// the matchers select, listed from the series indexes (no data read).
func (qr *querier) LabelValues(ctx context.Context, name string, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	var out []string
	if name == model.MetricNameLabel {
		mts, _ := qr.matching(ms)
		for _, mt := range mts {
			if !mt.labels {
				out = append(out, mt.name)
			}
		}
	}
	set, err := qr.tagValues(ctx, name, ms, &out)
	if err != nil {
		return nil, nil, err
	}
	if !set {
		out = sortedSet(out)
	}
	return limit(out, hints), nil, nil
}

// sortedSet sorts vs and drops its repeats, in place. (For thousands of
// values, sorting a slice was measured at half the time of a map to
// dedupe and a sort after.)
func sortedSet(vs []string) []string {
	slices.Sort(vs)
	return slices.Compact(vs)
}

// tagValues appends to out the values of tag name in the series ms select
// (repeats and all). The tag matchers select the same series of every
// field of a table, so each table is asked once: the engine answers
// (datanode.Engine.TagValues: each region from its postings, or from a
// listing of the series a filter selects), unless matchers are left to
// apply to each series' labels: then its series are listed here. Of the
// tables other than the metrics table, __name__ is not a tag
// (LabelValues takes their names from the catalog). It reports whether *out is a sorted set already: the
// engine's answer of one table, alone in it (100,000 metric names need no
// sorting again).
func (qr *querier) tagValues(ctx context.Context, name string, ms []*labels.Matcher, out *[]string) (set bool, err error) {
	sole := -1 // the length of *out when it was one table's answer
	defer func() { set = sole >= 0 && len(*out) == sole }()
	mts, rest := qr.matching(ms)
	listed := map[string]bool{}
	for _, mt := range mts {
		mrest := mt.matchers(ms, rest)
		if listed[mt.table] || !mt.hasTag(name) || missingTag(mrest, &mt) || name == model.MetricNameLabel && !mt.labels {
			continue
		}
		listed[mt.table] = true
		req, post := pushDown(mt, mrest, qr.mint, qr.maxt)
		if len(post) > 0 {
			ss, err := qr.list(ctx, mt, req, post)
			if err != nil {
				return false, err
			}
			for _, s := range ss {
				if v := s.Labels().Get(name); v != "" {
					*out = append(*out, v)
				}
			}
			continue
		}
		vals, err := qr.q.Engine.TagValues(ctx, mt.table, name, req)
		if err != nil {
			return false, err
		}
		if len(*out) == 0 {
			*out, sole = vals, len(vals) // the engine's own slice: no copy of 100,000 names
		} else {
			*out = append(*out, vals...)
		}
	}
	return false, nil
}

func limit(vs []string, hints *storage.LabelHints) []string {
	if hints != nil && hints.Limit > 0 && len(vs) > hints.Limit {
		return vs[:hints.Limit]
	}
	return vs
}

// series is one series' samples, in memory; or, partial, a group's
// partial aggregation that an owner computed (scan.Column.Aggregated:
// labels the group's and __name__, ties its column's).
type series struct {
	labels        labels.Labels
	rollup.Series // its samples (TS, VS; ms), once the scan has finished it
	partial, ties bool
}

func (s *series) Labels() labels.Labels { return s.labels }

func (s *series) Iterator(it chunkenc.Iterator) chunkenc.Iterator {
	if si, ok := it.(*sampleIter); ok {
		*si = sampleIter{s: s, pos: -1}
		return si
	}
	return &sampleIter{s: s, pos: -1}
}

type sampleIter struct {
	s   *series
	pos int
}

func (it *sampleIter) Next() chunkenc.ValueType {
	if it.pos+1 >= len(it.s.TS) {
		it.pos = len(it.s.TS)
		return chunkenc.ValNone
	}
	it.pos++
	return chunkenc.ValFloat
}

func (it *sampleIter) Seek(t int64) chunkenc.ValueType {
	if it.pos < 0 {
		it.pos = 0
	}
	if it.pos >= len(it.s.TS) {
		return chunkenc.ValNone
	}
	if it.s.TS[it.pos] < t {
		it.pos += sort.Search(len(it.s.TS)-it.pos, func(i int) bool { return it.s.TS[it.pos+i] >= t })
	}
	if it.pos >= len(it.s.TS) {
		return chunkenc.ValNone
	}
	return chunkenc.ValFloat
}

func (it *sampleIter) At() (int64, float64) { return it.s.TS[it.pos], it.s.VS[it.pos] }
func (it *sampleIter) AtHistogram(*histogram.Histogram) (int64, *histogram.Histogram) {
	return it.s.TS[it.pos], nil
}
func (it *sampleIter) AtFloatHistogram(*histogram.FloatHistogram) (int64, *histogram.FloatHistogram) {
	return it.s.TS[it.pos], nil
}
func (it *sampleIter) AtT() int64  { return it.s.TS[it.pos] }
func (it *sampleIter) AtST() int64 { return 0 }
func (it *sampleIter) Err() error  { return nil }

type seriesSet struct {
	series []storage.Series
	pos    int
}

func (s *seriesSet) Next() bool                        { s.pos++; return s.pos < len(s.series) }
func (s *seriesSet) At() storage.Series                { return s.series[s.pos] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }
