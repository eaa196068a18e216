package httpapi

import (
	"bytes"
	"strings"
	"testing"
)

// A pooled body buffer too small for a request is replaced by one of about
// the request's size, which reading the body does not grow; one large
// enough is kept as it is.
func TestSizedBodyBuffer(t *testing.T) {
	small := bytes.NewBuffer(make([]byte, 0, 1000))
	body := strings.Repeat("x", 100_000)
	buf := sized(small, int64(len(body)))
	if buf == small || buf.Cap() < len(body)+bytes.MinRead || buf.Cap() > len(body)*5/4 {
		t.Fatalf("a buffer of %d bytes for a body of %d", buf.Cap(), len(body))
	}
	before := buf.Cap()
	if _, err := buf.ReadFrom(strings.NewReader(body)); err != nil || buf.Len() != len(body) || buf.Cap() != before {
		t.Fatalf("read %d bytes (%v): the buffer grew from %d to %d", buf.Len(), err, before, buf.Cap())
	}
	buf.Reset()
	if again := sized(buf, int64(len(body)-10)); again != buf {
		t.Fatal("a buffer large enough was replaced")
	}
}
