package sst

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand"
	"testing"

	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/testseed"
)

// A ranged reader is cached (its tail and parsed footer, not the file) and
// keeps serving scans after the context that opened it has ended.
func TestCacheKeepsRangedReaders(t *testing.T) {
	old := WholeFileLimit
	WholeFileLimit = 1024
	t.Cleanup(func() { WholeFileLimit = old })
	es := testEntries(t, 150000)
	data, _ := writeWith(t, es, WriteOptions{RowGroupRows: 10000})
	s := objstoretest.Mem(t)
	if err := s.Put(context.Background(), "x.parquet", data); err != nil {
		t.Fatal(err)
	}
	c := NewCache(64 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	r, err := c.Open(ctx, s, "x.parquet", int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	again, err := c.Open(context.Background(), s, "x.parquet", int64(len(data)))
	if err != nil || again != r {
		t.Fatalf("second open: %v (same reader: %v)", err, again == r)
	}
	if c.used <= 0 || c.used >= int64(len(data)) {
		t.Fatalf("a ranged reader costs %d bytes of the cache; the file is %d", c.used, len(data))
	}
	equalEntries(t, collect(t, again.Iter(Filter{Start: -1 << 62, End: 1 << 62, Fields: names()})), es)
}

// Scans read a ranged file through the cache's blocks: any read returns
// the file's bytes, a second scan fetches nothing, compaction's reads
// (GroupBytes) leave no blocks behind, the cache stays within its limit
// while evicting, and a failed fetch caches nothing.
func TestCacheBlocks(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewSource(seed))
	old := WholeFileLimit
	WholeFileLimit = 1024
	t.Cleanup(func() { WholeFileLimit = old })
	es := testEntries(t, 75000)
	data, _ := writeWith(t, es, WriteOptions{RowGroupRows: 10000, PageBytes: 4096})
	if len(data) < 4*BlockBytes {
		t.Fatalf("the file is %d bytes: too small to span blocks", len(data))
	}
	ctx := context.Background()
	fs := faultstore.New(objstoretest.Mem(t))
	if err := fs.Put(ctx, "x.parquet", data); err != nil {
		t.Fatal(err)
	}
	size := int64(len(data))
	scan := func(r *Reader, f Filter) {
		t.Helper()
		f.Start, f.End, f.Fields = -1<<62, 1<<62, names()
		equalEntries(t, collect(t, r.Iter(f)), es)
	}

	c := NewCache(64 << 20)
	r, err := c.Open(ctx, fs, "x.parquet", size)
	if err != nil {
		t.Fatal(err)
	}
	for range 300 {
		off := rng.Int63n(size + 10)
		p := make([]byte, rng.Intn(3*BlockBytes+10))
		n, err := r.pages.ReadAt(p, off)
		want := data[min(off, size):min(off+int64(len(p)), size)]
		if n != len(want) || !bytes.Equal(p[:n], want) {
			t.Fatalf("read %d bytes at %d: got %d bytes, want %d (equal prefix: %v)", len(p), off, n, len(want), bytes.Equal(p[:n], want[:min(n, len(want))]))
		}
		if (n < len(p)) != (err == io.EOF) {
			t.Fatalf("read %d bytes at %d: %d, %v", len(p), off, n, err)
		}
	}
	scan(r, Filter{})
	calls := fs.Calls()
	scan(r, Filter{})
	if got := fs.Calls() - calls; got != 0 {
		t.Fatalf("a second scan made %d requests", got)
	}

	// A cold scan reads ahead: a request per 4 blocks (the tail, read at
	// open, aside), not one per refill of the page reader's buffer.
	cold := NewCache(64 << 20)
	calls = fs.Calls()
	r2, err := cold.Open(ctx, fs, "x.parquet", size)
	if err != nil {
		t.Fatal(err)
	}
	scan(r2, Filter{})
	if got, most := fs.Calls()-calls, 2+int((size+4*BlockBytes-1)/(4*BlockBytes)); got > most {
		t.Fatalf("a cold scan of %d bytes made %d requests, want at most %d", size, got, most)
	}

	// Compaction reads around the blocks, whether it fetches whole row
	// groups or, for groups over its budget, column by column.
	for _, budget := range []int64{size, 1} {
		c := NewCache(64 << 20)
		r, err := c.Open(ctx, fs, "x.parquet", size)
		if err != nil {
			t.Fatal(err)
		}
		scan(r, Filter{GroupBytes: budget})
		if st := c.Stats(); st.Entries != 1 || st.BlockMisses != 0 {
			t.Fatalf("compaction's reads (budget %d) went through the cache: %+v", budget, st)
		}
	}

	// A cache of a few blocks evicts as a scan goes, and stays in bounds.
	small := NewCache(int64(len(data)/8) + 4*BlockBytes)
	r, err = small.Open(ctx, fs, "x.parquet", size)
	if err != nil {
		t.Fatal(err)
	}
	scan(r, Filter{})
	if st := small.Stats(); st.Bytes > small.limit || st.BlockMisses == 0 {
		t.Fatalf("small cache: %+v, limit %d", st, small.limit)
	}

	// A failed fetch fails the scan and caches nothing; the next scan
	// reads the file whole and right.
	c = NewCache(64 << 20)
	r, err = c.Open(ctx, fs, "x.parquet", size)
	if err != nil {
		t.Fatal(err)
	}
	fs.AddRule(faultstore.Rule{Match: faultstore.OnOp(objstore.OpGet), N: 2, Action: faultstore.Fail})
	it := r.Iter(Filter{Start: -1 << 62, End: 1 << 62, Fields: names()})
	for it.Next() {
	}
	if err := it.Err(); !errors.Is(err, faultstore.ErrInjected) {
		t.Fatalf("scan with a failed read: %v", err)
	}
	it.Close()
	blocks := c.Stats().Entries - 1
	scan(r, Filter{})
	if st := c.Stats(); st.BlockMisses == 0 || blocks >= st.Entries-1 {
		t.Fatalf("after the failure: %d blocks, then %+v", blocks, st)
	}
}
