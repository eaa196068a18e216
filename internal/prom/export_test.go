package prom

import (
	"context"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
)

// EvalDirect evaluates a range query of expr as the API does without the
// engine, if it can (ok false: the API would hand it to the engine).
func EvalDirect(ctx context.Context, q *Queryable, expr parser.Expr, start, end time.Time, step time.Duration) (m promql.Matrix, ok bool, err error) {
	p := planDirect(expr, step)
	if p == nil {
		return nil, false, nil
	}
	m, err = p.eval(ctx, q, start, end, step)
	return m, true, err
}

// RenderBits prints a result exactly: every value's bits.
var RenderBits = renderBits

// KeptBodyLen is how many strings respond's kept body lists.
func KeptBodyLen() int {
	keptBody.Lock()
	defer keptBody.Unlock()
	return len(keptBody.vs)
}
