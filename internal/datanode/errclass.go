package datanode

import (
	"errors"

	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/errclass"
	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/limits"
	"github.com/stratadb/strata/internal/region"
)

// ErrClass is the class of an error of the engine, of its regions or of
// another datanode: what the HTTP API, remote write, PromQL and the gRPC
// service answer it with (errclass holds the table of codes).
func ErrClass(err error) errclass.Class { return errclass.Of(err, dataPlane) }

// dataPlane classifies the data plane's own sentinels; the shared ones,
// context errors and statuses from other datanodes are errclass.Of's.
func dataPlane(err error) (errclass.Class, bool) {
	var le *limits.Error
	switch {
	case errors.As(err, &le):
		if le.Rate {
			return errclass.RateLimited, true
		}
		return errclass.Invalid, true
	case errors.Is(err, region.ErrInvalidWrite):
		return errclass.Invalid, true
	case errors.Is(err, compact.ErrBusy):
		return errclass.Busy, true
	case errors.Is(err, region.ErrBatchTooLarge):
		return errclass.TooLarge, true
	case errors.Is(err, fence.ErrFenced), errors.Is(err, region.ErrClosed), errors.Is(err, region.ErrOutcomeUnknown),
		errors.Is(err, ErrNotHosted):
		return errclass.Unavailable, true
	}
	return errclass.Internal, false
}
