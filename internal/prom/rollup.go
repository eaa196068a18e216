package prom

import (
	"github.com/prometheus/prometheus/promql/parser"
)

// Range functions computed in the scan ("rollups", internal/rollup).
//
// The evaluation times come from the Select's hints (a range selector's
// Start is the query's start less the range, plus 1 ms; Step is the query's
// step, 0 for an instant query), which only holds without subqueries, @ and
// offsets: RollupSafe vets the expression, and the API asks for rollups
// only for expressions it passes.

// RollupSafe reports whether Select may compute range functions for expr:
// it has no subquery, and no selector with @ or an offset (or Prometheus'
// experimental anchored and smoothed selectors), so every range selector
// is evaluated at the query's own steps.
func RollupSafe(expr parser.Expr) bool {
	ok := true
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.SubqueryExpr:
			ok = false
		case *parser.VectorSelector:
			if n.Timestamp != nil || n.StartOrEnd != 0 || n.OriginalOffset != 0 || n.OriginalOffsetExpr != nil || n.Anchored || n.Smoothed {
				ok = false
			}
		}
		return nil
	})
	return ok
}
