package datanode_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/gc"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/tenant"
)

// openEngine runs a standalone (a one-node cluster, as the binaries run
// the engine) over s and returns its engine.
func openEngine(t *testing.T, s objstore.Bucket, o servertest.Options) (*servertest.Node, *Engine) {
	t.Helper()
	n := servertest.Start(t, s, o)
	return n, n.Engine()
}

// Engine and WriteOptions read as before the tests moved out of package
// datanode.
type (
	Engine       = datanode.Engine
	WriteOptions = datanode.WriteOptions
)

func pts(n int, field string, v func(i int) row.Value) []row.Point {
	var out []row.Point
	for i := range n {
		out = append(out, row.Point{Tags: []row.Tag{{Name: "host", Value: fmt.Sprintf("h%d", i%37)}}, TS: int64(i), Fields: []row.Field{{Name: field, Value: v(i)}}})
	}
	return out
}

func count(t *testing.T, e *Engine, table string, req scan.Request) (int, []string) {
	t.Helper()
	if req.Start == 0 && req.End == 0 {
		req.Start, req.End = region.AllTime, region.AllTimeEnd
	}
	sc, err := e.Scan(context.Background(), table, req)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	n := 0
	var last string
	for sc.Next() {
		for _, en := range sc.Batch() {
			if en.Series < last {
				t.Fatalf("rows out of series order: %q after %q", en.Series, last)
			}
			last = en.Series
			n++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range sc.Fields() {
		names = append(names, f.Name)
	}
	return n, names
}

func TestMultiRegionTablesPersistAndRoute(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	dir := t.TempDir()
	n, e := openEngine(t, s, servertest.Options{Dir: dir})
	if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "cpu", Regions: 4}); err != nil {
		t.Fatal(err)
	}
	servertest.WaitHosted(t, e, "cpu")
	if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "cpu"}); !errors.Is(err, catalog.ErrTableExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	for _, bad := range []catalog.TableSpec{{Name: "__x"}, {Name: ""}, {Name: "ok", Regions: catalog.MaxRegions + 1}} {
		if _, err := e.CreateTable(ctx, bad); !errors.Is(err, catalog.ErrInvalidTable) {
			t.Fatalf("create %+v: %v", bad, err)
		}
	}
	res, err := e.Write(ctx, "cpu", pts(1000, "v", func(i int) row.Value { return row.FloatValue(float64(i)) }), WriteOptions{})
	if err != nil || res.Written != 1000 {
		t.Fatalf("write: %+v %v", res, err)
	}
	// A column only some regions have yet: the scan still lines fields up.
	if _, err := e.Write(ctx, "cpu", []row.Point{{Tags: []row.Tag{{Name: "host", Value: "h1"}}, TS: 5000, Fields: []row.Field{{Name: "w", Value: row.IntValue(1)}}}}, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	st, _ := e.Stats(ctx, "cpu")
	spread := 0
	for _, r := range st {
		if r.MemtableBytes > 0 {
			spread++
		}
	}
	if len(st) != 4 || spread < 3 {
		t.Fatalf("37 series over 4 regions reached %d regions", spread)
	}
	if n, names := count(t, e, "cpu", scan.Request{}); n != 1001 || strings.Join(names, ",") != "v,w" {
		t.Fatalf("scan: %d rows, fields %v", n, names)
	}
	if n, _ := count(t, e, "cpu", scan.Request{Tags: []row.Tag{{Name: "host", Value: "h1"}}, Fields: []string{"w"}}); n != 28 {
		t.Fatalf("h1 rows: %d", n)
	}
	if err := e.Flush(ctx, "cpu"); err != nil {
		t.Fatal(err)
	}
	n.Stop()
	// Reopen: same tables, same routing, same rows.
	_, e = openEngine(t, s, servertest.Options{Dir: dir})
	servertest.WaitHosted(t, e, "cpu")
	if ts := e.Tables(); len(ts) != 1 || ts[0].Regions != 4 || len(ts[0].Schema.Columns) != 4 {
		t.Fatalf("tables after reopen: %+v", ts)
	}
	if err := e.Delete(ctx, "cpu", []row.Tag{{Name: "host", Value: "h1"}}, 0, 10000); err != nil {
		t.Fatal(err)
	}
	if n, _ := count(t, e, "cpu", scan.Request{}); n != 1001-28 {
		t.Fatalf("after delete: %d rows", n)
	}
	if _, err := e.Scan(ctx, "nope", scan.Request{Start: 0, End: 1}); !errors.Is(err, catalog.ErrTableNotFound) {
		t.Fatalf("scan missing table: %v", err)
	}
}

func TestWriteTablesValidatesEverythingFirst(t *testing.T) {
	ctx := context.Background()
	_, e := openEngine(t, objstoretest.Mem(t), servertest.Options{})
	float := func(i int) row.Value { return row.FloatValue(1) }
	if _, err := e.Write(ctx, "a", pts(3, "x", float), WriteOptions{}); !errors.Is(err, catalog.ErrTableNotFound) {
		t.Fatalf("write without create: %v", err)
	}
	if _, err := e.Write(ctx, "a", pts(3, "x", float), WriteOptions{CreateTable: true}); err != nil {
		t.Fatal(err)
	}
	// catalog.Table b is fine, table a's batch conflicts: nothing is written, not
	// even b (and b is not created).
	_, err := e.WriteTables(ctx, []datanode.TableBatch{
		{Table: "b", Points: pts(3, "y", float)},
		{Table: "a", Points: pts(3, "x", func(int) row.Value { return row.StringValue("s") })},
	}, WriteOptions{CreateTable: true})
	var be *datanode.BatchError
	var ce *schema.ConflictError
	if !errors.As(err, &be) || be.Table != "a" || be.Err.Index != 0 || !errors.As(err, &ce) {
		t.Fatalf("conflict: %v", err)
	}
	if _, err := e.Table("b"); !errors.Is(err, catalog.ErrTableNotFound) {
		t.Fatalf("table b exists after a rejected request: %v", err)
	}
	if n, _ := count(t, e, "a", scan.Request{}); n != 3 {
		t.Fatalf("table a: %d rows", n)
	}
	// One request is one tenant's (its limits are the request's): tables
	// of two tenants in one write are refused, nothing written.
	_, err = e.WriteTables(ctx, []datanode.TableBatch{
		{Table: "a", Points: pts(3, "x", float)},
		{Table: tenant.Qualify("t2", "a"), Points: pts(3, "x", float)},
	}, WriteOptions{CreateTable: true})
	if !errors.Is(err, region.ErrInvalidWrite) || !strings.Contains(err.Error(), "tenants default and t2") {
		t.Fatalf("a write of two tenants' tables: %v", err)
	}
	if n, _ := count(t, e, "a", scan.Request{}); n != 3 {
		t.Fatalf("table a: %d rows after a refused write", n)
	}
	// Table-level types hold across regions: a conflict in another region
	// than the one that has the column is still caught.
	if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "c", Regions: 8}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Write(ctx, "c", pts(1, "z", float), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = e.Write(ctx, "c", pts(37, "z", func(int) row.Value { return row.BoolValue(true) }), WriteOptions{})
	if !errors.As(err, &ce) {
		t.Fatalf("cross-region conflict: %v", err)
	}
}

// A write whose new columns etcd refuses to record (one table's schema
// past etcd's request limit) fails with the table and etcd's reason, and
// writes nothing; the node goes on: that table takes writes of the columns
// it has, the others take new columns, and new tables are created.
func TestARefusedSchemaCommitLeavesTheNodeWriting(t *testing.T) {
	ctx := context.Background()
	_, e := openEngine(t, objstoretest.Mem(t), servertest.Options{})
	float := func(i int) row.Value { return row.FloatValue(float64(i)) }
	for _, table := range []string{"wide", "other"} {
		if _, err := e.Write(ctx, table, pts(10, "v", float), WriteOptions{CreateTable: true}); err != nil {
			t.Fatal(err)
		}
	}
	// About 1.7 MB of column names: past etcd's 1.5 MiB.
	huge := row.Point{Tags: []row.Tag{{Name: "host", Value: "h0"}}, TS: 1000}
	for i := range 21_000 {
		huge.Fields = append(huge.Fields, row.Field{Name: fmt.Sprintf("field_measurement_with_a_long_name_%05d", i), Value: row.FloatValue(1)})
	}
	_, err := e.Write(ctx, "wide", []row.Point{huge}, WriteOptions{})
	t.Logf("the refused write: %.200v", err)
	if err == nil || !strings.Contains(err.Error(), "table wide") || !strings.Contains(err.Error(), "request is too large") {
		t.Fatalf("a write past etcd's request limit: %v", err)
	}
	if tb, _ := e.Table("wide"); len(tb.Schema.Columns) != 3 {
		t.Fatalf("table wide has %d columns after the refused commit", len(tb.Schema.Columns))
	}
	later := func(field string) []row.Point {
		p := pts(10, field, float)
		for i := range p {
			p[i].TS += 100
		}
		return p
	}
	if _, err := e.Write(ctx, "wide", later("v"), WriteOptions{}); err != nil {
		t.Fatalf("a write of the columns the table has: %v", err)
	}
	if _, err := e.Write(ctx, "other", later("w"), WriteOptions{}); err != nil {
		t.Fatalf("a new column of another table: %v", err)
	}
	if _, err := e.Write(ctx, "fresh", pts(10, "v", float), WriteOptions{CreateTable: true}); err != nil {
		t.Fatalf("a new table: %v", err)
	}
	for table, want := range map[string]int{"wide": 20, "other": 20, "fresh": 10} {
		if n, _ := count(t, e, table, scan.Request{}); n != want {
			t.Fatalf("table %s: %d rows, want %d", table, n, want)
		}
	}
}

func TestDropTableDeletesItsObjects(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	dir := t.TempDir()
	// A physical table (created explicitly): its objects are its own.
	n, e := openEngine(t, s, servertest.Options{Dir: dir})
	if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Write(ctx, "gone", pts(100, "v", func(i int) row.Value { return row.IntValue(int64(i)) }), WriteOptions{CreateTable: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	tb, _ := e.Table("gone")
	prefix := fmt.Sprintf("%d/", tb.ID)
	if objs, _ := objstore.ListAll(ctx, s, prefix, 100); len(objs) == 0 {
		t.Fatal("no objects before drop")
	}
	if err := e.DropTable(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	// Metasrv's leader finishes the drop: it has the regions closed, then
	// deletes the objects.
	for deadline := time.Now().Add(time.Minute); ; {
		objs, err := objstore.ListAll(ctx, s, prefix, 100)
		if err == nil && len(objs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d objects left a minute after the drop (%v)", len(objs), err)
		}
		time.Sleep(50 * time.Millisecond) // metasrv sweeps in the background
	}
	if err := e.DropTable(ctx, "gone"); !errors.Is(err, catalog.ErrTableNotFound) {
		t.Fatalf("second drop: %v", err)
	}
	n.Stop()
	_, e = openEngine(t, s, servertest.Options{Dir: dir})
	if len(e.Tables()) != 0 {
		t.Fatal("dropped table came back")
	}
	// A new table gets a new id: no reuse of the dropped table's prefix.
	nt, _ := e.CreateTable(ctx, catalog.TableSpec{Name: "gone"})
	if nt.ID == tb.ID {
		t.Fatal("table id reused")
	}
}

func TestCompactionManualAndAfterFlush(t *testing.T) {
	ctx := context.Background()
	n, e := openEngine(t, objstoretest.Mem(t), servertest.Options{Tune: func(o *datanode.Options) { o.Compaction.Trigger = 1000 }})
	for i := range 5 {
		if _, err := e.Write(ctx, "m", pts(100, "v", func(j int) row.Value { return row.FloatValue(float64(i*1000 + j)) }), WriteOptions{CreateTable: true}); err != nil {
			t.Fatal(err)
		}
		if err := e.Flush(ctx, "m"); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := count(t, e, "m", scan.Request{})
	if st, _ := e.Stats(ctx, "m"); st[0].Files != 5 {
		t.Fatalf("%d files before compaction", st[0].Files)
	}
	res, err := e.Compact(ctx, "m", true)
	if err != nil || len(res) != 1 || len(res[0].Inputs) != 5 {
		t.Fatalf("compact: %+v %v", res, err)
	}
	st, _ := e.Stats(ctx, "m")
	after, _ := count(t, e, "m", scan.Request{})
	if st[0].Files != 1 || st[0].Removed != 5 || after != before {
		t.Fatalf("after compaction: %+v, %d rows (was %d)", st[0], after, before)
	}
	if c, late, err := e.CancelCompaction(ctx, "m"); c != 0 || late != 0 || err != nil {
		t.Fatalf("cancel with nothing running: %d %d %v", c, late, err)
	}
	n.Stop()

	// With the default triggers, the eighth flush into the window being
	// written starts a compaction in the background.
	_, e = openEngine(t, objstoretest.Mem(t), servertest.Options{})
	for i := range 8 {
		if _, err := e.Write(ctx, "m", pts(100, "v", func(j int) row.Value { return row.FloatValue(float64(i*1000 + j)) }), WriteOptions{CreateTable: true}); err != nil {
			t.Fatal(err)
		}
		if err := e.Flush(ctx, "m"); err != nil {
			t.Fatal(err)
		}
	}
	e.WaitCompactions()
	if st, _ := e.Stats(ctx, "m"); st[0].Files != 1 {
		t.Fatalf("automatic compaction: %d files", st[0].Files)
	}
}

// A table's own TWCS window decides what compacts together.
func TestPerTableCompactionWindow(t *testing.T) {
	ctx := context.Background()
	_, e := openEngine(t, objstoretest.Mem(t), servertest.Options{})
	if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "inferred"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "daily", CompactionWindow: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"inferred", "daily"} {
		for h := range 8 { // one flush per hour: 8 files, each a few seconds long
			p := row.Point{Tags: []row.Tag{{Name: "host", Value: "a"}}, TS: int64(h) * int64(time.Hour), Fields: []row.Field{{Name: "v", Value: row.IntValue(1)}}}
			if _, err := e.Write(ctx, table, []row.Point{p, {Tags: p.Tags, TS: p.TS + int64(time.Second), Fields: p.Fields}}, WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := e.Flush(ctx, table); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.WaitCompactions()
	files := func(table string) int { st, _ := e.Stats(ctx, table); return st[0].Files }
	if files("inferred") != 8 {
		t.Fatalf("hourly windows of one file each compacted: %d files", files("inferred"))
	}
	if files("daily") != 1 {
		t.Fatalf("the daily window's 8 files did not compact: %d files", files("daily"))
	}
	if tb, _ := e.Table("daily"); tb.CompactionWindow != 24*time.Hour {
		t.Fatalf("window not recorded: %v", tb.CompactionWindow)
	}
}

// Truncate cancels a compaction paused between its uploads and its commit,
// waits for the cancellation to be acknowledged, and leaves every object
// owned: fast GC then reclaims the outputs and the truncated files.
func TestTruncateCancelsCompaction(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	paused := make(chan struct{})
	var once sync.Once
	_, e := openEngine(t, s, servertest.Options{Tune: func(o *datanode.Options) {
		o.Compaction.Trigger = 1000
		// The test runs fast GC on the region itself, outside the
		// engine's GC lock: no release after the truncate may race it.
		o.Region.OnWALReleased = func(*region.Region) {}
		o.Compaction.OnStage = func(ctx context.Context, st compact.Stage) {
			if st == compact.StageUploaded {
				once.Do(func() { close(paused) })
				<-ctx.Done()
			}
		}
	}})
	// A physical table: a logical one's truncate deletes its series.
	if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "t"}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := e.Write(ctx, "t", pts(100, "v", func(j int) row.Value { return row.FloatValue(float64(i*1000 + j)) }), WriteOptions{CreateTable: true}); err != nil {
			t.Fatal(err)
		}
		if err := e.Flush(ctx, "t"); err != nil {
			t.Fatal(err)
		}
	}
	compacted := make(chan error, 1)
	go func() { _, err := e.Compact(ctx, "t", true); compacted <- err }()
	<-paused
	r := e.LocalRegions("t")[0]
	if err := e.TruncateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	// Truncate returned, so the job has stopped and cleaned up: in the
	// persisted manifest no marker is left, and the only SSTs are the
	// truncated inputs, awaiting GC.
	m, err := manifest.Open(ctx, s, r.ID(), manifest.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	st := m.State()
	m.Close()
	objs, _ := objstore.ListAll(ctx, s, r.ID().SSTPrefix(), 100)
	for _, o := range objs {
		if id, _ := r.ID().ParseFileKey(o.Key); st.Removed[id].ID == "" {
			t.Fatalf("%s is not a truncated input when truncate returns", o.Key)
		}
	}
	if len(st.Pending) != 0 || len(objs) != 8 {
		t.Fatalf("when truncate returns: %d markers, %d objects of 4 files (SSTs and series indexes)", len(st.Pending), len(objs))
	}
	if err := <-compacted; !errors.Is(err, compact.ErrCancelled) {
		t.Fatalf("compaction: %v", err)
	}
	if n, _ := count(t, e, "t", scan.Request{}); n != 0 {
		t.Fatalf("%d rows after truncate", n)
	}
	if _, err := e.Write(ctx, "t", pts(10, "v", func(j int) row.Value { return row.FloatValue(1) }), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, _ := count(t, e, "t", scan.Request{}); n != 10 {
		t.Fatalf("%d rows written after truncate, want 10", n)
	}
	if _, err := gc.Fast(ctx, r, gc.Options{Lingering: -1}); err != nil {
		t.Fatal(err)
	}
	st = r.Manifest()
	if len(st.Files) != 0 || len(st.Removed) != 0 || len(st.Pending) != 0 {
		t.Fatalf("after fast GC: %d files, %d removed, %d pending", len(st.Files), len(st.Removed), len(st.Pending))
	}
	if objs, _ := objstore.ListAll(ctx, s, r.ID().SSTPrefix(), 100); len(objs) != 0 {
		t.Fatalf("%d SSTs left after truncate and fast GC", len(objs))
	}
	if err := e.TruncateTable(ctx, "nope"); !errors.Is(err, catalog.ErrTableNotFound) {
		t.Fatalf("truncate of a missing table: %v", err)
	}
}

// Writes racing to create one table all land: the ones that find it made
// by another while they waited for the lock write to it.
func TestWritesRacingToCreateATableAllLand(t *testing.T) {
	_, e := openEngine(t, objstoretest.Mem(t), servertest.Options{})
	for round := range 5 {
		table := fmt.Sprintf("race%d", round)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = e.Write(context.Background(), table, pts(10, "v", func(int) row.Value { return row.FloatValue(1) }), WriteOptions{CreateTable: true})
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s: write %d: %v", table, i, err)
			}
		}
	}
}
