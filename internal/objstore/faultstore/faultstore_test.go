package faultstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
)

func TestRulesFireAtTheNthMatchingCall(t *testing.T) {
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	f := faultstore.New(inner,
		faultstore.Rule{Match: faultstore.OnOp(objstore.OpPut), N: 2, Action: faultstore.Fail},
		faultstore.Rule{Match: faultstore.KeyContains("wal"), N: 1, Action: faultstore.FailAfter})
	if err := f.Put(ctx, "a", []byte("1")); err != nil {
		t.Fatalf("first put: %v", err)
	}
	if _, err := f.Get(ctx, "a"); err != nil {
		t.Fatalf("get is not a put: %v", err)
	}
	if err := f.Put(ctx, "b", []byte("2")); !errors.Is(err, faultstore.ErrInjected) {
		t.Fatalf("second put: want injected failure, got %v", err)
	}
	if _, err := inner.Get(ctx, "b"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Fail must not perform the call: %v", err)
	}
	if err := f.Put(ctx, "1/2/wal/x", []byte("3")); !errors.Is(err, faultstore.ErrInjected) {
		t.Fatalf("wal put: want injected failure, got %v", err)
	}
	if got, err := inner.Get(ctx, "1/2/wal/x"); err != nil || string(got) != "3" {
		t.Fatalf("FailAfter must perform the call: %q %v", got, err)
	}
	if f.Calls() != 4 || len(f.Fired()) != 2 {
		t.Fatalf("calls %d fired %v", f.Calls(), f.Fired())
	}
}

func TestCrashStopsEverything(t *testing.T) {
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	f := faultstore.New(inner, faultstore.Rule{N: 2, Action: faultstore.CrashAfter})
	_ = f.Put(ctx, "a", []byte("1"))
	if err := f.Put(ctx, "b", []byte("2")); !errors.Is(err, faultstore.ErrCrashed) {
		t.Fatalf("want crash, got %v", err)
	}
	if _, err := inner.Get(ctx, "b"); err != nil {
		t.Fatalf("CrashAfter must perform the call: %v", err)
	}
	for range 3 {
		if _, err := f.Get(ctx, "a"); !errors.Is(err, faultstore.ErrCrashed) {
			t.Fatalf("after crash: want ErrCrashed, got %v", err)
		}
	}
	if !f.Crashed() {
		t.Fatal("Crashed() = false")
	}
}

func TestDelayHonoursContext(t *testing.T) {
	f := faultstore.New(objstoretest.Mem(t), faultstore.Rule{N: 1, Action: faultstore.Delay, Delay: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Put(ctx, "a", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
}

func TestRandomIsDeterministic(t *testing.T) {
	for seed := range uint64(50) {
		a, b := faultstore.Random(seed, 20), faultstore.Random(seed, 20)
		if a.N != b.N || a.Action != b.Action || a.N < 1 || a.N > 20 {
			t.Fatalf("seed %d: %+v vs %+v", seed, a, b)
		}
	}
}
