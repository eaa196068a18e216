package region

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/memtable"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/schema"
)

func TestWriteScanFlushReopen(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	r := open(t, s, Options{})
	mustWrite(t, r, pt("b", 20, fl("cpu", 2)), pt("a", 10, fl("cpu", 1)), pt("a", 5, fl("cpu", 0.5), row.Field{Name: "up", Value: row.BoolValue(true)}))
	want := []string{"host=a 5 cpu=0.5 up=true", "host=a 10 cpu=1", "host=b 20 cpu=2"}
	if got := scanAll(t, r, scan.Request{}); !slices.Equal(got, want) {
		t.Fatalf("memtable scan:\n%q\nwant\n%q", got, want)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st := r.Manifest()
	if len(st.Files) != 1 || len(st.Pending) != 0 || st.FlushedSeq != 3 {
		t.Fatalf("after flush: %d files, %d pending, flushed seq %d", len(st.Files), len(st.Pending), st.FlushedSeq)
	}
	for _, f := range st.Files {
		if f.MinTS != 5 || f.MaxTS != 20 || f.Rows != 3 || f.Level != 0 {
			t.Fatalf("file meta %+v", f)
		}
	}
	// An overwrite in the memtable wins over the SST.
	mustWrite(t, r, pt("a", 10, fl("cpu", 11)))
	want[1] = "host=a 10 cpu=11"
	if got := scanAll(t, r, scan.Request{}); !slices.Equal(got, want) {
		t.Fatalf("mixed scan:\n%q\nwant\n%q", got, want)
	}
	closeRegion(t, r, false)

	// Reopen: the SST plus the WAL tail.
	r = open(t, s, Options{})
	if got := scanAll(t, r, scan.Request{}); !slices.Equal(got, want) {
		t.Fatalf("after reopen:\n%q\nwant\n%q", got, want)
	}
	if sch := r.Schema(); len(sch.Fields()) != 2 || len(sch.Tags()) != 1 {
		t.Fatalf("schema after reopen: %v %v", sch.Tags(), sch.Fields())
	}
	// Close with flush leaves nothing to replay.
	closeRegion(t, r, true)
	r = open(t, s, Options{})
	defer closeRegion(t, r, false)
	if n := r.activeBytes(); n != 0 {
		t.Fatalf("replayed %d bytes after a flushing close", n)
	}
	if got := scanAll(t, r, scan.Request{}); !slices.Equal(got, want) {
		t.Fatalf("after flushed close:\n%q", got)
	}
	checkOwned(t, s, r.Manifest())
}

func TestScanFiltersAndProjection(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	r := open(t, s, Options{RowGroupRows: 10})
	defer closeRegion(t, r, false)
	var batch []row.Point
	for i := range 100 {
		for _, h := range []string{"a", "b"} {
			batch = append(batch, row.Point{Tags: []row.Tag{{Name: "host", Value: h}, {Name: "dc", Value: "x"}}, TS: int64(i), Fields: []row.Field{fl("cpu", float64(i)), {Name: "mem", Value: row.IntValue(int64(i))}}})
		}
	}
	mustWrite(t, r, batch[:100]...)
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, r, batch[100:]...)
	for _, flushed := range []bool{false, true} {
		if flushed {
			if err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		got := scanAll(t, r, scan.Request{Start: 40, End: 43, Tags: []row.Tag{{Name: "host", Value: "b"}}, Fields: []string{"mem"}})
		want := []string{"dc=x,host=b 40 mem=40", "dc=x,host=b 41 mem=41", "dc=x,host=b 42 mem=42"}
		if !slices.Equal(got, want) {
			t.Fatalf("flushed=%v:\n%q\nwant\n%q", flushed, got, want)
		}
		// A tag filter on a tag nobody has, with the empty value, matches
		// every series.
		if got := scanAll(t, r, scan.Request{Start: 0, End: 1, Tags: []row.Tag{{Name: "rack", Value: ""}}}); len(got) != 2 {
			t.Fatalf("empty tag value: %q", got)
		}
		if got := scanAll(t, r, scan.Request{Tags: []row.Tag{{Name: "host", Value: "zzz"}}}); len(got) != 0 {
			t.Fatalf("no such host: %q", got)
		}
		// Set filters: one of the values; "" is a series without the tag.
		if got := scanAll(t, r, scan.Request{Start: 7, End: 8, In: []row.TagIn{{Name: "host", Values: []string{"b", "zzz"}}}}); len(got) != 1 || !strings.HasPrefix(got[0], "dc=x,host=b 7") {
			t.Fatalf("host in (b, zzz): %q", got)
		}
		if got := scanAll(t, r, scan.Request{Start: 7, End: 8, In: []row.TagIn{{Name: "host", Values: []string{"a", "b"}}, {Name: "rack", Values: []string{""}}}}); len(got) != 2 {
			t.Fatalf("host in (a, b), no rack: %q", got)
		}
		if got := scanAll(t, r, scan.Request{In: []row.TagIn{{Name: "host", Values: nil}}}); len(got) != 0 {
			t.Fatalf("host in (): %q", got)
		}
	}
	// Small batches stream: every batch holds at most BatchRows rows.
	sc, err := r.Scan(ctx, scan.Request{Start: AllTime, End: AllTimeEnd, BatchRows: 7})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for sc.Next() {
		b := sc.Batch()
		if len(b) > 7 {
			t.Fatalf("batch of %d", len(b))
		}
		n += len(b)
	}
	sc.Close()
	if n != 200 {
		t.Fatalf("streamed %d rows", n)
	}
	// Bad requests.
	if _, err := r.Scan(ctx, scan.Request{Start: 5, End: 5}); !errors.Is(err, scan.ErrInvalid) {
		t.Fatalf("empty range: %v", err)
	}
	if _, err := r.Scan(ctx, scan.Request{Start: AllTime, End: AllTimeEnd, Fields: []string{"nope"}}); !errors.Is(err, scan.ErrInvalid) || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown field: %v", err)
	}
}

func TestScanPinsFiles(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	r := open(t, s, Options{})
	defer closeRegion(t, r, false)
	mustWrite(t, r, pt("a", 1, fl("v", 1)))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var id string
	for id = range r.Manifest().Files {
	}
	sc, err := r.Scan(ctx, scan.Request{Start: AllTime, End: AllTimeEnd})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Pinned(id) {
		t.Fatal("file read by an open scan is not pinned")
	}
	sc.Close()
	sc.Close()
	if r.Pinned(id) {
		t.Fatal("pin outlived the scan")
	}
}

func TestSchemaEvolutionAndConflicts(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	r := open(t, s, Options{})
	mustWrite(t, r, pt("a", 1, fl("cpu", 1)))
	v := r.Schema().Version()
	mustWrite(t, r, pt("a", 2, row.Field{Name: "msg", Value: row.StringValue("hi")}, row.Field{Name: "n", Value: row.UintValue(math.MaxUint64)}))
	if r.Schema().Version() != v+1 {
		t.Fatalf("schema version %d, want %d", r.Schema().Version(), v+1)
	}
	mustWrite(t, r, pt("a", 3, fl("cpu", 3))) // no change: no commit
	if r.Schema().Version() != v+1 {
		t.Fatal("a write of known columns changed the schema")
	}
	before := scanAll(t, r, scan.Request{})
	cases := []struct {
		p            row.Point
		column, have string
		write        string
	}{
		{pt("a", 4, row.Field{Name: "cpu", Value: row.IntValue(4)}), "cpu", "field float64", "field int64"},
		{pt("a", 4, row.Field{Name: "host", Value: row.IntValue(4)}), "host", "tag string", "field int64"},
		{row.Point{Tags: []row.Tag{{Name: "cpu", Value: "x"}}, TS: 4, Fields: []row.Field{fl("z", 1)}}, "cpu", "field float64", "tag string"},
	}
	for _, c := range cases {
		_, err := r.Write(ctx, []row.Point{pt("a", 100, fl("cpu", 100)), c.p})
		var ce *schema.ConflictError
		var pe *PointError
		if !errors.As(err, &ce) || !errors.As(err, &pe) || !errors.Is(err, ErrInvalidWrite) {
			t.Fatalf("conflict %v: %v", c.p, err)
		}
		if pe.Index != 1 || ce.Column != c.column || ce.HaveRole+" "+ce.HaveType != c.have || ce.WriteRole+" "+ce.WriteType != c.write {
			t.Fatalf("conflict error %+v (point %d)", ce, pe.Index)
		}
		if msg := err.Error(); !strings.Contains(msg, c.column) || !strings.Contains(msg, ce.HaveType) || !strings.Contains(msg, ce.WriteType) {
			t.Fatalf("message %q does not name the column and both types", msg)
		}
	}
	// Two new fields of one batch that conflict with each other.
	_, err := r.Write(ctx, []row.Point{pt("a", 5, fl("new", 1)), pt("a", 6, row.Field{Name: "new", Value: row.BoolValue(true)})})
	if ce := (*schema.ConflictError)(nil); !errors.As(err, &ce) || ce.Column != "new" {
		t.Fatalf("in-batch conflict: %v", err)
	}
	if got := scanAll(t, r, scan.Request{}); !slices.Equal(got, before) {
		t.Fatalf("a rejected batch changed the data:\n%q\n%q", got, before)
	}
	if _, ok := r.Schema().FieldOrdinal("new"); ok {
		t.Fatal("a rejected batch added a column")
	}
	closeRegion(t, r, false)
	r = open(t, s, Options{})
	defer closeRegion(t, r, false)
	if got := scanAll(t, r, scan.Request{}); !slices.Equal(got, before) {
		t.Fatalf("after reopen:\n%q\n%q", got, before)
	}
}

func TestBadInputRejectsWholeBatch(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	r := open(t, s, Options{MaxBatchRows: 10, MaxBatchBytes: 4096})
	defer closeRegion(t, r, false)
	good := pt("a", 1, fl("v", 1))
	long := strings.Repeat("x", 300)
	cases := map[string][]row.Point{
		"missing timestamp":    {good, pt("a", row.NoTimestamp, fl("v", 1))},
		"no fields":            {good, pt("a", 2)},
		"null field":           {good, pt("a", 2, row.Field{Name: "v"})},
		"duplicate field":      {good, pt("a", 2, fl("w", 1), fl("w", 2))},
		"reserved name":        {good, pt("a", 2, fl("__seq", 1))},
		"long name":            {good, pt("a", 2, fl(long, 1))},
		"timestamp as field":   {good, pt("a", 2, fl("time", 1))},
		"duplicate tag":        {good, {Tags: []row.Tag{{Name: "h", Value: "1"}, {Name: "h", Value: "2"}}, TS: 2, Fields: []row.Field{fl("v", 1)}}},
		"control char in name": {good, pt("a", 2, fl("a\nb", 1))},
	}
	for name, batch := range cases {
		_, err := r.Write(ctx, batch)
		var pe *PointError
		if !errors.Is(err, ErrInvalidWrite) || !errors.As(err, &pe) || pe.Index != 1 {
			t.Errorf("%s: %v", name, err)
		}
	}
	big := make([]row.Point, 11)
	for i := range big {
		big[i] = pt("a", int64(i), fl("v", 1))
	}
	if _, err := r.Write(ctx, big); !errors.Is(err, ErrBatchTooLarge) {
		t.Errorf("11 rows: %v", err)
	}
	if _, err := r.Write(ctx, []row.Point{pt("a", 1, row.Field{Name: "s", Value: row.StringValue(strings.Repeat("y", 5000))})}); !errors.Is(err, ErrBatchTooLarge) {
		t.Errorf("5000 bytes: %v", err)
	}
	if got := scanAll(t, r, scan.Request{}); len(got) != 0 {
		t.Fatalf("rejected batches wrote rows: %q", got)
	}
	if err := r.Delete(ctx, nil, 5, 4); !errors.Is(err, ErrInvalidWrite) {
		t.Errorf("backwards delete: %v", err)
	}
}

func TestRegionNotFoundAndClosed(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	if _, err := Open(ctx, s, testRegion, Options{}); !errors.Is(err, ErrRegionNotFound) {
		t.Fatalf("open missing: %v", err)
	}
	r := open(t, s, Options{})
	closeRegion(t, r, false)
	if _, err := r.Write(ctx, []row.Point{pt("a", 1, fl("v", 1))}); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	if _, err := r.Scan(ctx, scan.Request{Start: AllTime, End: AllTimeEnd}); !errors.Is(err, ErrClosed) {
		t.Fatalf("scan after close: %v", err)
	}
	if err := r.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("flush after close: %v", err)
	}
	closeRegion(t, r, false) // idempotent
}

func TestDeletes(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	r := open(t, s, Options{})
	for i := range 10 {
		mustWrite(t, r, pt("a", int64(i), fl("v", float64(i))), pt("b", int64(i), fl("v", float64(i))))
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// A tombstone in the memtable hides SST rows; b is untouched.
	if err := r.Delete(ctx, []row.Tag{{Name: "host", Value: "a"}}, 2, 7); err != nil {
		t.Fatal(err)
	}
	// A write after the tombstone is visible again.
	mustWrite(t, r, pt("a", 5, fl("v", 55)))
	check := func(when string) {
		t.Helper()
		got := scanAll(t, r, scan.Request{Tags: []row.Tag{{Name: "host", Value: "a"}}})
		want := []string{"host=a 0 v=0", "host=a 1 v=1", "host=a 5 v=55", "host=a 8 v=8", "host=a 9 v=9"}
		if !slices.Equal(got, want) {
			t.Fatalf("%s:\n%q\nwant\n%q", when, got, want)
		}
		if n := len(scanAll(t, r, scan.Request{Tags: []row.Tag{{Name: "host", Value: "b"}}})); n != 10 {
			t.Fatalf("%s: b has %d rows", when, n)
		}
		// A scan that starts inside the tombstone still applies it.
		if got := scanAll(t, r, scan.Request{Start: 3, End: 5, Tags: []row.Tag{{Name: "host", Value: "a"}}}); len(got) != 0 {
			t.Fatalf("%s: scan inside tombstone: %q", when, got)
		}
	}
	check("memtable tombstone")
	if err := r.Flush(ctx); err != nil { // the tombstone is now in a second SST
		t.Fatal(err)
	}
	check("flushed tombstone")
	closeRegion(t, r, false)
	r = open(t, s, Options{})
	defer closeRegion(t, r, false)
	check("reopened")
}

func TestTTL(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	now := time.Unix(0, 0).Add(1000 * time.Hour)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	reg := NewMetrics(nil)
	r := open(t, s, Options{TTL: time.Hour, Now: clock, Metrics: reg})
	defer closeRegion(t, r, false)
	at := func(ago time.Duration) int64 { return clock().Add(-ago).UnixNano() }
	res, err := r.Write(ctx, []row.Point{pt("a", at(2*time.Hour), fl("v", 1)), pt("a", at(30*time.Minute), fl("v", 2))})
	if err != nil || res.Written != 1 || res.Expired != 1 {
		t.Fatalf("write: %+v %v", res, err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, r, pt("a", at(10*time.Minute), fl("v", 3)))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := scanAll(t, r, scan.Request{}); len(got) != 2 {
		t.Fatalf("before expiry: %q", got)
	}
	advance(40 * time.Minute) // the first file's row is now 70 min old
	if got := scanAll(t, r, scan.Request{}); len(got) != 1 || !strings.HasSuffix(got[0], "v=3") {
		t.Fatalf("expired rows visible: %q", got)
	}
	if err := r.ExpireTTL(ctx); err != nil {
		t.Fatal(err)
	}
	st := r.Manifest()
	if len(st.Files) != 1 || len(st.Removed) != 1 || testutil.ToFloat64(reg.ExpiredFiles) != 1 {
		t.Fatalf("after expiry: %d live, %d removed", len(st.Files), len(st.Removed))
	}
	checkOwned(t, s, st)
	// A memtable whose rows all expired flushes to nothing but still moves
	// the flushed sequence; the flush also expires the second file (its row
	// is now 70 min old).
	mustWrite(t, r, pt("a", at(50*time.Minute), fl("v", 4)))
	advance(20 * time.Minute)
	seq := r.Manifest().FlushedSeq
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st = r.Manifest()
	if st.FlushedSeq <= seq || len(st.Pending) != 0 || len(st.Files) != 0 || len(st.Removed) != 2 {
		t.Fatalf("expired flush: seq %d -> %d, %d pending, %d files", seq, st.FlushedSeq, len(st.Pending), len(st.Files))
	}
}

// A region over its memtable limit stalls writes until a flush frees
// memory, and counts the stall.
func TestWriteStallsUntilFlushFreesMemory(t *testing.T) {
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	fs := faultstore.New(inner)
	release := make(chan struct{})
	blocked := make(chan struct{})
	var once sync.Once
	fs.Hook = func(c faultstore.Call) {
		if c.Op == objstore.OpPut && strings.Contains(c.Key, "/sst/") {
			once.Do(func() { close(blocked); <-release })
		}
	}
	m := NewMetrics(nil)
	budget := NewMemoryBudget(1 << 30)
	r := open(t, fs, Options{FlushBytes: 4 << 10, MaxMemtableBytes: 8 << 10, Metrics: m, Budget: budget})
	defer closeRegion(t, r, false)
	batch := func(base int) []row.Point {
		var ps []row.Point
		for i := range 20 {
			ps = append(ps, pt("a", int64(base+i), fl("v", 1), row.Field{Name: "s", Value: row.StringValue(strings.Repeat("p", 64))}))
		}
		return ps
	}
	// Fill past FlushBytes: the background flush starts and blocks in the
	// SST upload. (The region's bytes, not the active memtable's: the
	// flush may freeze the memtable before the loop looks again, and a
	// loop waiting for a new active memtable to fill would write on into
	// the stall.) A batch is under 4 KiB, so no write here stalls.
	// (The rows' bytes, rowBytes: what a flush and the stall look at; a
	// memtable's bytes also count its keys and its row slices' room.)
	for i := 0; rowBytes(r) < 4<<10; i++ {
		mustWrite(t, r, batch(i*100)...)
	}
	<-blocked
	// Fill the region up to its limit while the flush is stuck.
	for i := 1000; rowBytes(r) < r.opts.MaxMemtableBytes; i++ {
		mustWrite(t, r, batch(i*100)...)
	}
	if budget.Used() < 8<<10 {
		t.Fatalf("budget tracks %d bytes", budget.Used())
	}
	done := make(chan error, 1)
	go func() { _, err := r.Write(ctx, batch(1_000_000)); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("write over the limit did not stall: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if testutil.ToFloat64(m.Stalls) < 1 || testutil.ToFloat64(m.StallSeconds) <= 0 {
		t.Fatalf("stall not counted: %v stalls", testutil.ToFloat64(m.Stalls))
	}
	// A stalled write gives up with its context.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	r.mu.Lock()
	r.memBytes += 1 << 40 // pretend to be full
	r.mu.Unlock()
	_, err := r.Write(cctx, batch(2_000_000))
	r.mu.Lock()
	r.memBytes -= 1 << 40
	r.mu.Unlock()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled stalled write: %v", err)
	}
}

// The process budget stalls writes of a region that is under its own limit
// and asks the biggest region to flush.
func TestProcessBudgetStallsAcrossRegions(t *testing.T) {
	s := objstoretest.Mem(t)
	budget := NewMemoryBudget(16 << 10)
	m := NewMetrics(nil)
	r := open(t, s, Options{FlushBytes: 1 << 30, Budget: budget, Metrics: m})
	defer closeRegion(t, r, false)
	for i := 0; budget.Used() < 16<<10; i++ {
		mustWrite(t, r, pt("a", int64(i), row.Field{Name: "s", Value: row.StringValue(strings.Repeat("q", 200))}))
	}
	// Over budget: the next write stalls, the region is asked to flush,
	// and the write goes through once the flush frees memory.
	mustWrite(t, r, pt("a", -1, fl("v", 1)))
	if testutil.ToFloat64(m.Stalls) != 1 {
		t.Fatalf("stalls = %v", testutil.ToFloat64(m.Stalls))
	}
	if len(r.Manifest().Files) != 1 {
		t.Fatal("budget pressure did not flush the region")
	}
}

func TestStaleOwnerIsFenced(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	old := open(t, s, Options{})
	mustWrite(t, old, pt("a", 1, fl("v", 1)))
	nu := open(t, s, Options{})
	// The new owner replayed the acknowledged write.
	if got := scanAll(t, nu, scan.Request{}); len(got) != 1 {
		t.Fatalf("new owner sees %q", got)
	}
	_, err := old.Write(ctx, []row.Point{pt("a", 2, fl("v", 2))})
	if !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("stale write: %v", err)
	}
	if err := old.Flush(ctx); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("stale flush: %v", err)
	}
	if err := old.Close(ctx, CloseOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := scanAll(t, nu, scan.Request{}); len(got) != 1 {
		t.Fatalf("new owner sees %q after stale attempts", got)
	}
	// The stale owner's rejected write never becomes visible.
	closeRegion(t, nu, false)
	nu = open(t, s, Options{})
	defer closeRegion(t, nu, false)
	if got := scanAll(t, nu, scan.Request{}); len(got) != 1 {
		t.Fatalf("after reopen: %q", got)
	}
}

// A background flush that fails is retried with backoff, and its abandoned
// output is deleted and its marker resolved.
func TestBackgroundFlushRetries(t *testing.T) {
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	fs := faultstore.New(inner, faultstore.Rule{Match: faultstore.KeyContains("/sst/"), N: 1, Action: faultstore.FailAfter})
	puts := make(chan struct{}, 10)
	fs.Hook = func(c faultstore.Call) {
		if c.Op == objstore.OpPut && strings.Contains(c.Key, "/sst/") {
			puts <- struct{}{}
		}
	}
	m := NewMetrics(nil)
	r := open(t, fs, Options{FlushBytes: 1 << 10, Metrics: m, Logger: quiet})
	defer closeRegion(t, r, false)
	// Memtable bytes, not the active memtable's: the background flush may
	// freeze it before the loop looks, and more writes would make a second
	// file. Rows, not keys, start a flush (flushDue).
	for i := 0; rowBytes(r) < 1<<10; i++ {
		mustWrite(t, r, pt("a", int64(i), fl("v", 1), row.Field{Name: "s", Value: row.StringValue(strings.Repeat("z", 100))}))
	}
	<-puts                               // the first upload: it lands, then reports failure
	<-puts                               // the retry
	if err := r.Flush(ctx); err != nil { // waits for the background flush
		t.Fatal(err)
	}
	st := r.Manifest()
	if len(st.Files) != 1 || len(st.Pending) != 0 {
		t.Fatalf("after retry: %d files, %d pending", len(st.Files), len(st.Pending))
	}
	if testutil.ToFloat64(m.Flushes.WithLabelValues("error")) != 1 || testutil.ToFloat64(m.Flushes.WithLabelValues("ok")) < 1 {
		t.Fatal("flush results not counted")
	}
	// The failed attempt's SST was deleted: only the live file remains.
	if keys := sstKeys(t, inner); len(keys) != 1 {
		t.Fatalf("%d SST objects, want 1", len(keys))
	}
	checkOwned(t, inner, st)
}

// A prepared batch is not validated again, but its new columns still are
// checked against the region's schema, and its keys must match its points.
func TestWriteBatchChecksColumnsOnly(t *testing.T) {
	ctx := context.Background()
	r := open(t, objstoretest.Mem(t), Options{})
	defer closeRegion(t, r, false)
	mustWrite(t, r, pt("a", 1, fl("v", 1)))
	batch := func(points ...row.Point) Batch {
		b := Batch{Points: points}
		for _, p := range points {
			k, err := row.EncodeSeries(nil, p.Tags)
			if err != nil {
				t.Fatal(err)
			}
			b.Keys = append(b.Keys, k)
		}
		return b
	}
	if res, err := r.WriteBatch(ctx, batch(pt("b", 2, fl("v", 2), fl("w", 3)))); err != nil || res.Written != 1 {
		t.Fatalf("prepared batch with a new column: %+v %v", res, err)
	}
	var ce *schema.ConflictError
	if _, err := r.WriteBatch(ctx, batch(pt("c", 3, row.Field{Name: "v", Value: row.StringValue("x")}))); !errors.As(err, &ce) {
		t.Fatalf("prepared batch with a type conflict: %v", err)
	}
	b := batch(pt("d", 4, fl("v", 4)), pt("e", 5, fl("v", 5)))
	b.Keys = b.Keys[:1]
	if _, err := r.WriteBatch(ctx, b); !errors.Is(err, ErrInvalidWrite) {
		t.Fatalf("keys for half the points: %v", err)
	}
	if got := scanAll(t, r, scan.Request{}); len(got) != 2 {
		t.Fatalf("rows after the rejected batches: %q", got)
	}
}

// Rows, not keys, start a flush: a thousand series of long keys with a row
// each (a scrape of a Prometheus target) stay in the memtable, where a
// flush would write every key again for one sample each; rows past
// FlushBytes flush.
func TestKeysDoNotStartAFlush(t *testing.T) {
	o := Options{FlushBytes: 64 << 10, MaxMemtableBytes: 128 << 10}
	r := open(t, objstoretest.Mem(t), o)
	defer closeRegion(t, r, false)
	long := strings.Repeat("v", 300)
	write := func(ts int64) {
		var pts []row.Point
		for i := range 1000 {
			pts = append(pts, pt(fmt.Sprintf("%s%04d", long, i), ts, fl("value", 1)))
		}
		mustWrite(t, r, pts...)
	}
	write(1)
	r.mu.Lock()
	keys, bytes, st := r.memKeys, r.memBytes, r.active.Stats()
	r.mu.Unlock()
	if keys < 300_000 || bytes-keys >= 64<<10 || flushDue(st, &o) {
		t.Fatalf("after one row a series: %d key bytes of %d, flush due %v", keys, bytes, flushDue(st, &o))
	}
	for _, c := range []struct {
		st   memtable.Stats
		want bool
	}{
		{memtable.Stats{Bytes: 1 << 20, KeyBytes: 1<<20 - 1}, false},
		{memtable.Stats{Bytes: 1 << 20, KeyBytes: 1<<20 - 64<<10, Entries: 4000, Series: 1000}, true},
		{memtable.Stats{Bytes: 64 << 10}, true},
		// Past FlushBytes of rows but under 4 rows a series: wait, up to
		// 4 × FlushBytes of rows.
		{memtable.Stats{Bytes: 1 << 20, KeyBytes: 1<<20 - 64<<10, Entries: 3999, Series: 1000}, false},
		{memtable.Stats{Bytes: 1 << 20, KeyBytes: 1<<20 - 256<<10 + 1, Entries: 3999, Series: 1000}, false},
		{memtable.Stats{Bytes: 1 << 20, KeyBytes: 1<<20 - 256<<10, Entries: 3999, Series: 1000}, true},
	} {
		if got := flushDue(c.st, &Options{FlushBytes: 64 << 10, MaxMemtableBytes: 1 << 30}); got != c.want {
			t.Errorf("flushDue(%+v) = %v", c.st, got)
		}
	}
	for ts := int64(2); len(r.Manifest().Files) == 0; ts++ {
		if ts > 100 {
			t.Fatalf("no flush after %d rows a series", ts)
		}
		write(ts)
	}
}

// The decoded series indexes stay within SeriesCacheBytes: the oldest
// leave, the gauge follows, and a look-up loads a file's index again.
func TestSeriesCacheIsBounded(t *testing.T) {
	ctx := context.Background()
	m := NewMetrics(nil)
	r := open(t, objstoretest.Mem(t), Options{SeriesCacheBytes: 64 << 10, Metrics: m, FlushBytes: 1 << 30})
	defer closeRegion(t, r, false)
	for f := range 4 {
		var pts []row.Point
		for i := range 300 {
			pts = append(pts, pt(fmt.Sprintf("%s-%d", strings.Repeat("h", 60), i), int64(f), fl("v", 1)))
		}
		mustWrite(t, r, pts...)
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		r.seriesIdx.mu.Lock()
		bytes, files := r.seriesIdx.bytes, len(r.seriesIdx.files)
		r.seriesIdx.mu.Unlock()
		if bytes > 64<<10 && files > 1 || bytes != int64(testutil.ToFloat64(m.SeriesCache)) {
			t.Fatalf("after %d flushes: %d bytes in %d files, gauge %v", f+1, bytes, files, testutil.ToFloat64(m.SeriesCache))
		}
	}
	vals, err := r.TagValues(ctx, "host", AllTime, AllTimeEnd)
	if err != nil || len(vals) != 300 {
		t.Fatalf("tag values after eviction: %d %v", len(vals), err)
	}
}

// The files' merged answer to a label question is kept for the next call
// over the same files, and asked again once the files change; the whole
// answer is kept, and handed out as kept, while the memtables' are the
// same.
func TestTagValuesKeepTheFilesAnswer(t *testing.T) {
	ctx := context.Background()
	r := open(t, objstoretest.Mem(t), Options{FlushBytes: 1 << 30})
	defer closeRegion(t, r, false)
	values := func(want ...string) []string {
		t.Helper()
		vals, err := r.TagValues(ctx, "host", AllTime, AllTimeEnd)
		if err != nil || !slices.Equal(vals, want) {
			t.Fatalf("tag values %v (%v), want %v", vals, err, want)
		}
		return vals
	}
	flush := func() {
		t.Helper()
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, r, pt("b", 1, fl("v", 1)), pt("a", 1, fl("v", 1)))
	flush()
	mustWrite(t, r, pt("c", 2, fl("v", 1)))
	flush()
	values("a", "b", "c")
	r.merged.mu.Lock()
	kept := r.merged.sets["vhost"]
	r.merged.mu.Unlock()
	if len(kept.files) != 2 || !slices.Equal(kept.fromFiles, []string{"a", "b", "c"}) {
		t.Fatalf("kept %+v", kept)
	}
	values("a", "b", "c")
	mustWrite(t, r, pt("d", 3, fl("v", 1)))
	merged := values("a", "b", "c", "d") // the memtable's, merged with the files' kept answer
	if again := values("a", "b", "c", "d"); unsafe.SliceData(again) != unsafe.SliceData(merged) {
		t.Fatal("the whole answer was not kept") // and handed out as kept: read only
	}
	mustWrite(t, r, pt("e", 3, fl("v", 1)))
	values("a", "b", "c", "d", "e") // the memtable's answer changed with its new series
	mustWrite(t, r, pt("d", 4, fl("v", 1)))
	values("a", "b", "c", "d", "e") // a row of a known series: the same
	flush()
	values("a", "b", "c", "d", "e") // three files: asked again
	// The manifest lists its files in no order: the answer is kept for
	// the set, however a snapshot lists it.
	for i := range 4 {
		mustWrite(t, r, pt(fmt.Sprint("f", i), 5, fl("v", 1)))
		flush()
	}
	// stays checks that asking n more times merges nothing again.
	stays := func(what string, n int, want ...string) {
		t.Helper()
		values(want...)
		keptAll := func() []string {
			r.merged.mu.Lock()
			defer r.merged.mu.Unlock()
			return r.merged.sets["vhost"].all
		}
		first := keptAll()
		for range n {
			values(want...)
			if unsafe.SliceData(keptAll()) != unsafe.SliceData(first) {
				t.Fatalf("the answer over %s was merged again", what)
			}
		}
	}
	stays("the same 7 files", 20, "a", "b", "c", "d", "e", "f0", "f1", "f2", "f3")
	// A memtable's values between the files': the whole answer is kept
	// (the merge once left the memtable's run it was asked to keep
	// advanced, so the next call never recognized it).
	mustWrite(t, r, pt("b2", 6, fl("v", 1)), pt("e2", 6, fl("v", 1)))
	stays("the same files and memtable", 3, "a", "b", "b2", "c", "d", "e", "e2", "f0", "f1", "f2", "f3")
	if err := r.Truncate(ctx); err != nil {
		t.Fatal(err)
	}
	values()
}
