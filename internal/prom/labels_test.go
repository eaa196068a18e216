package prom_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// readCounter counts reads of SSTs and of series indexes while on.
type readCounter struct {
	on             atomic.Bool
	parquet, index atomic.Int64
}

func (c *readCounter) hook(call faultstore.Call) {
	if !c.on.Load() || call.Op != objstore.OpGet {
		return
	}
	switch {
	case strings.HasSuffix(call.Key, ".parquet"):
		c.parquet.Add(1)
	case strings.HasSuffix(call.Key, ".series"):
		c.index.Add(1)
	}
}

// The label and series endpoints answer from the regions' series indexes
// and memtables: after a restart (nothing cached), with flushed and
// compacted files and series only in memtables, they read no SST, and
// their answers (time ranges included) are exact. The SST cache is off, so
// a read the endpoints made would reach the store and be counted; a data
// query afterwards shows that it would.
func TestLabelsReadNoSST(t *testing.T) {
	var reads readCounter
	fs := faultstore.New(objstoretest.Mem(t))
	fs.Hook = reads.hook
	dir := t.TempDir()
	opts := servertest.Options{Dir: dir,
		Config: func(c *server.Config) { c.DefaultRegions, c.CacheBytes = 2, -1 }}
	n := servertest.Start(t, fs, opts)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	write := func(n *servertest.Node, hosts []int, from, to int64) {
		t.Helper()
		var b strings.Builder
		for _, h := range hosts {
			for ts := from; ts < to; ts += 10 {
				fmt.Fprintf(&b, "cpu,hostname=host_%d,rack=r%d usage_user=%d %d\n", h, h%7, h, ts)
			}
		}
		resp, err := http.Post("http://"+n.HTTPAddr()+"/write?db=x&precision=s", "text/plain", strings.NewReader(b.String()))
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("write: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	var stored []int
	for h := range 200 {
		stored = append(stored, h)
	}
	ctx := context.Background()
	write(n, stored, t0, t0+300)
	if err := n.Engine().Flush(ctx, "cpu"); err != nil {
		t.Fatal(err)
	}
	write(n, stored, t0+300, t0+600)
	if err := n.Engine().Flush(ctx, "cpu"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Engine().Compact(ctx, "cpu", true); err != nil {
		t.Fatal(err)
	}
	n.Stop()
	n = servertest.Start(t, fs, opts)
	servertest.WaitHosted(t, n.Engine(), "cpu")
	fresh := []int{200, 201, 202}
	write(n, fresh, t0+7200, t0+7260) // only in memtables

	c := client{t, "http://" + n.HTTPAddr()}
	values := func(path string, q url.Values) []string {
		t.Helper()
		code, r := c.get(path, q)
		var out []string
		if err := json.Unmarshal(r.Data, &out); code != 200 || err != nil {
			t.Fatalf("%s %v: %d %+v", path, q, code, r)
		}
		return out
	}
	hostnames := func(hosts ...[]int) []string {
		var out []string
		for _, hs := range hosts {
			for _, h := range hs {
				out = append(out, fmt.Sprintf("host_%d", h))
			}
		}
		slices.Sort(out)
		return out
	}
	sec := func(s int64) string { return strconv.FormatInt(s, 10) }

	reads.on.Store(true)
	if got := values("/api/v1/label/hostname/values", nil); !slices.Equal(got, hostnames(stored, fresh)) {
		t.Fatalf("hostname values: %d, want %d", len(got), len(stored)+len(fresh))
	}
	loaded := reads.index.Load()
	// Every rack is in both regions: their answers merge, sorted, each
	// value once.
	if got := values("/api/v1/label/rack/values", nil); !slices.Equal(got, []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6"}) {
		t.Fatalf("rack values: %v", got)
	}
	if got := values("/api/v1/labels", nil); !slices.Equal(got, []string{"__name__", "hostname", "rack"}) {
		t.Fatalf("labels: %v", got)
	}
	// A window holding only the memtables' rows, and one holding only the
	// files'.
	if got := values("/api/v1/label/hostname/values", url.Values{"start": {sec(t0 + 7000)}, "end": {sec(t0 + 8000)}}); !slices.Equal(got, hostnames(fresh)) {
		t.Fatalf("hostname values in the memtables' window: %v", got)
	}
	if got := values("/api/v1/label/hostname/values", url.Values{"start": {sec(t0)}, "end": {sec(t0 + 600)}}); !slices.Equal(got, hostnames(stored)) {
		t.Fatalf("hostname values in the files' window: %d", len(got))
	}
	if got := values("/api/v1/label/rack/values", url.Values{"match[]": {`cpu_usage_user{hostname=~"host_3|host_4|host_202"}`}}); !slices.Equal(got, []string{"r3", "r4", "r6"}) {
		t.Fatalf("rack values of three hosts: %v", got)
	}
	// Two selectors: the union of their answers, each value once.
	if got := values("/api/v1/label/rack/values", url.Values{"match[]": {`cpu_usage_user{hostname=~"host_3|host_4"}`, `cpu_usage_user{hostname=~"host_4|host_202"}`}}); !slices.Equal(got, []string{"r3", "r4", "r6"}) {
		t.Fatalf("rack values of two selectors: %v", got)
	}
	// None: an empty list, not null.
	if code, r := c.get("/api/v1/label/nope/values", nil); code != 200 || string(r.Data) != "[]" {
		t.Fatalf("values of a label no series has: %d %s", code, r.Data)
	}
	code, r := c.get("/api/v1/series", url.Values{"match[]": {`cpu_usage_user{rack="r0"}`}})
	var series []map[string]string
	if err := json.Unmarshal(r.Data, &series); code != 200 || err != nil {
		t.Fatalf("series: %d %+v", code, r)
	}
	want := 0
	for _, h := range append(slices.Clone(stored), fresh...) {
		if h%7 == 0 {
			want++
		}
	}
	if len(series) != want || series[0]["__name__"] != "cpu_usage_user" {
		t.Fatalf("series of rack r0: %d, want %d (%v)", len(series), want, series[0])
	}
	if p := reads.parquet.Load(); p != 0 {
		t.Fatalf("the label and series endpoints read SSTs %d times", p)
	}
	if loaded == 0 || reads.index.Load() != loaded {
		t.Fatalf("series indexes read %d times by the first listing and %d in all: want them loaded once", loaded, reads.index.Load())
	}
	t.Logf("after a restart: %d series index reads, 0 SST reads", loaded)

	// The counter sees SST reads: a data query makes them.
	if code, r := c.get("/api/v1/query", url.Values{"query": {`count(cpu_usage_user)`}, "time": {sec(t0 + 590)}}); code != 200 || !strings.Contains(string(r.Data), `"200"`) {
		t.Fatalf("count: %d %s", code, r.Data)
	}
	if reads.parquet.Load() == 0 {
		t.Fatal("a data query read no SST: the counter is blind")
	}
}

// A label's values asked again while nothing changed are the region's
// kept answer and its kept body; a new series, a flush and a compaction
// each change what the next request answers, and it is exact every time.
func TestLabelValuesKeptFollowWrites(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	ctx := context.Background()
	// One region: the engine hands out the region's kept answer itself.
	if _, err := n.Engine().CreateTable(ctx, catalog.TableSpec{Name: "cpu", Regions: 1}); err != nil {
		t.Fatal(err)
	}
	servertest.WaitHosted(t, n.Engine(), "cpu")
	c := client{t, "http://" + n.HTTPAddr()}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	var want []string
	write := func(from, to int) {
		t.Helper()
		var b strings.Builder
		for h := from; h < to; h++ {
			fmt.Fprintf(&b, "cpu,hostname=host_%05d usage_user=%d %d\n", h, h, t0+int64(h))
			want = append(want, fmt.Sprintf("host_%05d", h))
		}
		resp, err := http.Post("http://"+n.HTTPAddr()+"/write?db=x&precision=s", "text/plain", strings.NewReader(b.String()))
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("write: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	check := func(step string) {
		t.Helper()
		for range 3 {
			code, r := c.get("/api/v1/label/hostname/values", nil)
			var got []string
			if err := json.Unmarshal(r.Data, &got); code != 200 || err != nil {
				t.Fatalf("%s: %d %v", step, code, err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s: %d values, want %d", step, len(got), len(want))
			}
			if kept := prom.KeptBodyLen(); kept != len(want) {
				t.Fatalf("%s: the kept body lists %d, want %d", step, kept, len(want))
			}
		}
	}
	write(0, 1500) // more than respond keeps a body for
	check("memtable")
	write(1500, 1501)
	check("a new series")
	if err := n.Engine().Flush(ctx, "cpu"); err != nil {
		t.Fatal(err)
	}
	check("flushed")
	write(1501, 1600)
	check("a file and a memtable")
	if err := n.Engine().Flush(ctx, "cpu"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Engine().Compact(ctx, "cpu", true); err != nil {
		t.Fatal(err)
	}
	check("compacted")
}
