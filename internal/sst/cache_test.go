package sst

import (
	"context"
	"testing"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
)

// A ranged reader is cached (its tail and parsed footer, not the file) and
// keeps serving scans after the context that opened it has ended.
func TestCacheKeepsRangedReaders(t *testing.T) {
	old := WholeFileLimit
	WholeFileLimit = 1024
	t.Cleanup(func() { WholeFileLimit = old })
	es := testEntries(t, 40000)
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
