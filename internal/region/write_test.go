package region

import (
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
)

// A write reuses the field values of the writes before it (a kept
// scratch, not cleared when each point fills every field): a point that
// names a field twice, or lacks one, must still read back its lacking
// fields as nulls, never an earlier write's values.
func TestAWriteLacksNoFieldOfAnEarlierOne(t *testing.T) {
	ctx := context.Background()
	r := open(t, objstoretest.Mem(t), Options{})
	defer closeRegion(t, r, false)
	full := func(ts int64) row.Point { return pt("a", ts, fl("x", 1), fl("y", 2), fl("z", 3)) }
	for round := range 3 { // the scratches kept are reused in turn
		var pts []row.Point
		for i := range 64 {
			pts = append(pts, full(int64(round*1000+i)))
		}
		mustWrite(t, r, pts...)
		// A prepared batch whose points name x twice: as many fields as
		// the schema's, but not all of them.
		twice := make([]row.Point, 64)
		keys := make([][]byte, 64)
		for i := range twice {
			twice[i] = pt("c", int64(round*1000+i), fl("x", 6), fl("x", 6), fl("z", 7))
			k, err := row.EncodeSeries(nil, twice[i].Tags)
			if err != nil {
				t.Fatal(err)
			}
			keys[i] = k
		}
		if _, err := r.WriteBatch(ctx, Batch{Points: twice, Keys: keys}); err != nil {
			t.Fatal(err)
		}
		// The same number of points and fields, some lacking y.
		sparse := make([]row.Point, 64)
		for i := range sparse {
			sparse[i] = pt("b", int64(round*1000+i), fl("x", 4), fl("z", 5))
		}
		mustWrite(t, r, sparse...)
	}
	got := scanAll(t, r, scan.Request{})
	want := map[string]string{"host=a": " x=1 y=2 z=3", "host=b": " x=4 z=5", "host=c": " x=6 z=7"}
	n := 0
	for _, line := range got {
		for series, fields := range want {
			if strings.HasPrefix(line, series+" ") {
				n++
				if !strings.HasSuffix(line, fields) {
					t.Fatalf("row %q: want fields%s", line, fields)
				}
			}
		}
	}
	if n != 3*3*64 {
		t.Fatalf("%d rows of %d: %v", n, 3*3*64, slices.Clip(got[:min(len(got), 5)]))
	}
}

// uploadSpy is a store that streams uploads, noting which keys came
// through Upload and which through Put.
type uploadSpy struct {
	objstore.Bucket
	mu      sync.Mutex
	uploads map[string]bool
	puts    map[string]bool
}

func (s *uploadSpy) Upload(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	s.mu.Lock()
	s.uploads[key] = true
	s.mu.Unlock()
	return objstore.Upload(ctx, s.Bucket, key, r, size)
}

func (s *uploadSpy) Put(ctx context.Context, key string, data []byte) error {
	s.mu.Lock()
	s.puts[key] = true
	s.mu.Unlock()
	return s.Bucket.Put(ctx, key, data)
}

// A flush streams its SST to a store that takes streamed uploads (the
// region's own lease wrapper passes them on), rather than reading it
// whole into memory for a PUT.
func TestFlushStreamsItsSST(t *testing.T) {
	spy := &uploadSpy{Bucket: objstoretest.Mem(t), uploads: map[string]bool{}, puts: map[string]bool{}}
	lease := func() time.Time { return time.Now().Add(time.Hour) } // as a datanode's regions have
	r := open(t, spy, Options{Lease: lease})
	defer closeRegion(t, r, false)
	mustWrite(t, r, pt("a", 1, fl("x", 1)), pt("b", 2, fl("x", 2)))
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spy.mu.Lock()
	defer spy.mu.Unlock()
	n := 0
	for k := range spy.uploads {
		if _, ok := testRegion.ParseSSTKey(k); ok {
			n++
		}
	}
	for k := range spy.puts {
		if _, ok := testRegion.ParseSSTKey(k); ok {
			t.Fatalf("SST %s was PUT whole, not streamed", k)
		}
	}
	if n != 1 {
		t.Fatalf("%d SSTs streamed, want 1 (uploads %v)", n, spy.uploads)
	}
}
