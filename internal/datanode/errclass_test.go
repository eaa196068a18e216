package datanode_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/errclass"
	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/schema"
)

// The classes of the engine's errors, local or from another datanode
// (what the HTTP API, remote write, PromQL and the gRPC service answer
// with): the same error has the same class on either side of a forward.
func TestErrClass(t *testing.T) {
	// remote is err as the datanode that forwarded to its owner sees it:
	// the owner's gRPC status, wrapped by the router.
	remote := func(err error) error {
		return fmt.Errorf("region 1/0 on 127.0.0.1:1: %w", datanode.ErrClass(err).Status(err))
	}
	for _, c := range []struct {
		err  error
		want errclass.Class
		http int
		code codes.Code
	}{
		{&region.PointError{Index: 3, Err: fmt.Errorf("%w: no fields", region.ErrInvalidWrite)}, errclass.Invalid, 400, codes.InvalidArgument},
		{fmt.Errorf("%w: no such field", scan.ErrInvalid), errclass.Invalid, 400, codes.InvalidArgument},
		{fmt.Errorf("%w: x", catalog.ErrInvalidTable), errclass.Invalid, 400, codes.InvalidArgument},
		{fmt.Errorf("%w: a b", schema.ErrBadName), errclass.Invalid, 400, codes.InvalidArgument},
		{fmt.Errorf("%w: 5 points, the limit is 2", region.ErrBatchTooLarge), errclass.TooLarge, 413, codes.ResourceExhausted},
		{fmt.Errorf("write: %w", fence.ErrFenced), errclass.Unavailable, 503, codes.Unavailable},
		{region.ErrClosed, errclass.Unavailable, 503, codes.Unavailable},
		{fmt.Errorf("wal: %w", region.ErrOutcomeUnknown), errclass.Unavailable, 503, codes.Unavailable},
		{fmt.Errorf("%w: region 1/0", datanode.ErrNotHosted), errclass.Unavailable, 503, codes.Unavailable},
		{fmt.Errorf("%w: region 1/0, read from 127.0.0.1:1: moved", scan.ErrInterrupted), errclass.Unavailable, 503, codes.Unavailable},
		{fmt.Errorf("%w: cpu", catalog.ErrTableNotFound), errclass.NotFound, 404, codes.NotFound},
		{fmt.Errorf("compact: %w", compact.ErrBusy), errclass.Busy, 409, codes.FailedPrecondition},
		{fmt.Errorf("scan: %w", context.Canceled), errclass.Canceled, 499, codes.Canceled},
		{fmt.Errorf("scan: %w", context.DeadlineExceeded), errclass.Timeout, 503, codes.DeadlineExceeded},
		{errors.New("put: connection reset"), errclass.Internal, 500, codes.Internal},
	} {
		for _, err := range []error{c.err, remote(c.err), fmt.Errorf("table cpu: %w", errors.Join(errors.New("x"), remote(c.err)))} {
			got := datanode.ErrClass(err)
			if got != c.want || got.HTTP() != c.http || got.Code() != c.code {
				t.Errorf("%v: %v (HTTP %d, gRPC %v), want %v (HTTP %d, gRPC %v)", err, got, got.HTTP(), got.Code(), c.want, c.http, c.code)
			}
			if s, _ := status.FromError(got.Status(err)); s.Code() != c.code {
				t.Errorf("%v: status %v, want %v", err, s.Code(), c.code)
			}
		}
	}
}
