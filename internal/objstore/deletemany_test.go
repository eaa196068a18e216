package objstore_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
)

// A key that S3 refuses within a DeleteObjects request (MinIO refuses an
// empty path segment) is returned with its own error, not retried (the
// refusal is permanent), and the batch's other keys are deleted.
func TestDeleteManyReturnsTheKeysTheStoreRefused(t *testing.T) {
	srv := objstoretest.MinIO(t)
	s := openURL(t, srv.NewBucket(t))
	ctx := context.Background()
	for _, k := range []string{"a/1", "a/2"} {
		if err := s.Put(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	before := s.(*objstore.Store).Requests()
	failed, err := objstore.DeleteMany(ctx, s, []string{"a/1", "x//y", "a/2"})
	if !slices.Equal(failed, []string{"x//y"}) {
		t.Fatalf("failed = %q, want [x//y] (err %v)", failed, err)
	}
	var oe *objstore.OpError
	if !errors.As(err, &oe) || oe.Key != "x//y" || oe.Op != objstore.OpDelete || objstore.IsTransient(err) {
		t.Fatalf("err = %v, want a permanent *OpError for x//y", err)
	}
	if got := s.(*objstore.Store).Requests().Sub(before)[objstore.OpDelete]; got != 1 {
		t.Fatalf("%d delete requests, want 1 (a refusal is not retried)", got)
	}
	if objs, err := objstore.ListAll(ctx, s, "a/", 10); err != nil || len(objs) != 0 {
		t.Fatalf("left %v (%v), want a/1 and a/2 deleted", objs, err)
	}
}

// Without batches from the bucket, DeleteMany deletes key by key and
// returns the keys whose delete failed; the Store retries a batch's
// transient failures.
func TestDeleteManyKeyByKeyAndRetried(t *testing.T) {
	ctx := context.Background()
	raw, err := objstore.OpenBackend(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k/1", "k/2", "k/3"} {
		if err := raw.Put(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// A bucket that is no BatchDeleter (the fault injector), failing k/2
	// for good.
	f := faultstore.New(raw, faultstore.Rule{Match: faultstore.KeyContains("k/2"), N: 1, Action: faultstore.Fail})
	failed, err := objstore.DeleteMany(ctx, f, []string{"k/1", "k/2", "k/3"})
	if !slices.Equal(failed, []string{"k/2"}) || !errors.Is(err, faultstore.ErrInjected) {
		t.Fatalf("failed = %q, err = %v; want [k/2] and the injected fault", failed, err)
	}
	if objs, _ := objstore.ListAll(ctx, raw, "k/", 10); len(objs) != 1 || objs[0].Key != "k/2" {
		t.Fatalf("left %v, want only k/2", objs)
	}
	// Through a Store: each key's delete is a request, retried when it
	// fails transiently.
	f = faultstore.New(raw, faultstore.Rule{Match: faultstore.KeyContains("k/2"), N: 1, Action: faultstore.FailTransient})
	s := objstore.New(f, objstore.Options{Retry: objstore.RetryPolicy{MaxAttempts: 3, BaseBackoff: 1, MaxBackoff: 1}})
	if failed, err := s.DeleteMany(ctx, []string{"k/2"}); len(failed) != 0 || err != nil {
		t.Fatalf("failed = %q, err = %v; want k/2 deleted on the retry", failed, err)
	}
	if got := s.Requests()[objstore.OpDelete]; got != 2 {
		t.Fatalf("%d delete requests, want 2 (a failure and its retry)", got)
	}
}
