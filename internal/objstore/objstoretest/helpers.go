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

// BenchBackend is a store that benchmarks run against.
type BenchBackend struct {
	Name string
	Open func(b *testing.B) objstore.Bucket
}

// BenchBackends are file:// in a temporary directory and a MinIO bucket
// (skipped, or failed with STRATA_REQUIRE_S3=1, when MinIO is missing).
// Stores close when the benchmark ends.
func BenchBackends() []BenchBackend {
	open := func(b *testing.B, url string) objstore.Bucket {
		s, err := objstore.Open(context.Background(), url, objstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	return []BenchBackend{
		{"file", func(b *testing.B) objstore.Bucket { return open(b, "file://"+b.TempDir()) }},
		{"minio", func(b *testing.B) objstore.Bucket { return open(b, MinIO(b).NewBucket(b)) }},
	}
}
