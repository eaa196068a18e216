package errclass_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/errclass"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/schema"
)

// every lists every class.
var every = []errclass.Class{errclass.Internal, errclass.Invalid, errclass.TooLarge, errclass.Unavailable, errclass.Timeout,
	errclass.Canceled, errclass.NotFound, errclass.Exists, errclass.Busy}

// The table the edges answer with: a change of a status or a code is a
// change of the API, and fails here.
func TestAnswers(t *testing.T) {
	want := map[errclass.Class]struct {
		http int
		code codes.Code
	}{
		errclass.Internal:    {http.StatusInternalServerError, codes.Internal},
		errclass.Invalid:     {http.StatusBadRequest, codes.InvalidArgument},
		errclass.TooLarge:    {http.StatusRequestEntityTooLarge, codes.ResourceExhausted},
		errclass.Unavailable: {http.StatusServiceUnavailable, codes.Unavailable},
		errclass.Timeout:     {http.StatusServiceUnavailable, codes.DeadlineExceeded},
		errclass.Canceled:    {499, codes.Canceled},
		errclass.NotFound:    {http.StatusNotFound, codes.NotFound},
		errclass.Exists:      {http.StatusConflict, codes.AlreadyExists},
		errclass.Busy:        {http.StatusConflict, codes.FailedPrecondition},
		errclass.RateLimited: {http.StatusTooManyRequests, codes.ResourceExhausted},
	}
	for _, c := range append(every, errclass.RateLimited) {
		if c.HTTP() != want[c].http || c.Code() != want[c].code {
			t.Errorf("%v: HTTP %d, gRPC %v; want %d, %v", c, c.HTTP(), c.Code(), want[c].http, want[c].code)
		}
		// A class survives a trip through another node: its code reads
		// back as itself (RateLimited, decided where a request enters
		// and never sent between nodes, as TooLarge).
		if got := errclass.FromCode(c.Code()); got != c && (c != errclass.RateLimited || got != errclass.TooLarge) {
			t.Errorf("%v: FromCode(%v) = %v", c, c.Code(), got)
		}
		if c.String() == "" {
			t.Errorf("class %d has no name", c)
		}
	}
	for code, want := range map[codes.Code]errclass.Class{codes.OutOfRange: errclass.Invalid, codes.Aborted: errclass.Unavailable,
		codes.Unknown: errclass.Internal, codes.Unimplemented: errclass.Internal, codes.Unauthenticated: errclass.Internal, codes.DataLoss: errclass.Internal} {
		if got := errclass.FromCode(code); got != want {
			t.Errorf("FromCode(%v) = %v, want %v", code, got, want)
		}
	}
}

// Of: the shared sentinels, context errors, and gRPC statuses however
// wrapped; a rule comes first.
func TestOf(t *testing.T) {
	remote := func(code codes.Code) error {
		return fmt.Errorf("region 1/0 on 127.0.0.1:1: %w", status.Error(code, "from the owner"))
	}
	for _, c := range []struct {
		name string
		err  error
		want errclass.Class
	}{
		{"plain", errors.New("disk on fire"), errclass.Internal},
		{"invalid table", fmt.Errorf("create: %w", catalog.ErrInvalidTable), errclass.Invalid},
		{"bad name", fmt.Errorf("%w: x y", schema.ErrBadName), errclass.Invalid},
		{"type conflict", fmt.Errorf("write: %w", &schema.ConflictError{Column: "v"}), errclass.Invalid},
		{"invalid region", fmt.Errorf("%w: 1/x", layout.ErrInvalidRegion), errclass.Invalid},
		{"invalid scan", fmt.Errorf("%w: unknown field %q", scan.ErrInvalid, "f"), errclass.Invalid},
		{"scan interrupted", fmt.Errorf("table cpu: %w: region 1/0", scan.ErrInterrupted), errclass.Unavailable},
		{"no table", fmt.Errorf("%w: cpu", catalog.ErrTableNotFound), errclass.NotFound},
		{"table exists", catalog.ErrTableExists, errclass.Exists},
		{"catalog conflict", fmt.Errorf("commit: %w", catalog.ErrConflict), errclass.Unavailable},
		{"canceled", fmt.Errorf("scan: %w", context.Canceled), errclass.Canceled},
		{"deadline", fmt.Errorf("scan: %w", context.DeadlineExceeded), errclass.Timeout},
		{"remote invalid", remote(codes.InvalidArgument), errclass.Invalid},
		{"remote too large", remote(codes.ResourceExhausted), errclass.TooLarge},
		{"remote unavailable", remote(codes.Unavailable), errclass.Unavailable},
		{"remote deadline", remote(codes.DeadlineExceeded), errclass.Timeout},
		{"remote canceled", remote(codes.Canceled), errclass.Canceled},
		{"remote not found", remote(codes.NotFound), errclass.NotFound},
		{"remote exists", remote(codes.AlreadyExists), errclass.Exists},
		{"remote busy", remote(codes.FailedPrecondition), errclass.Busy},
		{"remote internal", remote(codes.Internal), errclass.Internal},
		{"remote unknown", remote(codes.Unknown), errclass.Internal},
		{"unwrapped status", status.Error(codes.ResourceExhausted, "x"), errclass.TooLarge},
		{"twice wrapped", fmt.Errorf("table cpu: %w", remote(codes.ResourceExhausted)), errclass.TooLarge},
		// A write of several regions joins their errors.
		{"joined", errors.Join(nil, remote(codes.ResourceExhausted)), errclass.TooLarge},
		{"joined with an unknown", errors.Join(errors.New("x"), remote(codes.Unavailable)), errclass.Unavailable},
	} {
		if got := errclass.Of(c.err); got != c.want {
			t.Errorf("%s: Of(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
	if errclass.Of(nil) != errclass.Internal {
		t.Error("Of(nil) is not Internal")
	}
	mine := errors.New("mine")
	rule := func(err error) (errclass.Class, bool) {
		if errors.Is(err, mine) {
			return errclass.Busy, true
		}
		return errclass.Internal, false
	}
	if got := errclass.Of(errors.Join(mine, catalog.ErrInvalidTable), rule); got != errclass.Busy {
		t.Errorf("a rule's sentinel: %v, want busy (rules come first)", got)
	}
	if got := errclass.Of(catalog.ErrTableNotFound, rule); got != errclass.NotFound {
		t.Errorf("a sentinel no rule knows: %v, want not found", got)
	}
}

// Status keeps the class's code and the error's message, and reads back
// as the class.
func TestStatus(t *testing.T) {
	if errclass.Invalid.Status(nil) != nil {
		t.Fatal("Status(nil) is not nil")
	}
	for _, c := range every {
		err := c.Status(errors.New("the message"))
		s, ok := status.FromError(err)
		if !ok || s.Code() != c.Code() || s.Message() != "the message" {
			t.Errorf("%v: %v", c, err)
		}
		if errclass.Of(fmt.Errorf("forwarded: %w", err)) != c {
			t.Errorf("%v: read back as %v", c, errclass.Of(err))
		}
	}
}
