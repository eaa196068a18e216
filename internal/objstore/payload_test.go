package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
)

// TestS3PayloadsUnsignedButChecksummed checks what docs/design-decisions.md
// ("Unsigned payloads") claims of writes to S3: bodies are not hashed into
// the signature, every write carries a checksum, and the store rejects a
// body changed on the way, with nothing written.
func TestS3PayloadsUnsignedButChecksummed(t *testing.T) {
	var mu sync.Mutex
	var writes []http.Header
	var corrupt atomic.Bool
	s := behindProxy(t, func(r *http.Request) {
		if r.Method == http.MethodPut {
			mu.Lock()
			writes = append(writes, r.Header.Clone())
			mu.Unlock()
			if corrupt.Load() {
				body, _ := io.ReadAll(r.Body)
				if len(body) > 0 {
					body[len(body)/2] ^= 0x01
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
			}
		}
	})
	ctx := context.Background()
	big := make([]byte, 20<<20) // past the 16 MiB multipart threshold: parts
	for i := range big {
		big[i] = byte(rand.Uint32())
	}
	if err := s.Put(ctx, "small", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := objstore.Upload(ctx, s, "big", bytes.NewReader(big), -1); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "big"); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("big read back: %d bytes, %v", len(got), err)
	}
	mu.Lock()
	if len(writes) < 4 {
		t.Fatalf("%d PUT requests; want a Put and an upload in parts", len(writes))
	}
	for i, h := range writes {
		sha := h.Get("X-Amz-Content-Sha256")
		if !strings.Contains(sha, "UNSIGNED-PAYLOAD") {
			t.Errorf("PUT %d: x-amz-content-sha256 %q, want an unsigned payload", i, sha)
		}
		checksummed := false
		for k := range h {
			if strings.HasPrefix(strings.ToLower(k), "x-amz-checksum-") || strings.EqualFold(k, "X-Amz-Trailer") {
				checksummed = true
			}
		}
		if !checksummed {
			t.Errorf("PUT %d carries no checksum: %v", i, h)
		}
	}
	mu.Unlock()
	// A body changed on the way is rejected, and nothing lands.
	corrupt.Store(true)
	if err := s.Put(ctx, "bent", []byte("a body that will not arrive intact")); err == nil {
		t.Fatal("Put of a corrupted body succeeded")
	}
	if err := objstore.Upload(ctx, s, "bent-big", bytes.NewReader(big), -1); err == nil {
		t.Fatal("Upload of corrupted parts succeeded")
	}
	corrupt.Store(false)
	for _, k := range []string{"bent", "bent-big"} {
		if _, err := s.Get(ctx, k); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("%s after a rejected write: %v, want not found", k, err)
		}
	}
}

// TestS3DeleteIsOneRequest: a delete is one DELETE, for a key that exists
// and for one that does not (s3blob's Delete sent a HEAD before each, to
// report a missing key that a delete treats as done: twice the requests
// for every WAL segment and file collected).
func TestS3DeleteIsOneRequest(t *testing.T) {
	var mu sync.Mutex
	var methods []string
	s := behindProxy(t, func(r *http.Request) {
		mu.Lock()
		methods = append(methods, r.Method)
		mu.Unlock()
	})
	ctx := context.Background()
	if err := s.Put(ctx, "wal/1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"wal/1", "never/was"} {
		mu.Lock()
		methods = nil
		mu.Unlock()
		if err := s.Delete(ctx, key); err != nil {
			t.Fatalf("delete %s: %v", key, err)
		}
		mu.Lock()
		got := strings.Join(methods, " ")
		mu.Unlock()
		if got != http.MethodDelete {
			t.Errorf("delete %s sent %q, want one DELETE", key, got)
		}
	}
	if _, err := s.Get(ctx, "wal/1"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("get after delete: %v, want not found", err)
	}
}

// behindProxy opens a bucket of a MinIO server through a proxy that shows
// each request to see (which may change it) before MinIO gets it.
func behindProxy(t *testing.T, see func(*http.Request)) objstore.Bucket {
	t.Helper()
	srv := objstoretest.MinIO(t)
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		see(r)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	u, err := url.Parse(srv.NewBucket(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("endpoint", front.URL)
	u.RawQuery = q.Encode()
	return openURL(t, u.String())
}
