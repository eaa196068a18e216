package prom

import (
	"context"
	"fmt"
	"slices"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
)

// Aggregations by __name__ over functions that drop it.
//
// PromQL drops the metric name in a range function, so
// max by (__name__) (max_over_time({__name__=~"a|b"}[1h])) fails in
// Prometheus: a's and b's series of one host have the same labels once
// their names are gone ("vector cannot contain metrics with the same
// labelset"; with one series a name, the names fall into one group with
// no name). VictoriaMetrics answers one series a name, and TSBS's query
// generator for it asks exactly this. Strata answers as VictoriaMetrics
// does for that form alone: the query is evaluated with the grouping's
// __name__ replaced by nameLabel, which Select sets on every series to
// its name and which no function drops, and the answer's nameLabel is
// renamed __name__. Each series is the same series to the function, and
// each group holds the series of one name and grouping labels, in the
// order they would be aggregated in a query of that one name: the values
// are those of the query asked name by name. Any other expression is the
// engine's as it is.

// nameLabel carries a series' name through functions that drop __name__.
const nameLabel = "__strata_name__"

// byNameOps are the aggregations whose output labels are the grouping
// labels alone (not topk and the like, whose output is input series, nor
// count_values, which adds one).
var byNameOps = map[parser.ItemType]bool{
	parser.SUM: true, parser.AVG: true, parser.MIN: true, parser.MAX: true, parser.COUNT: true,
	parser.GROUP: true, parser.STDDEV: true, parser.STDVAR: true, parser.QUANTILE: true,
}

// keepsName are the range functions that keep the metric name (or make
// their labels from the selector's matchers): over them, by (__name__)
// already groups by name.
var keepsName = map[string]bool{"last_over_time": true, "first_over_time": true, "absent_over_time": true}

// rewriteByName rewrites expr in place if it is, whole,
//
//	AGG by (..., __name__, ...) (F(..., selector[range], ...))
//
// with AGG an aggregation whose output labels are its grouping, F a
// function of a range that drops the metric name (its other arguments
// literals), and a selector whose __name__ matchers may match more than
// one name (none is an equality, nor a regex that is one literal string):
// the grouping's __name__ becomes nameLabel. It reports whether it did.
func rewriteByName(expr parser.Expr) bool {
	agg, ok := unparen(expr).(*parser.AggregateExpr)
	if !ok || agg.Without || !byNameOps[agg.Op] || !slices.Contains(agg.Grouping, model.MetricNameLabel) ||
		slices.Contains(agg.Grouping, nameLabel) {
		return false
	}
	call, ok := unparen(agg.Expr).(*parser.Call)
	if !ok || keepsName[call.Func.Name] || call.Func.ReturnType != parser.ValueTypeVector {
		return false
	}
	var sel *parser.VectorSelector
	for _, arg := range call.Args {
		switch a := unparen(arg).(type) {
		case *parser.NumberLiteral, *parser.StringLiteral:
		case *parser.MatrixSelector:
			vs, ok := a.VectorSelector.(*parser.VectorSelector)
			if !ok || sel != nil {
				return false
			}
			sel = vs
		default:
			return false
		}
	}
	if sel == nil {
		return false
	}
	if oneName(sel) {
		return false // Prometheus' answer stands
	}
	for i, l := range agg.Grouping {
		if l == model.MetricNameLabel {
			agg.Grouping[i] = nameLabel
		}
	}
	return true
}

// oneName reports whether sel selects one metric name at most: a
// __name__ matcher is an equality, or a regex that is one literal string.
func oneName(sel *parser.VectorSelector) bool {
	for _, m := range sel.LabelMatchers {
		if m.Name == model.MetricNameLabel && (m.Type == labels.MatchEqual || m.Type == labels.MatchRegexp && len(m.SetMatches()) == 1) {
			return true
		}
	}
	return false
}

// withNameLabel sets nameLabel on every series to its name; a series
// that has the label already cannot be told apart from one that did not.
func withNameLabel(ss []*series) error {
	for _, s := range ss {
		if s.labels.Has(nameLabel) {
			return fmt.Errorf("prom: series %s has label %s, which grouping by __name__ over a function that drops it uses", s.labels, nameLabel)
		}
		b := labels.NewBuilder(s.labels)
		b.Set(nameLabel, s.labels.Get(model.MetricNameLabel))
		s.labels = b.Labels()
	}
	return nil
}

// restoreNames renames nameLabel __name__ in a result; a range result is
// sorted by labels again, as the engine sorts it.
func restoreNames(v parser.Value) parser.Value {
	rename := func(ls labels.Labels) labels.Labels {
		if !ls.Has(nameLabel) {
			return ls
		}
		b := labels.NewBuilder(ls)
		b.Set(model.MetricNameLabel, ls.Get(nameLabel))
		b.Del(nameLabel)
		return b.Labels()
	}
	switch v := v.(type) {
	case promql.Matrix:
		for i := range v {
			v[i].Metric = rename(v[i].Metric)
		}
		slices.SortFunc(v, func(a, b promql.Series) int { return labels.Compare(a.Metric, b.Metric) })
	case promql.Vector:
		for i := range v {
			v[i].Metric = rename(v[i].Metric)
		}
	}
	return v
}

// byNameQuery is an evaluation of a rewritten query whose answer has its
// names restored.
type byNameQuery struct{ evaluation }

func (q byNameQuery) Exec(ctx context.Context) *promql.Result {
	res := q.evaluation.Exec(ctx)
	if res.Err == nil {
		res.Value = restoreNames(res.Value)
	}
	return res
}
