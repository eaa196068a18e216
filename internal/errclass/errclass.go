// Package errclass sorts errors into the classes a client acts on (fix the
// request, send less, retry later, ...) and holds the one table of the HTTP
// status and gRPC code each class is answered with. An error that came
// back from another node as a gRPC status keeps its class, even wrapped:
// a share of a write refused as too large by the datanode it was forwarded
// to is a 413 at the HTTP edge, as it is when the region is local.
//
// Of knows the sentinels both planes share (catalog, schema, layout,
// scan),
// context errors and gRPC statuses; the data plane passes a Rule for its
// own (datanode.ErrClass). The package links no data-plane code: metasrv
// answers through it too (wire.Status).
package errclass

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/schema"
)

// Class is what a client should make of an error.
type Class uint8

const (
	// Internal: a fault of the server, or an error no rule knows.
	Internal Class = iota
	// Invalid: bad input; the same request fails again.
	Invalid
	// TooLarge: a request over a limit (a batch's rows or bytes); send
	// less at a time.
	TooLarge
	// Unavailable: retry later (a region moving, closed or fenced, a node
	// or the catalog briefly out of reach).
	Unavailable
	// Timeout: the server's deadline passed; retry later.
	Timeout
	// Canceled: the caller went away.
	Canceled
	// NotFound: no such table (or other named thing).
	NotFound
	// Exists: what was to be created exists already.
	Exists
	// Busy: the operation conflicts with one in progress (a compaction of
	// the region).
	Busy
	// RateLimited: over a tenant's ingestion rate (internal/limits); send
	// again later, slower. It is decided where a request enters, never
	// between nodes: its gRPC code, ResourceExhausted, reads back as
	// TooLarge (FromCode), which a client acts on alike (send less).
	RateLimited
)

// StatusClientClosed is the HTTP status of a request its client closed
// (nginx's 499): nobody reads it, but it is what logs and metrics count.
const StatusClientClosed = 499

// answers is the one table of what each class is answered with: the HTTP
// status at the HTTP edges and the gRPC code between nodes and to gRPC
// clients. FromCode reads the codes back.
var answers = [...]struct {
	name string
	http int
	code codes.Code
}{
	Internal:    {"internal", http.StatusInternalServerError, codes.Internal},
	Invalid:     {"invalid", http.StatusBadRequest, codes.InvalidArgument},
	TooLarge:    {"too large", http.StatusRequestEntityTooLarge, codes.ResourceExhausted},
	Unavailable: {"unavailable", http.StatusServiceUnavailable, codes.Unavailable},
	Timeout:     {"timeout", http.StatusServiceUnavailable, codes.DeadlineExceeded},
	Canceled:    {"canceled", StatusClientClosed, codes.Canceled},
	NotFound:    {"not found", http.StatusNotFound, codes.NotFound},
	Exists:      {"exists", http.StatusConflict, codes.AlreadyExists},
	Busy:        {"busy", http.StatusConflict, codes.FailedPrecondition},
	RateLimited: {"rate limited", http.StatusTooManyRequests, codes.ResourceExhausted},
}

// String names the class.
func (c Class) String() string { return answers[c].name }

// HTTP is the class's HTTP status.
func (c Class) HTTP() int { return answers[c].http }

// Code is the class's gRPC code.
func (c Class) Code() codes.Code { return answers[c].code }

// Status returns err as a gRPC status error of the class's code, with
// err's message (nil for nil).
func (c Class) Status(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(c.Code(), err.Error())
}

// FromCode is the class of a gRPC code: the class answered with it, and
// for the codes no class answers with, the nearest (OutOfRange is bad
// input, Aborted a retry). Unknown, Unimplemented, an authentication
// failure between nodes and the rest are Internal.
func FromCode(code codes.Code) Class {
	for c, a := range answers {
		if a.code == code {
			return Class(c)
		}
	}
	switch code {
	case codes.OutOfRange:
		return Invalid
	case codes.Aborted:
		return Unavailable
	}
	return Internal
}

// Rule classifies the errors it knows; ok false leaves err to the next.
type Rule func(err error) (c Class, ok bool)

// Of returns err's class: the first of rules that knows err, else the
// class of the sentinels both planes share, else that of a gRPC status
// err carries (an error from another node, wrapped or not), else that of
// a context error; Internal if none knows it.
func Of(err error, rules ...Rule) Class {
	for _, r := range rules {
		if c, ok := r(err); ok {
			return c
		}
	}
	if c, ok := Shared(err); ok {
		return c
	}
	if c, ok := Remote(err); ok {
		return c
	}
	switch {
	case errors.Is(err, context.Canceled):
		return Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return Timeout
	}
	return Internal
}

// Shared classifies the sentinels the control and data planes share:
// catalog, schema and region-id errors, and a scan's (what the query
// layer, the engine and the wire share).
func Shared(err error) (Class, bool) {
	var ce *schema.ConflictError
	switch {
	case errors.As(err, &ce), errors.Is(err, catalog.ErrInvalidTable), errors.Is(err, schema.ErrBadName), errors.Is(err, layout.ErrInvalidRegion),
		errors.Is(err, scan.ErrInvalid):
		return Invalid, true
	case errors.Is(err, scan.ErrInterrupted):
		return Unavailable, true
	case errors.Is(err, catalog.ErrTableNotFound):
		return NotFound, true
	case errors.Is(err, catalog.ErrTableExists):
		return Exists, true
	case errors.Is(err, catalog.ErrConflict):
		return Unavailable, true
	}
	return Internal, false
}

// Remote classifies a gRPC status error, found through any wrapping
// (status.FromError unwraps): an error another node answered with keeps
// the class the node gave it. An error that carries no status, or
// carries codes.Unknown (a status made of an error that had none), is
// not known here.
func Remote(err error) (Class, bool) {
	if err == nil {
		return Internal, false
	}
	s, ok := status.FromError(err)
	if !ok || s.Code() == codes.Unknown || s.Code() == codes.OK {
		return Internal, false
	}
	return FromCode(s.Code()), true
}
