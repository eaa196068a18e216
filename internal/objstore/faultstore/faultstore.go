// Package faultstore wraps an objstore.Bucket to inject faults for tests:
// fail, delay or "crash" (every later call fails) at the Nth matching call.
// Faults are chosen by call index, so a run with the same workload and the
// same rules (or the same seed for Random) replays exactly.
package faultstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stratadb/strata/internal/objstore"
)

// ErrInjected is the cause of an injected permanent failure.
var ErrInjected = errors.New("faultstore: injected failure")

// ErrCrashed is returned by every call once the store has crashed.
var ErrCrashed = errors.New("faultstore: crashed")

// Action is what happens at a matching call.
type Action int

const (
	// Fail returns an error without performing the call.
	Fail Action = iota
	// FailAfter performs the call, then returns an error (the result is
	// lost: an ambiguous failure).
	FailAfter
	// FailTransient returns a transient error without performing the call.
	FailTransient
	// Delay sleeps Rule.Delay (or until ctx ends), then performs the call.
	Delay
	// Crash fails this and every later call, without performing them.
	Crash
	// CrashAfter performs this call, then fails it and every later call.
	CrashAfter
)

func (a Action) String() string {
	return [...]string{"fail", "fail-after", "fail-transient", "delay", "crash", "crash-after"}[a]
}

// Call describes one call through the wrapper.
type Call struct {
	Index int // 1-based, counting every call
	Op    objstore.Op
	Key   string // the key, or the prefix for List
}

// Rule injects Action at the Nth call (1-based) that Match accepts.
type Rule struct {
	Match  func(Call) bool // nil matches every call
	N      int
	Action Action
	Delay  time.Duration
	seen   int
}

// OnOp matches calls of the given operations.
func OnOp(ops ...objstore.Op) func(Call) bool {
	return func(c Call) bool { return slices.Contains(ops, c.Op) }
}

// KeyContains matches calls whose key contains s.
func KeyContains(s string) func(Call) bool {
	return func(c Call) bool { return strings.Contains(c.Key, s) }
}

// Store is the fault-injecting wrapper.
type Store struct {
	inner objstore.Bucket

	mu      sync.Mutex
	calls   int
	rules   []*Rule
	crashed bool
	fired   []string
	// Hook, if set, runs before each call (outside the lock); tests use it to
	// pause a job at an exact point.
	Hook func(Call)
}

// New wraps inner with the given rules.
func New(inner objstore.Bucket, rules ...Rule) *Store {
	s := &Store{inner: inner}
	for i := range rules {
		r := rules[i]
		s.rules = append(s.rules, &r)
	}
	return s
}

// Random returns one rule chosen from seed: a random action at a random call
// index in [1, maxCalls]. It never chooses Delay.
func Random(seed uint64, maxCalls int) Rule {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	actions := []Action{Fail, FailAfter, FailTransient, Crash, CrashAfter}
	return Rule{N: 1 + rng.IntN(max(1, maxCalls)), Action: actions[rng.IntN(len(actions))]}
}

// AddRule arms another rule; its N counts matching calls from now on.
func (s *Store) AddRule(r Rule) {
	s.mu.Lock()
	s.rules = append(s.rules, &r)
	s.mu.Unlock()
}

// Calls returns how many calls have gone through the wrapper.
func (s *Store) Calls() int { s.mu.Lock(); defer s.mu.Unlock(); return s.calls }

// Crashed reports whether a crash has been injected.
func (s *Store) Crashed() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.crashed }

// Fired lists the faults injected so far, for test logs.
func (s *Store) Fired() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.fired...)
}

// before decides the fate of a call. It returns the action (or -1 for none).
func (s *Store) before(op objstore.Op, key string) (Call, Action, time.Duration, bool) {
	s.mu.Lock()
	s.calls++
	c := Call{Index: s.calls, Op: op, Key: key}
	if s.crashed {
		s.mu.Unlock()
		return c, Crash, 0, true
	}
	var fire *Rule
	for _, r := range s.rules {
		if r.Match != nil && !r.Match(c) {
			continue
		}
		r.seen++
		if r.seen == r.N && fire == nil {
			fire = r
		}
	}
	if r := fire; r != nil {
		s.fired = append(s.fired, fmt.Sprintf("%s at call %d (%s %s)", r.Action, c.Index, op, key))
		if r.Action == Crash {
			s.crashed = true
		}
		s.mu.Unlock()
		return c, r.Action, r.Delay, true
	}
	s.mu.Unlock()
	return c, 0, 0, false
}

func (s *Store) run(ctx context.Context, op objstore.Op, key string, f func() error) error {
	c, action, delay, hit := s.before(op, key)
	if s.Hook != nil {
		s.Hook(c)
	}
	if !hit {
		return f()
	}
	switch action {
	case Fail:
		return &objstore.OpError{Op: op, Key: key, Cause: ErrInjected}
	case FailTransient:
		return &objstore.OpError{Op: op, Key: key, Kind: objstore.ErrTransient, Cause: ErrInjected}
	case Crash:
		return &objstore.OpError{Op: op, Key: key, Cause: ErrCrashed}
	case Delay:
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		return f()
	case FailAfter:
		_ = f()
		return &objstore.OpError{Op: op, Key: key, Cause: ErrInjected}
	case CrashAfter:
		_ = f()
		s.mu.Lock()
		s.crashed = true
		s.mu.Unlock()
		return &objstore.OpError{Op: op, Key: key, Cause: ErrCrashed}
	}
	panic("faultstore: unknown action")
}

func (s *Store) Get(ctx context.Context, key string) (data []byte, err error) {
	err = s.run(ctx, objstore.OpGet, key, func() (e error) { data, e = s.inner.Get(ctx, key); return e })
	if err != nil {
		data = nil
	}
	return data, err
}

func (s *Store) GetRange(ctx context.Context, key string, off, n int64) (data []byte, err error) {
	err = s.run(ctx, objstore.OpGet, key, func() (e error) { data, e = s.inner.GetRange(ctx, key, off, n); return e })
	if err != nil {
		data = nil
	}
	return data, err
}

func (s *Store) ReadRange(ctx context.Context, key string, off int64, buf []byte) (n int, err error) {
	err = s.run(ctx, objstore.OpGet, key, func() (e error) { n, e = s.inner.ReadRange(ctx, key, off, buf); return e })
	if err != nil {
		n = 0
	}
	return n, err
}

func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	return s.run(ctx, objstore.OpPut, key, func() error { return s.inner.Put(ctx, key, data) })
}

func (s *Store) Upload(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return s.run(ctx, objstore.OpPut, key, func() error { return objstore.Upload(ctx, s.inner, key, r, size) })
}

func (s *Store) CreateIfAbsent(ctx context.Context, key string, data []byte) error {
	return s.run(ctx, objstore.OpPut, key, func() error { return s.inner.CreateIfAbsent(ctx, key, data) })
}

func (s *Store) Delete(ctx context.Context, key string) error {
	return s.run(ctx, objstore.OpDelete, key, func() error { return s.inner.Delete(ctx, key) })
}

func (s *Store) List(ctx context.Context, prefix string, token []byte, n int) (p objstore.Page, err error) {
	err = s.run(ctx, objstore.OpList, prefix, func() (e error) { p, e = s.inner.List(ctx, prefix, token, n); return e })
	if err != nil {
		p = objstore.Page{}
	}
	return p, err
}

func (s *Store) Attributes(ctx context.Context, key string) (a objstore.Attrs, err error) {
	err = s.run(ctx, objstore.OpHead, key, func() (e error) { a, e = s.inner.Attributes(ctx, key); return e })
	return a, err
}

// Close does not close the inner bucket: a "crashed" process's store is
// dropped, and the test reopens the same inner bucket.
func (s *Store) Close() error { return nil }
