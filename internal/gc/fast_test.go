package gc

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
)

var rid = layout.RegionID{Table: 4, Region: 2}

// The region engine's regions are what GC runs on.
var _ Region = (*region.Region)(nil)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func keys(t *testing.T, s objstore.Bucket) []string {
	objs, err := objstore.ListAll(context.Background(), s, rid.Prefix(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, strings.TrimPrefix(o.Key, rid.Prefix()))
	}
	return out
}

func count(keys []string, prefix string) int {
	n := 0
	for _, k := range keys {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

func TestFastGCReclaimsEverythingWithoutListing(t *testing.T) {
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	// A crashed flush leaves an uploaded SST owned only by its marker.
	crashy := faultstore.New(inner)
	old, err := region.Open(ctx, crashy, rid, region.Options{Create: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	pt := func(ts int64) row.Point {
		return row.Point{Tags: []row.Tag{{Name: "h", Value: "a"}}, TS: ts, Fields: []row.Field{{Name: "v", Value: row.FloatValue(float64(ts))}}}
	}
	if _, err := old.Write(ctx, []row.Point{pt(1)}); err != nil {
		t.Fatal(err)
	}
	// Crash at the flush's second manifest write: its edit, after the
	// marker and the upload.
	manifestPut := func(c faultstore.Call) bool { return c.Op == objstore.OpPut && strings.Contains(c.Key, "/manifest/") }
	crashy.AddRule(faultstore.Rule{Match: manifestPut, N: 2, Action: faultstore.Crash})
	if err := old.Flush(ctx); err == nil {
		t.Fatal("the flush should have crashed at its commit")
	}
	if err := old.Close(ctx, region.CloseOptions{}); err != nil {
		t.Fatal(err)
	}

	clk := &clock{t: time.Now()} // after the crashed owner's reservation
	store := objstore.New(inner, objstore.Options{})
	r, err := region.Open(ctx, store, rid, region.Options{Logger: quiet, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close(ctx, region.CloseOptions{}) }()
	if len(r.Manifest().Pending) != 1 {
		t.Fatalf("want the crashed flush's marker, have %v", r.Manifest().Pending)
	}
	for i := range 4 {
		if _, err := r.Write(ctx, []row.Point{pt(int64(10 + i))}); err != nil {
			t.Fatal(err)
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := compact.NewJob(r, compact.SortedFiles(r.Manifest().Files), compact.Options{}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	before := keys(t, inner)
	st := r.Manifest()
	// The crashed flush's row replays into the first of 4 flushes: 4
	// removed inputs, 1 output (each an SST and its series index), and
	// the crashed flush's upload (both too).
	if len(st.Removed) != 4 || count(before, "sst/") != 12 {
		t.Fatalf("setup: %d removed, keys %v", len(st.Removed), before)
	}

	// Too young: only the WAL goes. The crashed owner's marker waits for
	// its upload window: that owner may only be paused.
	rep, err := Fast(ctx, r, Options{DryRun: true})
	if err != nil || len(rep.RemovedFiles) != 0 || len(rep.PendingJobs) != 0 || rep.Waiting != 1 || rep.Stream.Deleted == 0 {
		t.Fatalf("dry run: %+v %v", rep, err)
	}
	if !slices.Equal(keys(t, inner), before) {
		t.Fatal("a dry run deleted something")
	}
	clk.add(2 * time.Hour)
	lists := store.Requests()[objstore.OpList]
	rep, err = Fast(ctx, r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := store.Requests()[objstore.OpList] - lists; n != 0 {
		t.Fatalf("fast GC issued %d LIST requests", n)
	}
	if len(rep.RemovedFiles) != 4 || len(rep.PendingFiles) != 1 || rep.Bytes == 0 {
		t.Fatalf("report %+v", rep)
	}
	after := keys(t, inner)
	st = r.Manifest()
	if count(after, "sst/") != 2 || len(st.Removed) != 0 || len(st.Pending) != 0 {
		t.Fatalf("after GC: keys %v, state removed %d pending %d", after, len(st.Removed), len(st.Pending))
	}
	// WAL: only stream segments the region needs, fences, and the newest
	// segment of its live stream (kept until sealed) remain.
	streamObjs, err := objstore.ListAll(ctx, inner, layout.StreamsPrefix, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range streamObjs {
		stream, n, _ := layout.ParseStreamKey(o.Key)
		next, live := r.WALStream().Next(stream)
		if !st.NeedsStream(stream, n) && !slices.Contains(st.StreamFences, manifest.StreamRef{Stream: stream, End: n}) && (!live || n != next-1) {
			t.Fatalf("WAL stream segment %s survived", o.Key)
		}
	}
	// Idempotent: nothing more to do, no requests.
	rep, err = Fast(ctx, r, Options{})
	if err != nil || rep.Requests != 0 {
		t.Fatalf("second run: %+v %v", rep, err)
	}
	// The data is intact.
	sc, _ := r.Scan(ctx, scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
	n := 0
	for sc.Next() {
		n += len(sc.Batch())
	}
	sc.Close()
	if n != 5 {
		t.Fatalf("%d rows after GC", n)
	}
}

func TestFastGCSkipsPinnedAndRunning(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	clk := &clock{t: time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)}
	r, err := region.Open(ctx, s, rid, region.Options{Create: true, Logger: quiet, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close(ctx, region.CloseOptions{}) }()
	for i := range 2 {
		if _, err := r.Write(ctx, []row.Point{{Tags: []row.Tag{{Name: "h", Value: "a"}}, TS: int64(i), Fields: []row.Field{{Name: "v", Value: row.IntValue(1)}}}}); err != nil {
			t.Fatal(err)
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := r.Scan(ctx, scan.Request{Start: region.AllTime, End: region.AllTimeEnd}) // pins both files
	if err != nil {
		t.Fatal(err)
	}
	if _, err := compact.NewJob(r, compact.SortedFiles(r.Manifest().Files), compact.Options{}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	clk.add(2 * time.Hour)
	rep, _ := Fast(ctx, r, Options{})
	if len(rep.RemovedFiles) != 0 {
		t.Fatalf("pinned files deleted: %v", rep.RemovedFiles)
	}
	for sc.Next() {
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("the pinned scan failed: %v", err)
	}
	sc.Close()
	if rep, _ = Fast(ctx, r, Options{}); len(rep.RemovedFiles) != 2 {
		t.Fatalf("after the scan: %v", rep.RemovedFiles)
	}
	// A marker whose job runs in this process is left alone.
	if err := r.Commit(ctx, manifest.Action{Pending: &manifest.PendingOutputs{JobID: "compact-live", FileIDs: []string{"01LIVE"}, Epoch: r.Epoch(), CreatedAt: clk.now()}}); err != nil {
		t.Fatal(err)
	}
	rep, _ = Fast(ctx, r, Options{JobRunning: func(job string) bool { return job == "compact-live" }})
	if len(rep.PendingJobs) != 0 {
		t.Fatalf("running job's marker resolved: %v", rep.PendingJobs)
	}
	if rep, _ = Fast(ctx, r, Options{}); len(rep.PendingJobs) != 1 {
		t.Fatalf("dead job's marker kept: %v", rep)
	}
}

// A flush whose edit landed but whose outcome is still unknown to the
// region: fast GC must not take the flush's marker for a dead job's and
// delete its (live) output. It settles the manifest first.
func TestFastGCSettlesBeforeDeleting(t *testing.T) {
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	fs := faultstore.New(inner)
	r, err := region.Open(ctx, fs, rid, region.Options{Create: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close(ctx, region.CloseOptions{}) }()
	if _, err := r.Write(ctx, []row.Point{{Tags: []row.Tag{{Name: "h", Value: "a"}}, TS: 1, Fields: []row.Field{{Name: "v", Value: row.FloatValue(1)}}}}); err != nil {
		t.Fatal(err)
	}
	// The flush's edit (its second manifest write) lands but reports an
	// error, and the read-back fails: the outcome stays unknown.
	manifestPut := func(c faultstore.Call) bool { return c.Op == objstore.OpPut && strings.Contains(c.Key, "/manifest/") }
	manifestGet := func(c faultstore.Call) bool { return c.Op == objstore.OpGet && strings.Contains(c.Key, "/manifest/") }
	fs.AddRule(faultstore.Rule{Match: manifestPut, N: 2, Action: faultstore.FailAfter})
	fs.AddRule(faultstore.Rule{Match: manifestGet, N: 1, Action: faultstore.Fail}) // the commit's read-back
	fs.AddRule(faultstore.Rule{Match: manifestGet, N: 2, Action: faultstore.Fail}) // the flush's settle
	if err := r.Flush(ctx); err == nil {
		t.Fatal("the flush should have reported its unknown outcome")
	}
	if _, err := Fast(ctx, r, Options{Lingering: -1}); err != nil {
		t.Fatal(err)
	}
	st := r.Manifest()
	if len(st.Files) != 1 {
		t.Fatalf("after GC: %d live files, want the flushed one", len(st.Files))
	}
	for id := range st.Files {
		if _, err := inner.Attributes(ctx, rid.SSTKey(id)); err != nil {
			t.Fatalf("live file %s: %v (GC deleted it as a dead job's output)", id, err)
		}
	}
}
