package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RetryPolicy bounds retries of transient failures: at most MaxAttempts
// tries, sleeping a random duration in [0, min(MaxBackoff, BaseBackoff*2^n))
// between them (full jitter).
type RetryPolicy struct {
	MaxAttempts int
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
}

// DefaultRetryPolicy is used when Options.Retry is zero.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 5, BaseBackoff: 20 * time.Millisecond, MaxBackoff: time.Second}

// Options configure a Store.
type Options struct {
	Retry RetryPolicy
	// Registerer, if set, receives strata_objstore_requests_total.
	Registerer prometheus.Registerer
}

// Store is the Bucket the rest of Strata uses: a backend plus bounded
// retries of transient failures and request counters. Layering, outermost
// first: retries, counting, backend. Every attempt is counted, so the
// counters show the requests really sent.
type Store struct {
	inner  Bucket
	retry  RetryPolicy
	counts [5]atomic.Int64
	errs   [5]atomic.Int64
	metric *prometheus.CounterVec
}

// Open opens the backend named by rawURL (see OpenBackend) as a Store.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	b, err := OpenBackend(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	return New(b, opts), nil
}

// New wraps a backend (possibly itself wrapped, for example by a fault
// injector in tests) as a Store.
func New(b Bucket, opts Options) *Store {
	if opts.Retry.MaxAttempts <= 0 {
		opts.Retry = DefaultRetryPolicy
	}
	s := &Store{inner: b, retry: opts.Retry}
	if opts.Registerer != nil {
		s.metric = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_objstore_requests_total",
			Help: "Object-store requests sent, by operation and outcome (ok, not_found, precondition_failed, error).",
		}, []string{"op", "result"})
		opts.Registerer.MustRegister(s.metric)
	}
	return s
}

// RequestCounts is a snapshot of requests sent, by operation.
type RequestCounts map[Op]int64

// Sub returns r minus earlier, per operation.
func (r RequestCounts) Sub(earlier RequestCounts) RequestCounts {
	out := RequestCounts{}
	for _, op := range Ops {
		out[op] = r[op] - earlier[op]
	}
	return out
}

// Total is the sum over all operations.
func (r RequestCounts) Total() int64 {
	var n int64
	for _, v := range r {
		n += v
	}
	return n
}

// Requests returns how many requests of each kind the store has sent.
func (s *Store) Requests() RequestCounts {
	out := RequestCounts{}
	for i, op := range Ops {
		out[op] = s.counts[i].Load()
	}
	return out
}

func opIndex(op Op) int {
	for i, o := range Ops {
		if o == op {
			return i
		}
	}
	panic("objstore: unknown op " + string(op))
}

func (s *Store) record(op Op, err error) {
	i := opIndex(op)
	s.counts[i].Add(1)
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, ErrNotFound):
		result = "not_found"
	case errors.Is(err, ErrPreconditionFailed):
		result = "precondition_failed"
	default:
		result = "error"
		s.errs[i].Add(1)
	}
	if s.metric != nil {
		s.metric.WithLabelValues(string(op), result).Inc()
	}
}

// do runs one request with retries. f is called once per attempt.
func (s *Store) do(ctx context.Context, op Op, f func() error) error {
	var err, first error
	for attempt := 0; ; attempt++ {
		err = f()
		s.record(op, err)
		if err != nil && first != nil && !IsTransient(err) {
			// A retry that fails otherwise (a streamed source that cannot
			// be re-read, say) would hide why the retry was made. The
			// first failure is named, not wrapped: the error is the last.
			return fmt.Errorf("%w (after %d failed attempts, the first: %v)", err, attempt, first)
		}
		if err == nil || !IsTransient(err) || attempt+1 >= s.retry.MaxAttempts {
			return err
		}
		if first == nil {
			first = err
		}
		backoff := min(s.retry.MaxBackoff, s.retry.BaseBackoff<<attempt)
		t := time.NewTimer(rand.N(backoff) + time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

func (s *Store) Get(ctx context.Context, key string) (data []byte, err error) {
	err = s.do(ctx, OpGet, func() (e error) { data, e = s.inner.Get(ctx, key); return e })
	return data, err
}

func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (data []byte, err error) {
	err = s.do(ctx, OpGet, func() (e error) { data, e = s.inner.GetRange(ctx, key, offset, length); return e })
	return data, err
}

func (s *Store) ReadRange(ctx context.Context, key string, offset int64, buf []byte) (n int, err error) {
	err = s.do(ctx, OpGet, func() (e error) { n, e = s.inner.ReadRange(ctx, key, offset, buf); return e })
	return n, err
}

func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return s.do(ctx, OpPut, func() error { return s.inner.Put(ctx, key, data) })
}

// CreateIfAbsent creates key with data unless it exists.
//
// NB: a retry after a transient failure may find the object that the failed
// attempt did create. So when a retry reports ErrPreconditionFailed, the
// object is read back: if it holds exactly data, this call created it and
// succeeds. Callers that need "identical bytes" to imply "same writer"
// include a writer-unique token in data (the manifest does).
func (s *Store) CreateIfAbsent(ctx context.Context, key string, data []byte) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	retried := false
	err := s.do(ctx, OpPut, func() error {
		err := s.inner.CreateIfAbsent(ctx, key, data)
		if IsTransient(err) {
			retried = true
		}
		return err
	})
	if retried && errors.Is(err, ErrPreconditionFailed) {
		// A retry found the key: an earlier attempt may have created it.
		got, gerr := s.Get(ctx, key)
		switch {
		case gerr == nil && bytes.Equal(got, data):
			return nil
		case gerr != nil:
			// Unknown whose object it is: neither a success nor a lost
			// race. The caller reads back again later.
			return &OpError{Op: OpPut, Key: key, Kind: ErrTransient,
				Cause: fmt.Errorf("create-if-absent outcome unknown: a retry found the key and reading it back failed: %w", gerr)}
		}
	}
	return err
}

func (s *Store) Delete(ctx context.Context, key string) error {
	return s.do(ctx, OpDelete, func() error { return s.inner.Delete(ctx, key) })
}

func (s *Store) List(ctx context.Context, prefix string, token []byte, pageSize int) (p Page, err error) {
	err = s.do(ctx, OpList, func() (e error) { p, e = s.inner.List(ctx, prefix, token, pageSize); return e })
	return p, err
}

func (s *Store) Attributes(ctx context.Context, key string) (a Attrs, err error) {
	err = s.do(ctx, OpHead, func() (e error) { a, e = s.inner.Attributes(ctx, key); return e })
	return a, err
}

// Close closes the backend.
func (s *Store) Close() error { return s.inner.Close() }
