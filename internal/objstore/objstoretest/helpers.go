package objstoretest

import (
	"context"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/objstore"
)

// Mem returns an empty in-memory bucket, closed when the test ends.
func Mem(t testing.TB) objstore.Bucket {
	t.Helper()
	b, err := objstore.OpenBackend(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// Fast wraps b with the Store's retries, without noticeable backoff sleeps.
func Fast(b objstore.Bucket) *objstore.Store {
	return objstore.New(b, objstore.Options{Retry: objstore.RetryPolicy{MaxAttempts: 3, BaseBackoff: time.Microsecond, MaxBackoff: time.Microsecond}})
}
