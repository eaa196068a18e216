package prom_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// cardinalityData writes a known dataset to n, some of it flushed (some
// series in two files), some only in memtables, some in both, and
// returns the PromQL series it holds, each a label set, and those with
// rows on day2 (the memtables' rows).
//
//   - remote write, day 1, flushed: http_requests_total{job=api,
//     instance=a|b|c, code=200|500}, up{job=api, instance=a|b|c};
//     flushed again with the same six http_requests_total series (now in
//     two files) and instance d's two new ones;
//   - remote write, day 2, in memtables: up{instance=a|b|c} again (in a
//     file and a memtable), up{instance=d}, process_cpu{instance=a};
//   - line protocol cpu,host=a|b,job=api usage_user,usage_system,note
//     (a string field: no series), day 1, flushed; cpu,host=b|c day 2 in
//     memtables (b in both); mem,host=a value=5 day 2: the series mem.
func cardinalityData(t *testing.T, base string, flush func(table string)) (all, day2 []map[string]string) {
	t.Helper()
	day1 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	d2 := day1.Add(24 * time.Hour)
	series := map[string]map[string]string{}
	on2 := map[string]map[string]string{}
	add := func(when time.Time, ls map[string]string) {
		k := labels.FromMap(ls).String()
		series[k] = ls
		if when.Equal(d2) {
			on2[k] = ls
		}
	}
	rw := func(when time.Time, sets ...map[string]string) {
		t.Helper()
		req := &prompb.WriteRequest{}
		for _, ls := range sets {
			add(when, ls)
			var pl []prompb.Label
			for _, k := range slices.Sorted(maps.Keys(ls)) {
				pl = append(pl, prompb.Label{Name: k, Value: ls[k]})
			}
			req.Timeseries = append(req.Timeseries, prompb.TimeSeries{Labels: pl, Samples: []prompb.Sample{{Value: 1, Timestamp: when.UnixMilli()}}})
		}
		if resp := send(t, base, req, "application/x-protobuf"); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("remote write: %d", resp.StatusCode)
		}
	}
	lines := func(when time.Time, fields map[string]bool, ls ...string) {
		t.Helper()
		var b strings.Builder
		for _, l := range ls {
			fmt.Fprintf(&b, "%s %d\n", l, when.Unix())
			m, rest, _ := strings.Cut(l, " ")
			tags := strings.Split(m, ",")
			for f := range fields {
				if !strings.Contains(rest, f+"=") {
					t.Fatalf("%s: no field %s", l, f)
				}
				name := tags[0] + "_" + f
				if f == "value" {
					name = tags[0]
				}
				set := map[string]string{"__name__": name}
				for _, tag := range tags[1:] {
					k, v, _ := strings.Cut(tag, "=")
					set[k] = v
				}
				add(when, set)
			}
		}
		resp, err := http.Post(base+"/write?db=x&precision=s", "text/plain", strings.NewReader(b.String()))
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("write: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	m := func(kv ...string) map[string]string {
		out := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	var first []map[string]string
	for _, inst := range []string{"a", "b", "c"} {
		for _, code := range []string{"200", "500"} {
			first = append(first, m("__name__", "http_requests_total", "job", "api", "instance", inst, "code", code))
		}
		first = append(first, m("__name__", "up", "job", "api", "instance", inst))
	}
	rw(day1, first...)
	cpuFields := map[string]bool{"usage_user": true, "usage_system": true}
	lines(day1, cpuFields, `cpu,host=a,job=api usage_user=1,usage_system=2,note="x"`, `cpu,host=b,job=api usage_user=1,usage_system=2`)
	flush(catalog.MetricsTable)
	flush("cpu")
	var second []map[string]string
	for _, inst := range []string{"a", "b", "c", "d"} {
		for _, code := range []string{"200", "500"} {
			second = append(second, m("__name__", "http_requests_total", "job", "api", "instance", inst, "code", code))
		}
	}
	rw(day1.Add(time.Minute), second...)
	flush(catalog.MetricsTable)
	rw(d2, m("__name__", "up", "job", "api", "instance", "a"), m("__name__", "up", "job", "api", "instance", "b"),
		m("__name__", "up", "job", "api", "instance", "c"), m("__name__", "up", "job", "api", "instance", "d"),
		m("__name__", "process_cpu", "job", "api", "instance", "a"))
	lines(d2, cpuFields, `cpu,host=b,job=api usage_user=3,usage_system=4`, `cpu,host=c,job=api usage_user=3,usage_system=4`)
	lines(d2, map[string]bool{"value": true}, `mem,host=a value=5`)
	return slices.Collect(maps.Values(series)), slices.Collect(maps.Values(on2))
}

// wantStatus computes /api/v1/status/tsdb's answer of a set of series
// the slow way: every list whole (limit 10000), ordered as the API orders
// them.
func wantStatus(series []map[string]string, focus string) prom.TSDBStatus {
	pairs := map[[2]string]uint64{}
	values := map[string]map[string]uint64{}
	for _, ls := range series {
		for k, v := range ls {
			pairs[[2]string{k, v}]++
			if values[k] == nil {
				values[k] = map[string]uint64{}
			}
			values[k][v]++
		}
	}
	sorted := func(s []prom.TSDBStat) []prom.TSDBStat {
		slices.SortFunc(s, func(a, b prom.TSDBStat) int {
			if c := cmp.Compare(b.Value, a.Value); c != 0 {
				return c
			}
			return cmp.Compare(a.Name, b.Name)
		})
		if s == nil {
			s = []prom.TSDBStat{}
		}
		return s
	}
	var st prom.TSDBStatus
	st.HeadStats.NumSeries = uint64(len(series))
	st.HeadStats.NumLabelPairs = len(pairs)
	for name, vs := range values {
		st.LabelValueCountByLabelName = append(st.LabelValueCountByLabelName, prom.TSDBStat{Name: name, Value: uint64(len(vs))})
		var bytes uint64
		for v, n := range vs {
			bytes += labels.SizeOfLabels(name, v, n)
			st.SeriesCountByLabelValuePair = append(st.SeriesCountByLabelValuePair, prom.TSDBStat{Name: name + "=" + v, Value: n})
			if name == "__name__" {
				st.SeriesCountByMetricName = append(st.SeriesCountByMetricName, prom.TSDBStat{Name: v, Value: n})
			}
			if name == focus {
				st.SeriesCountByFocusLabelValue = append(st.SeriesCountByFocusLabelValue, prom.TSDBStat{Name: v, Value: n})
			}
		}
		st.MemoryInBytesByLabelName = append(st.MemoryInBytesByLabelName, prom.TSDBStat{Name: name, Value: bytes})
	}
	st.SeriesCountByMetricName = sorted(st.SeriesCountByMetricName)
	st.LabelValueCountByLabelName = sorted(st.LabelValueCountByLabelName)
	st.MemoryInBytesByLabelName = sorted(st.MemoryInBytesByLabelName)
	st.SeriesCountByLabelValuePair = sorted(st.SeriesCountByLabelValuePair)
	if focus != "" {
		st.SeriesCountByFocusLabelValue = sorted(st.SeriesCountByFocusLabelValue)
	}
	return st
}

// lines writes line-protocol lines (no timestamps: now).
func lines(t *testing.T, base string, ls ...string) {
	t.Helper()
	resp, err := http.Post(base+"/write?db=x", "text/plain", strings.NewReader(strings.Join(ls, "\n")))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write: %v %v", resp, err)
	}
	resp.Body.Close()
}

func tsdbStatus(t *testing.T, c client, q url.Values) prom.TSDBStatus {
	t.Helper()
	code, r := c.get("/api/v1/status/tsdb", q)
	if code != 200 || r.Status != "success" {
		t.Fatalf("status/tsdb %v: %d %+v", q, code, r)
	}
	var st prom.TSDBStatus
	if err := json.Unmarshal(r.Data, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func sameStatus(t *testing.T, what string, got, want prom.TSDBStatus) {
	t.Helper()
	got.HeadStats.MinTime, got.HeadStats.MaxTime, want.HeadStats.MinTime, want.HeadStats.MaxTime = 0, 0, 0, 0
	g, _ := json.MarshalIndent(got, "", " ")
	w, _ := json.MarshalIndent(want, "", " ")
	if string(g) != string(w) {
		t.Fatalf("%s:\ngot  %s\nwant %s", what, g, w)
	}
}

// /api/v1/status/tsdb counts a known dataset exactly: series flushed to
// one or two files, in memtables, and in both count once; remote-written
// series by their __name__, a measurement's by each numeric field's
// name; every list, its limit and order; a table alone; a day alone;
// after a restart (nothing kept, the memtables replayed) the same.
func TestTSDBStatusCountsExactly(t *testing.T) {
	store := objstoretest.Mem(t)
	opts := servertest.Options{Dir: t.TempDir(), Config: func(c *server.Config) { c.DefaultRegions = 2 }}
	n := servertest.Start(t, store, opts)
	all, day2 := cardinalityData(t, "http://"+n.HTTPAddr(), func(table string) {
		if err := n.Engine().Flush(context.Background(), table); err != nil {
			t.Fatal(err)
		}
	})
	c := client{t, "http://" + n.HTTPAddr()}
	if len(all) != 20 || len(day2) != 10 {
		t.Fatalf("the dataset: %d series, %d on day 2; want 20 and 10", len(all), len(day2))
	}
	whole := url.Values{"limit": {"10000"}}
	st := tsdbStatus(t, c, whole)
	sameStatus(t, "all", st, wantStatus(all, ""))
	// A few counts by hand, lest the model above share a mistake.
	if st.HeadStats.NumSeries != 20 || st.HeadStats.NumLabelPairs != 16 {
		t.Fatalf("head stats: %+v", st.HeadStats)
	}
	if got := st.SeriesCountByMetricName; len(got) != 6 || got[0] != (prom.TSDBStat{Name: "http_requests_total", Value: 8}) ||
		got[1] != (prom.TSDBStat{Name: "up", Value: 4}) || got[2] != (prom.TSDBStat{Name: "cpu_usage_system", Value: 3}) ||
		got[4] != (prom.TSDBStat{Name: "mem", Value: 1}) {
		t.Fatalf("by metric name: %+v", got)
	}
	if got := st.SeriesCountByLabelValuePair[0]; got != (prom.TSDBStat{Name: "job=api", Value: 19}) {
		t.Fatalf("the top pair: %+v", got)
	}
	t1 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	if st.HeadStats.MinTime != t1 || st.HeadStats.MaxTime != t1+24*3600*1000 {
		t.Fatalf("time range: %+v, want %d..%d", st.HeadStats, t1, t1+24*3600*1000)
	}
	// Prometheus' default limit, 10, and a shorter one: the top entries.
	want := wantStatus(all, "")
	short := tsdbStatus(t, c, nil)
	if len(short.SeriesCountByLabelValuePair) != 10 || !slices.Equal(short.SeriesCountByLabelValuePair, want.SeriesCountByLabelValuePair[:10]) {
		t.Fatalf("default limit: %+v", short.SeriesCountByLabelValuePair)
	}
	three := tsdbStatus(t, c, url.Values{"limit": {"3"}})
	if !slices.Equal(three.SeriesCountByMetricName, want.SeriesCountByMetricName[:3]) || !slices.Equal(three.LabelValueCountByLabelName, want.LabelValueCountByLabelName[:3]) ||
		!slices.Equal(three.MemoryInBytesByLabelName, want.MemoryInBytesByLabelName[:3]) || three.HeadStats.NumSeries != 20 {
		t.Fatalf("limit 3: %+v", three)
	}
	// A focus label (VictoriaMetrics' focusLabel).
	sameStatus(t, "focus instance", tsdbStatus(t, c, url.Values{"limit": {"10000"}, "focusLabel": {"instance"}}), wantStatus(all, "instance"))
	// One table: the metrics table, a measurement.
	var rwSeries, cpuSeries []map[string]string
	for _, ls := range all {
		switch {
		case strings.HasPrefix(ls["__name__"], "cpu_"):
			cpuSeries = append(cpuSeries, ls)
		case ls["host"] == "":
			rwSeries = append(rwSeries, ls)
		}
	}
	sameStatus(t, "metrics table", tsdbStatus(t, c, url.Values{"limit": {"10000"}, "table": {catalog.MetricsTable}}), wantStatus(rwSeries, ""))
	sameStatus(t, "cpu", tsdbStatus(t, c, url.Values{"limit": {"10000"}, "table": {"cpu"}}), wantStatus(cpuSeries, ""))
	// A day: only the series with rows then (the memtables'); a range
	// the same.
	sameStatus(t, "day 2", tsdbStatus(t, c, url.Values{"limit": {"10000"}, "date": {"2026-03-02"}}), wantStatus(day2, ""))
	sameStatus(t, "day 2 by range", tsdbStatus(t, c, url.Values{"limit": {"10000"}, "start": {"2026-03-02T00:00:00Z"}, "end": {"2026-03-02T23:59:59Z"}}), wantStatus(day2, ""))
	if st := tsdbStatus(t, c, url.Values{"date": {"2026-03-05"}}); st.HeadStats.NumSeries != 0 || len(st.SeriesCountByMetricName) != 0 || st.SeriesCountByMetricName == nil {
		t.Fatalf("a day without rows: %+v", st)
	}
	// Asked again (the regions' kept counts), then after a new series.
	sameStatus(t, "again", tsdbStatus(t, c, whole), wantStatus(all, ""))
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: []prompb.Label{{Name: "__name__", Value: "up"}, {Name: "instance", Value: "e"}, {Name: "job", Value: "api"}},
		Samples: []prompb.Sample{{Value: 1, Timestamp: t1}}}}}
	if resp := send(t, c.base, req, "application/x-protobuf"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write: %d", resp.StatusCode)
	}
	more := append(slices.Clone(all), map[string]string{"__name__": "up", "instance": "e", "job": "api"})
	sameStatus(t, "a new series", tsdbStatus(t, c, whole), wantStatus(more, ""))
	// A series only in files so far comes to the memtable: it counts once.
	req = &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: []prompb.Label{{Name: "__name__", Value: "http_requests_total"}, {Name: "code", Value: "500"}, {Name: "instance", Value: "b"}, {Name: "job", Value: "api"}},
		Samples: []prompb.Sample{{Value: 1, Timestamp: t1 + 3600_000}}}}}
	if resp := send(t, c.base, req, "application/x-protobuf"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write: %d", resp.StatusCode)
	}
	sameStatus(t, "a flushed series again", tsdbStatus(t, c, whole), wantStatus(more, ""))
	lines(t, c.base, `cpu,host=a,job=api usage_user=9,usage_system=9`, `cpu,host=z,job=api usage_user=9,usage_system=9`)
	more = append(more, map[string]string{"__name__": "cpu_usage_user", "host": "z", "job": "api"}, map[string]string{"__name__": "cpu_usage_system", "host": "z", "job": "api"})
	sameStatus(t, "a measurement's series again and a new one", tsdbStatus(t, c, whole), wantStatus(more, ""))
	// Short lists of counts kept and corrected since: the same top entries.
	req = &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: []prompb.Label{{Name: "__name__", Value: "up"}, {Name: "instance", Value: "f"}, {Name: "job", Value: "api"}},
		Samples: []prompb.Sample{{Value: 1, Timestamp: t1}}}}}
	if resp := send(t, c.base, req, "application/x-protobuf"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write: %d", resp.StatusCode)
	}
	more = append(more, map[string]string{"__name__": "up", "instance": "f", "job": "api"})
	var rwMore []map[string]string
	for _, ls := range more {
		if ls["host"] == "" {
			rwMore = append(rwMore, ls)
		}
	}
	for i, limit := range []int{1, 2, 3, 5, 1, 2, 3, 5} {
		q := url.Values{"limit": {strconv.Itoa(limit)}, "focusLabel": {"instance"}}
		want = wantStatus(more, "instance")
		if i >= 4 { // the metrics table's counts alone: kept and corrected, read in place
			q.Set("table", catalog.MetricsTable)
			want = wantStatus(rwMore, "instance")
		}
		got := tsdbStatus(t, c, q)
		cut := func(s []prom.TSDBStat) []prom.TSDBStat { return s[:min(limit, len(s))] }
		if !slices.Equal(got.SeriesCountByMetricName, cut(want.SeriesCountByMetricName)) || !slices.Equal(got.SeriesCountByLabelValuePair, cut(want.SeriesCountByLabelValuePair)) ||
			!slices.Equal(got.LabelValueCountByLabelName, cut(want.LabelValueCountByLabelName)) || !slices.Equal(got.MemoryInBytesByLabelName, cut(want.MemoryInBytesByLabelName)) ||
			!slices.Equal(got.SeriesCountByFocusLabelValue, cut(want.SeriesCountByFocusLabelValue)) || got.HeadStats.NumSeries != want.HeadStats.NumSeries {
			t.Fatalf("limit %d: %+v, want the first of %+v", limit, got, want)
		}
	}
	// Bad requests.
	for _, q := range []url.Values{{"limit": {"0"}}, {"limit": {"10001"}}, {"limit": {"x"}}, {"date": {"yesterday"}},
		{"date": {"2026-03-02"}, "start": {"1"}}, {"table": {"nope"}}, {"start": {"10"}, "end": {"5"}}} {
		if code, r := c.get("/api/v1/status/tsdb", q); code != http.StatusBadRequest || r.ErrorType != "bad_data" {
			t.Fatalf("%v: %d %+v", q, code, r)
		}
	}
	// After a restart: the memtables replayed, nothing kept.
	n.Stop()
	n = servertest.Start(t, store, opts)
	servertest.WaitHosted(t, n.Engine(), catalog.MetricsTable)
	servertest.WaitHosted(t, n.Engine(), catalog.LinesTable)
	sameStatus(t, "after a restart", tsdbStatus(t, client{t, "http://" + n.HTTPAddr()}, whole), wantStatus(more, ""))
}

// failingRemote fails the listings of series (what a cardinality count
// asks of a region's owner) while fail is set.
type failingRemote struct {
	datanode.Remote
	fail *atomic.Bool
}

func (r failingRemote) Scan(ctx context.Context, table string, id layout.RegionID, req scan.Request) (row.Iterator, error) {
	if req.SeriesOnly && r.fail.Load() {
		return nil, fmt.Errorf("%w: injected", datanode.ErrNotHosted)
	}
	return r.Remote.Scan(ctx, table, id, req)
}

// On a cluster, each datanode answers for every region: those it hosts
// from their postings, the others' from listings their owners send; the
// counts are the same exact ones from either datanode. A region that
// cannot be listed fails the request, naming it.
func TestTSDBStatusOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	var fail atomic.Bool
	var dn1 sync.Once
	c := servertest.StartCluster(t, 2, servertest.ClusterOptions{DefaultRegions: 4,
		Tune: func(o *datanode.Options) { dn1.Do(func() { o.Remote = failingRemote{Remote: o.Remote, fail: &fail} }) }})
	dns := c.Datanodes
	all, _ := cardinalityData(t, "http://"+dns[0].HTTPAddr(), func(table string) {
		for _, dn := range dns {
			if err := dn.Engine().Flush(context.Background(), table); err != nil {
				t.Fatal(err)
			}
		}
	})
	spread(t, dns, dns[0].Engine().Tables())
	for _, dn := range dns {
		if hosted := len(dn.Engine().Hosted()); hosted >= 8 {
			t.Fatalf("%s hosts every region (%d)", dn.HTTPAddr(), hosted)
		}
		sameStatus(t, "from "+dn.HTTPAddr(), tsdbStatus(t, client{t, "http://" + dn.HTTPAddr()}, url.Values{"limit": {"10000"}}), wantStatus(all, ""))
	}
	fail.Store(true)
	code, r := client{t, "http://" + dns[0].HTTPAddr()}.get("/api/v1/status/tsdb", nil)
	if code == 200 || !strings.Contains(r.Error, "cardinality of region") || !strings.Contains(r.Error, "injected") {
		t.Fatalf("a region that cannot be listed: %d %+v", code, r)
	}
}

// One region's counts are read in place, kept and then corrected by the
// series that came since: every list, whole and short, is still exact.
func TestTSDBStatusKeptAndCorrected(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	c := client{t, "http://" + n.HTTPAddr()}
	t1 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	var series []map[string]string
	write := func(from, to int) {
		t.Helper()
		req := &prompb.WriteRequest{}
		for i := from; i < to; i++ {
			ls := map[string]string{"__name__": fmt.Sprintf("m%d", i%4), "instance": fmt.Sprintf("i%d", i%7), "id": strconv.Itoa(i)}
			series = append(series, ls)
			req.Timeseries = append(req.Timeseries, prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: ls["__name__"]}, {Name: "id", Value: ls["id"]}, {Name: "instance", Value: ls["instance"]}},
				Samples: []prompb.Sample{{Value: 1, Timestamp: t1}}})
		}
		if resp := send(t, c.base, req, "application/x-protobuf"); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("write: %d", resp.StatusCode)
		}
	}
	write(0, 30)
	if err := n.Engine().Flush(context.Background(), catalog.MetricsTable); err != nil {
		t.Fatal(err)
	}
	write(30, 40)
	check := func(what string) {
		t.Helper()
		want := wantStatus(series, "instance")
		sameStatus(t, what, tsdbStatus(t, c, url.Values{"limit": {"10000"}, "focusLabel": {"instance"}}), want)
		for _, limit := range []int{1, 2, 3, 5} {
			got := tsdbStatus(t, c, url.Values{"limit": {strconv.Itoa(limit)}, "focusLabel": {"instance"}})
			cut := func(s []prom.TSDBStat) []prom.TSDBStat { return s[:min(limit, len(s))] }
			if !slices.Equal(got.SeriesCountByMetricName, cut(want.SeriesCountByMetricName)) || !slices.Equal(got.SeriesCountByLabelValuePair, cut(want.SeriesCountByLabelValuePair)) ||
				!slices.Equal(got.LabelValueCountByLabelName, cut(want.LabelValueCountByLabelName)) || !slices.Equal(got.MemoryInBytesByLabelName, cut(want.MemoryInBytesByLabelName)) ||
				!slices.Equal(got.SeriesCountByFocusLabelValue, cut(want.SeriesCountByFocusLabelValue)) {
				t.Fatalf("%s, limit %d: %+v, want the first of %+v", what, limit, got, want)
			}
		}
	}
	check("counted whole")
	// m3 and i6 had the fewest series: 18 more put them first.
	for i := range 9 {
		req := &prompb.WriteRequest{}
		for j := range 2 {
			ls := map[string]string{"__name__": "m3", "instance": "i6", "id": fmt.Sprintf("x%d-%d", i, j)}
			series = append(series, ls)
			req.Timeseries = append(req.Timeseries, prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: "m3"}, {Name: "id", Value: ls["id"]}, {Name: "instance", Value: "i6"}},
				Samples: []prompb.Sample{{Value: 1, Timestamp: t1}}})
		}
		if resp := send(t, c.base, req, "application/x-protobuf"); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("write: %d", resp.StatusCode)
		}
		check("corrected")
	}
}
