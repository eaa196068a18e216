package prom

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/prometheus/promql"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/fence"
)

// A query's error is answered by its class, a storage error's from the
// datanode that hosts the region too: unavailable and timeouts are 503
// (retry), a cancel 499; other storage failures stay internal, other
// evaluation failures execution.
func TestQueryErrorKeepsTheClass(t *testing.T) {
	remote := func(code codes.Code) error {
		return fmt.Errorf("scan region 1/0 on 127.0.0.1:1: %w", status.Error(code, "from the owner"))
	}
	for _, c := range []struct {
		err    error
		typ    string
		status int
	}{
		{promql.ErrQueryTimeout("query"), "timeout", 503},
		{promql.ErrQueryCanceled("query"), "canceled", 499},
		{fmt.Errorf("eval: %w", context.DeadlineExceeded), "timeout", 503},
		{fmt.Errorf("eval: %w", context.Canceled), "canceled", 499},
		{promql.ErrStorage{Err: remote(codes.Unavailable)}, "unavailable", 503},
		{promql.ErrStorage{Err: remote(codes.DeadlineExceeded)}, "timeout", 503},
		{promql.ErrStorage{Err: fmt.Errorf("scan: %w", fence.ErrFenced)}, "unavailable", 503},
		{promql.ErrStorage{Err: fmt.Errorf("%w: region 1/0", datanode.ErrNotHosted)}, "unavailable", 503},
		{promql.ErrStorage{Err: remote(codes.Internal)}, "internal", 500},
		{promql.ErrStorage{Err: errors.New("get: connection reset")}, "internal", 500},
		{remote(codes.Unavailable), "unavailable", 503}, // label values ask the engine directly
		{ErrTooManySamples, "execution", 422},
	} {
		if e := queryError(c.err); e.typ != c.typ || e.status != c.status || e.err != c.err {
			t.Errorf("%v: %s %d, want %s %d", c.err, e.typ, e.status, c.typ, c.status)
		}
	}
}
