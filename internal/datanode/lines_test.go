package datanode_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/server/servertest"
)

// linesBase is the first timestamp the tests of logical tables write (ns).
const linesBase = int64(1_700_000_000) * int64(time.Second)

// writeLines posts line protocol to the node's /write.
func writeLines(t *testing.T, n *servertest.Node, body string) {
	t.Helper()
	resp, err := http.Post("http://"+n.HTTPAddr()+"/write?db=test", "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("write: %s: %s", resp.Status, b)
	}
}

// measurement i of the many-measurements test: series host=h0..h2, two
// rows each; field x is a float in even measurements and an integer in
// odd ones; every third also has a string field s.
func measurementLines(i int) string {
	var b strings.Builder
	for h := range 3 {
		for k := range 2 {
			ts := linesBase + int64(k)*int64(time.Second)
			x := fmt.Sprintf("%d.5", i*10+h*2+k)
			if i%2 == 1 {
				x = fmt.Sprintf("%di", i*10+h*2+k)
			}
			fmt.Fprintf(&b, "m%d,host=h%d x=%s", i, h, x)
			if i%3 == 0 {
				fmt.Fprintf(&b, `,s="v%d"`, h)
			}
			fmt.Fprintf(&b, " %d\n", ts)
		}
	}
	return b.String()
}

// checkMeasurement reads measurement i back through the engine.
func checkMeasurement(t *testing.T, e *Engine, i int) {
	t.Helper()
	name := fmt.Sprintf("m%d", i)
	tb, err := e.Table(name)
	if err != nil {
		t.Fatal(err)
	}
	if !tb.Logical || tb.Regions != 0 {
		t.Fatalf("%s: logical %v, %d regions", name, tb.Logical, tb.Regions)
	}
	sc, err := e.Scan(context.Background(), name, scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	want := []schema.Field{{Name: "x", Kind: row.Float}}
	if i%2 == 1 {
		want[0].Kind = row.Int
	}
	if i%3 == 0 {
		want = append(want, schema.Field{Name: "s", Kind: row.String})
	}
	if !slices.Equal(sc.Fields(), want) {
		t.Fatalf("%s: fields %v, want %v", name, sc.Fields(), want)
	}
	var got []string
	for sc.Next() {
		for _, en := range sc.Batch() {
			var vals []string
			for j := range want {
				vals = append(vals, en.Field(j).String())
			}
			got = append(got, fmt.Sprintf("%s %d %s", row.FormatSeries(en.Series), (en.TS-linesBase)/int64(time.Second), strings.Join(vals, " ")))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var exp []string
	for h := range 3 {
		for k := range 2 {
			v := row.FloatValue(float64(i*10+h*2+k) + 0.5).String()
			if i%2 == 1 {
				v = row.IntValue(int64(i*10 + h*2 + k)).String()
			}
			if i%3 == 0 {
				v += " " + row.StringValue(fmt.Sprintf("v%d", h)).String()
			}
			exp = append(exp, fmt.Sprintf("host=h%d %d %s", h, k, v))
		}
	}
	if !slices.Equal(got, exp) {
		t.Fatalf("%s reads back\n%s\nwant\n%s", name, strings.Join(got, "\n"), strings.Join(exp, "\n"))
	}
}

// promQuery runs an instant PromQL query at ts (ns) and returns its
// vector as "labels value" lines, sorted.
func promQuery(t *testing.T, n *servertest.Node, q string, ts int64) []string {
	t.Helper()
	u := fmt.Sprintf("http://%s/api/v1/query?query=%s&time=%d", n.HTTPAddr(), url.QueryEscape(q), ts/int64(time.Second))
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string
		Error  string
		Data   struct {
			Result []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Status != "success" {
		t.Fatalf("query %s: %v %s %s", q, err, out.Status, out.Error)
	}
	var lines []string
	for _, r := range out.Data.Result {
		var ls []string
		for k, v := range r.Metric {
			ls = append(ls, k+"="+v)
		}
		slices.Sort(ls)
		lines = append(lines, fmt.Sprintf("%s %v", strings.Join(ls, ","), r.Value[1]))
	}
	slices.Sort(lines)
	return lines
}

// objectKeys lists every object of the store.
func objectKeys(t *testing.T, s objstore.Bucket) map[string]bool {
	t.Helper()
	objs, err := objstore.ListAll(context.Background(), s, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, o := range objs {
		out[o.Key] = true
	}
	return out
}

// manyMeasurements writes n measurements through /write and flushes,
// checks that they cost no region, memtable or object of their own, and
// reads every one back. It returns the objects the flush wrote.
func manyMeasurements(t *testing.T, n int) int {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	// No release of the WAL after the flush: its delta would land in the
	// listing below or not, by timing.
	node, e := openEngine(t, s, servertest.Options{Tune: func(o *datanode.Options) {
		o.LinesRegions = 2
		o.Region.OnWALReleased = func(*region.Region) {}
	}})
	var body strings.Builder
	for i := range n {
		body.WriteString(measurementLines(i))
		if body.Len() > 1<<20 || i == n-1 {
			writeLines(t, node, body.String())
			body.Reset()
		}
	}
	lines, err := e.Table(catalog.LinesTable)
	if err != nil {
		t.Fatal(err)
	}
	if lines.Regions != 2 {
		t.Fatalf("%s has %d regions", catalog.LinesTable, lines.Regions)
	}
	servertest.WaitHosted(t, e, catalog.LinesTable)
	if h := e.Hosted(); len(h) != 2 {
		t.Fatalf("%d measurements: %d regions open (%v), want the 2 of %s", n, len(h), h, catalog.LinesTable)
	}
	if tables := e.Tables(); len(tables) != n {
		t.Fatalf("%d tables listed, want %d", len(tables), n)
	}
	before := objectKeys(t, s)
	if err := e.Flush(ctx, ""); err != nil {
		t.Fatal(err)
	}
	written := 0
	for k := range objectKeys(t, s) {
		if !before[k] {
			written++
		}
	}
	for i := range n {
		checkMeasurement(t, e, i)
	}
	// Through PromQL: field x of m<i> is the metric m<i>_x.
	last := linesBase + int64(time.Second)
	for _, i := range []int{0, 1, n / 2, n - 1} {
		got := promQuery(t, node, fmt.Sprintf("m%d_x", i), last)
		var want []string
		for h := range 3 {
			v := fmt.Sprint(float64(i*10+h*2+1) + 0.5)
			if i%2 == 1 {
				v = fmt.Sprint(i*10 + h*2 + 1)
			}
			want = append(want, fmt.Sprintf("__name__=m%d_x,host=h%d %s", i, h, v))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("m%d_x: %v, want %v", i, got, want)
		}
	}
	// Every measurement at once: one query whose name matcher selects
	// them all.
	got := promQuery(t, node, `{__name__=~"m[0-9]+_x"}`, last)
	var want []string
	for i := range n {
		for h := range 3 {
			v := fmt.Sprint(float64(i*10+h*2+1) + 0.5)
			if i%2 == 1 {
				v = fmt.Sprint(i*10 + h*2 + 1)
			}
			want = append(want, fmt.Sprintf("__name__=m%d_x,host=h%d %s", i, h, v))
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("every m<i>_x: %d series, want %d", len(got), len(want))
	}
	t.Logf("%d measurements: %d regions, %d objects written by the flush", n, len(e.Hosted()), written)
	return written
}

func TestMeasurementsShareRegions(t *testing.T) {
	few := manyMeasurements(t, 20)
	many := manyMeasurements(t, 2000)
	if few != many {
		t.Fatalf("a flush wrote %d objects for 20 measurements, %d for 2,000", few, many)
	}
}

func TestLogicalTablesTypeTheirFields(t *testing.T) {
	ctx := context.Background()
	_, e := openEngine(t, objstoretest.Mem(t), servertest.Options{})
	write := func(table string, v row.Value) error {
		_, err := e.Write(ctx, table, []row.Point{{Tags: []row.Tag{{Name: "k", Value: "v"}}, TS: 1, Fields: []row.Field{{Name: "x", Value: v}}}}, WriteOptions{CreateTable: true})
		return err
	}
	if err := write("a", row.FloatValue(1.5)); err != nil {
		t.Fatal(err)
	}
	if err := write("b", row.IntValue(7)); err != nil {
		t.Fatal(err)
	}
	var ce *schema.ConflictError
	if err := write("a", row.IntValue(2)); !errors.As(err, &ce) {
		t.Fatalf("a's float x written as an integer: %v", err)
	}
	for table, want := range map[string]row.Value{"a": row.FloatValue(1.5), "b": row.IntValue(7)} {
		sc, err := e.Scan(ctx, table, scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
		if err != nil {
			t.Fatal(err)
		}
		var got []row.Entry
		for sc.Next() {
			got = append(got, sc.Batch()...)
		}
		sc.Close()
		if len(got) != 1 || got[0].Field(0) != want || row.FormatSeries(got[0].Series) != "k=v" || sc.Fields()[0].Kind != want.Kind() {
			t.Fatalf("%s: %+v (fields %v)", table, got, sc.Fields())
		}
	}
	// A tag named as LinesTable's is refused in a logical table.
	if _, err := e.Write(ctx, "a", []row.Point{{Tags: []row.Tag{{Name: catalog.TableTag, Value: "1"}}, TS: 2, Fields: []row.Field{{Name: "x", Value: row.FloatValue(1)}}}}, WriteOptions{}); !errors.Is(err, region.ErrInvalidWrite) {
		t.Fatalf("a write with the reserved tag: %v", err)
	}
	// LinesTable is not written, listed, dropped or created by name.
	if _, err := e.Write(ctx, catalog.LinesTable, pts(1, "x:float64", func(int) row.Value { return row.FloatValue(1) }), WriteOptions{}); !errors.Is(err, catalog.ErrInvalidTable) {
		t.Fatalf("a write to %s: %v", catalog.LinesTable, err)
	}
	if err := e.DropTable(ctx, catalog.LinesTable); !errors.Is(err, catalog.ErrInvalidTable) {
		t.Fatalf("drop %s: %v", catalog.LinesTable, err)
	}
	for _, tb := range e.Tables() {
		if tb.Name == catalog.LinesTable {
			t.Fatalf("%s listed", tb.Name)
		}
	}
}

func TestTSBSCPUAsALogicalTable(t *testing.T) {
	ctx := context.Background()
	node, e := openEngine(t, objstoretest.Mem(t), servertest.Options{})
	fields := []string{"usage_user", "usage_system", "usage_idle", "usage_nice", "usage_iowait", "usage_irq", "usage_softirq", "usage_steal", "usage_guest", "usage_guest_nice"}
	var b strings.Builder
	for h := range 5 {
		for k := range 3 {
			fmt.Fprintf(&b, "cpu,hostname=host_%d,region=eu-west-1,datacenter=eu-west-1a,rack=%d,os=Ubuntu16.04LTS,arch=x64,team=SF,service=%d,service_version=1,service_environment=test ", h, h%3, h%2)
			for j, f := range fields {
				if j > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "%s=%d", f, h*100+k*10+j)
			}
			fmt.Fprintf(&b, " %d\n", linesBase+int64(k)*int64(10*time.Second))
		}
	}
	writeLines(t, node, b.String())
	if err := e.Flush(ctx, ""); err != nil {
		t.Fatal(err)
	}
	sc, err := e.Scan(ctx, "cpu", scan.Request{Start: region.AllTime, End: region.AllTimeEnd, Tags: []row.Tag{{Name: "hostname", Value: "host_3"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	var names []string
	for _, f := range sc.Fields() {
		names = append(names, f.Name)
	}
	if !slices.Equal(names, fields) {
		t.Fatalf("cpu's fields: %v", names)
	}
	rows := 0
	for sc.Next() {
		for _, en := range sc.Batch() {
			k := int((en.TS - linesBase) / int64(10*time.Second))
			if want := "arch=x64,datacenter=eu-west-1a,hostname=host_3,os=Ubuntu16.04LTS,rack=0,region=eu-west-1,service=1,service_environment=test,service_version=1,team=SF"; row.FormatSeries(en.Series) != want {
				t.Fatalf("series %s", row.FormatSeries(en.Series))
			}
			for j := range fields {
				if v := en.Field(j); v != row.FloatValue(float64(300+k*10+j)) {
					t.Fatalf("row %d field %s: %v", k, fields[j], v)
				}
			}
			rows++
		}
	}
	if err := sc.Err(); err != nil || rows != 3 {
		t.Fatalf("%d rows of host_3 (%v)", rows, err)
	}
	got := promQuery(t, node, `cpu_usage_idle{hostname="host_4"}`, linesBase+int64(20*time.Second))
	if len(got) != 1 || !strings.HasSuffix(got[0], " 422") {
		t.Fatalf("cpu_usage_idle of host_4: %v", got)
	}
}

// scanAll returns the rows of table as "series ts fields" lines.
func scanAll(t *testing.T, e *Engine, table string) ([]string, error) {
	t.Helper()
	sc, err := e.Scan(context.Background(), table, scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	var out []string
	for sc.Next() {
		for _, en := range sc.Batch() {
			var vals []string
			for j := range sc.Fields() {
				vals = append(vals, en.Field(j).String())
			}
			out = append(out, fmt.Sprintf("%s %d %s", row.FormatSeries(en.Series), en.TS, strings.Join(vals, " ")))
		}
	}
	return out, sc.Err()
}

func TestOldStoreWithPhysicalMeasurementsOpens(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	dir := t.TempDir()
	// Written as before logical tables: each measurement a table of its own.
	n, e := openEngine(t, s, servertest.Options{Dir: dir, Tune: func(o *datanode.Options) { o.PhysicalTables = true }})
	writeLines(t, n, "old,host=a x=1.5 10\nold,host=b x=2.5 20\nolder,host=a y=3i 30\n")
	if err := e.Flush(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	n.Stop()
	n, e = openEngine(t, s, servertest.Options{Dir: dir})
	for table, want := range map[string][]string{"old": {"host=a 10 1.5", "host=b 20 2.5"}, "older": {"host=a 30 3"}} {
		tb, err := e.Table(table)
		if err != nil || tb.Logical || tb.Regions == 0 {
			t.Fatalf("%s: %+v %v", table, tb, err)
		}
		got, err := scanAll(t, e, table)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s: %v (%v), want %v", table, got, err, want)
		}
	}
	// The old tables keep taking writes; a new measurement is logical.
	writeLines(t, n, "old,host=c x=4.5 40\nnewer,host=a z=1i 50\n")
	if got, _ := scanAll(t, e, "old"); len(got) != 3 {
		t.Fatalf("old after a write: %v", got)
	}
	if tb, err := e.Table("newer"); err != nil || !tb.Logical {
		t.Fatalf("newer: %+v %v", tb, err)
	}
	if got, err := scanAll(t, e, "newer"); err != nil || !slices.Equal(got, []string{"host=a 50 1"}) {
		t.Fatalf("newer: %v %v", got, err)
	}
	if got := promQuery(t, n, "old_x", 40); !slices.Equal(got, []string{"__name__=old_x,host=a 1.5", "__name__=old_x,host=b 2.5", "__name__=old_x,host=c 4.5"}) {
		t.Fatalf("old_x: %v", got)
	}
}

func TestDropAndTruncateOfALogicalTable(t *testing.T) {
	ctx := context.Background()
	n, e := openEngine(t, objstoretest.Mem(t), servertest.Options{})
	writeLines(t, n, "gone,host=a x=1 10\ngone,host=b x=2 20\nkept,host=a x=3 30\n")
	if err := e.Flush(ctx, ""); err != nil {
		t.Fatal(err)
	}
	writeLines(t, n, "gone,host=c x=4 40\n") // one row in a memtable
	old, _ := e.Table("gone")
	if err := e.DropTable(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := scanAll(t, e, "gone"); !errors.Is(err, catalog.ErrTableNotFound) {
		t.Fatalf("scan of a dropped table: %v", err)
	}
	// Metasrv forgets it; a write then creates a new, empty table.
	for deadline := time.Now().Add(time.Minute); ; {
		_, err := e.Write(ctx, "gone", []row.Point{{Tags: []row.Tag{{Name: "host", Value: "a"}}, TS: 50, Fields: []row.Field{{Name: "x", Value: row.FloatValue(5)}}}}, WriteOptions{CreateTable: true})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("write after the drop: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	nt, _ := e.Table("gone")
	if nt.ID == old.ID || !nt.Logical {
		t.Fatalf("new table %+v, old id %d", nt, old.ID)
	}
	if got, err := scanAll(t, e, "gone"); err != nil || !slices.Equal(got, []string{"host=a 50 5"}) {
		t.Fatalf("the new table: %v %v", got, err)
	}
	// The old rows were deleted from LinesTable, not only hidden.
	if got, err := scanAll(t, e, catalog.LinesTable); err != nil || len(got) != 2 {
		t.Fatalf("%s holds %v (%v), want kept's row and the new gone's", catalog.LinesTable, got, err)
	}
	// Truncate: the rows before it go, the table stays and takes more.
	if err := e.TruncateTable(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if got, err := scanAll(t, e, "gone"); err != nil || len(got) != 0 {
		t.Fatalf("after truncate: %v %v", got, err)
	}
	writeLines(t, n, "gone,host=z x=6 60\n")
	if got, err := scanAll(t, e, "gone"); err != nil || !slices.Equal(got, []string{"host=z 60 6"}) {
		t.Fatalf("after truncate and a write: %v %v", got, err)
	}
	if got, err := scanAll(t, e, "kept"); err != nil || !slices.Equal(got, []string{"host=a 30 3"}) {
		t.Fatalf("kept: %v %v", got, err)
	}
	// Delete of one series.
	if err := e.Delete(ctx, "kept", []row.Tag{{Name: "host", Value: "a"}}, 0, 100); err != nil {
		t.Fatal(err)
	}
	if got, err := scanAll(t, e, "kept"); err != nil || len(got) != 0 {
		t.Fatalf("kept after a delete: %v %v", got, err)
	}
}

// Rows of a dropped logical table that landed after its drop's tombstones
// (a write that raced the drop) are never read, and a compaction of
// __lines drops them.
func TestCompactionDropsRowsOfDroppedLogicalTables(t *testing.T) {
	ctx := context.Background()
	n, e := openEngine(t, objstoretest.Mem(t), servertest.Options{})
	writeLines(t, n, "gone,host=a x=1 10\nkept,host=a x=3 30\n")
	old, _ := e.Table("gone")
	if err := e.DropTable(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	// Once the drop is done, a new table of the name does not see the
	// old one's rows.
	for deadline := time.Now().Add(time.Minute); ; {
		_, err := e.Write(ctx, "gone", []row.Point{{Tags: []row.Tag{{Name: "host", Value: "b"}}, TS: 20, Fields: []row.Field{{Name: "x", Value: row.FloatValue(2)}}}}, WriteOptions{CreateTable: true})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("write after the drop: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // metasrv finishes the drop in the background
	}
	// The raced write: a row of the old id, straight into __lines, after
	// the drop's tombstones.
	servertest.WaitHosted(t, e, catalog.LinesTable)
	late := []row.Point{{Tags: []row.Tag{{Name: catalog.TableTag, Value: fmt.Sprint(old.ID)}, {Name: "host", Value: "late"}}, TS: 40,
		Fields: []row.Field{{Name: catalog.LinesColumn("x", row.Float), Value: row.FloatValue(4)}}}}
	if _, err := e.LocalRegions(catalog.LinesTable)[0].Write(ctx, late); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(ctx, ""); err != nil {
		t.Fatal(err)
	}
	oldRows := func() int {
		t.Helper()
		sc, err := e.Scan(ctx, catalog.LinesTable, scan.Request{Start: region.AllTime, End: region.AllTimeEnd, Tags: []row.Tag{{Name: catalog.TableTag, Value: fmt.Sprint(old.ID)}}})
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		rows := 0
		for sc.Next() {
			rows += len(sc.Batch())
		}
		return rows
	}
	if got := oldRows(); got != 1 {
		t.Fatalf("%d rows of the dropped table's id before compaction, want the late one", got)
	}
	if got, err := scanAll(t, e, "gone"); err != nil || !slices.Equal(got, []string{"host=b 20 2"}) {
		t.Fatalf("the new gone: %v %v", got, err)
	}
	// A second file, so that the compaction has inputs to merge.
	writeLines(t, n, "kept,host=a x=5 50\n")
	if err := e.Flush(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if res, err := e.Compact(ctx, catalog.LinesTable, true); err != nil || len(res) == 0 {
		t.Fatalf("compaction: %v %v", res, err)
	}
	if got := oldRows(); got != 0 {
		t.Fatalf("%d rows of the dropped table's id after compaction", got)
	}
	for table, want := range map[string][]string{"gone": {"host=b 20 2"}, "kept": {"host=a 30 3", "host=a 50 5"}} {
		if got, err := scanAll(t, e, table); err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s after compaction: %v %v", table, got, err)
		}
	}
}

// A logical table's tag values come from LinesTable's postings, among
// the series of its table tag only: the memtables', the files', and both;
// its tag names, and a filter's values, from a listing of those series.
func TestLogicalTableTagValuesFromPostings(t *testing.T) {
	ctx := context.Background()
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	e := n.Engine()
	values := func(table string, want ...string) {
		t.Helper()
		vals, err := e.TagValues(ctx, table, "host", scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
		if err != nil || !slices.Equal(vals, want) {
			t.Fatalf("%s: %v (%v), want %v", table, vals, err, want)
		}
	}
	names := func(table string, start int64, want ...string) {
		t.Helper()
		if names, err := e.TagNames(ctx, table, scan.Request{Start: start, End: region.AllTimeEnd}); err != nil || !slices.Equal(names, want) {
			t.Fatalf("%s: tag names from %d: %v (%v), want %v", table, start, names, err, want)
		}
	}
	writeLines(t, n, fmt.Sprintf("a,host=x v=1 %d\na,host=y v=1 %d\nb,host=z v=1 %d\nb,dc=w v=1 %d\n", linesBase, linesBase, linesBase, linesBase))
	values("a", "x", "y") // memtables
	values("b", "z")
	names("a", region.AllTime, "host")
	names("b", region.AllTime, "dc", "host")
	if err := e.Flush(ctx, "a"); err != nil { // every logical table's: LinesTable's
		t.Fatal(err)
	}
	values("a", "x", "y") // files
	writeLines(t, n, fmt.Sprintf("a,host=v v=1 %d\nb,host=y v=1 %d\n", linesBase+1, linesBase+1))
	values("a", "v", "x", "y") // both
	values("b", "y", "z")
	names("b", region.AllTime, "dc", "host")
	names("b", linesBase+1, "host") // dc=w's only row is older
	vals, err := e.TagValues(ctx, "a", "host", scan.Request{Start: linesBase + 1, End: region.AllTimeEnd})
	if err != nil || !slices.Equal(vals, []string{"v"}) {
		t.Fatalf("a's hosts with rows from %d: %v (%v)", linesBase+1, vals, err)
	}
	// A filter of a logical table, beyond its table tag.
	for _, req := range []scan.Request{{Tags: []row.Tag{{Name: "host", Value: "y"}}}, {In: []row.TagIn{{Name: "host", Values: []string{"y", "q"}}}}} {
		req.Start, req.End = region.AllTime, region.AllTimeEnd
		if vals, err := e.TagValues(ctx, "b", "host", req); err != nil || !slices.Equal(vals, []string{"y"}) {
			t.Fatalf("b's hosts of the series %v, %v selects: %v (%v)", req.Tags, req.In, vals, err)
		}
	}
}
