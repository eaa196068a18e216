package prom

import (
	"context"
	"net/http"
	"slices"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/stratadb/strata/internal/tenant"
)

// requestTenants are the tenants a request reads (its X-Scope-OrgID
// header, docs/tenants.md): one, or several for a federated read. A bad
// header is answered 400. (Whether the caller may name them is auth's
// question, asked before: internal/auth.)
func requestTenants(w http.ResponseWriter, r *http.Request) ([]string, bool) {
	ts, err := tenant.Parse(r.Header.Get(tenant.Header))
	if err != nil {
		fail(w, badData(err))
		return nil, false
	}
	return ts, true
}

// RequestTenant is the one tenant a write or a table's request names: a
// bad header, or one naming several tenants, is an error (400).
func RequestTenant(r *http.Request) (string, error) {
	return tenant.One(r.Header.Get(tenant.Header))
}

// federated reads several tenants' series as one (Mimir's federation,
// docs/tenants.md): each series gets the label tenant.Label naming its
// tenant, so that two tenants' series of one labelset stay two, and a
// matcher on the label picks the tenants read.
type federated struct {
	tenants []string // sorted
	qs      []*Queryable
}

func (f *federated) Querier(mint, maxt int64) (storage.Querier, error) {
	qs := make([]storage.Querier, len(f.qs))
	for i, q := range f.qs {
		qr, err := q.Querier(mint, maxt)
		if err != nil {
			for _, open := range qs[:i] {
				_ = open.Close()
			}
			return nil, err
		}
		qs[i] = qr
	}
	return &fedQuerier{tenants: f.tenants, qs: qs}, nil
}

type fedQuerier struct {
	tenants []string
	qs      []storage.Querier
}

// split returns the indexes of the tenants ms's matchers on tenant.Label
// accept, and the other matchers.
func (f *fedQuerier) split(ms []*labels.Matcher) ([]int, []*labels.Matcher) {
	on, rest := matchersOn(ms, tenant.Label)
	var idx []int
	for i, t := range f.tenants {
		if !slices.ContainsFunc(on, func(m *labels.Matcher) bool { return !m.Matches(t) }) {
			idx = append(idx, i)
		}
	}
	return idx, rest
}

// Select reads every tenant's series, each with its tenant's label, in
// one sorted set.
func (f *fedQuerier) Select(ctx context.Context, _ bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	idx, rest := f.split(ms)
	if len(rest) == 0 {
		// {__tenant_id__="a"}: every series of the tenants.
		rest = []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+")}
	}
	// Each tenant's set stays sorted with its one tenant label added, and
	// no series of one tenant has another's labels: a lazy merge of the
	// sets, not a sort of every series.
	sets := make([]storage.SeriesSet, 0, len(idx))
	for _, i := range idx {
		sets = append(sets, tenantSet{SeriesSet: f.qs[i].Select(ctx, true, hints, rest...), tenant: f.tenants[i]})
	}
	return storage.NewMergeSeriesSet(sets, 0, storage.ChainedSeriesMerge)
}

// tenantSet is a tenant's series set, each series with its tenant's label.
type tenantSet struct {
	storage.SeriesSet
	tenant string
}

func (s tenantSet) At() storage.Series {
	return tenantSeries{Series: s.SeriesSet.At(), tenant: s.tenant}
}

// tenantSeries is a series with its tenant's label.
type tenantSeries struct {
	storage.Series
	tenant string
}

func (s tenantSeries) Labels() labels.Labels {
	b := labels.NewBuilder(s.Series.Labels())
	b.Set(tenant.Label, s.tenant)
	return b.Labels()
}

func (f *fedQuerier) LabelValues(ctx context.Context, name string, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	idx, rest := f.split(ms)
	var out []string
	for _, i := range idx {
		if name == tenant.Label {
			out = append(out, f.tenants[i])
			continue
		}
		vs, _, err := f.qs[i].LabelValues(ctx, name, hints, rest...)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, vs...)
	}
	return sortedSet(out), nil, nil
}

func (f *fedQuerier) LabelNames(ctx context.Context, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	idx, rest := f.split(ms)
	var out []string
	for _, i := range idx {
		ns, _, err := f.qs[i].LabelNames(ctx, hints, rest...)
		if err != nil {
			return nil, nil, err
		}
		if len(ns) > 0 {
			out = append(out, tenant.Label)
		}
		out = append(out, ns...)
	}
	return sortedSet(out), nil, nil
}

func (f *fedQuerier) Close() error {
	for _, q := range f.qs {
		_ = q.Close()
	}
	return nil
}
