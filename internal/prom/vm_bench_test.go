package prom_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/tsbs"
)

// vmBinary finds VictoriaMetrics' single-node binary: $STRATA_VM_BIN, then
// ~/.cache/strata/bin/victoria-metrics. Install it with
//
//	GOBIN=~/.cache/strata/bin go install github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@v1.151.0
func vmBinary() string {
	if p := os.Getenv("STRATA_VM_BIN"); p != "" {
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "strata", "bin", "victoria-metrics")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// startVM starts VictoriaMetrics on loopback over dir (a new directory, or
// one a stopped VictoriaMetrics left to restart it), with its rollup result
// cache off (Strata has none: both evaluate every query), and returns its
// base URL and a function that stops it as a restart would (SIGINT: it
// saves its caches and exits).
func startVM(b *testing.B, dir string) (string, func()) {
	bin := vmBinary()
	if bin == "" {
		b.Skip("no VictoriaMetrics binary (set STRATA_VM_BIN, or: GOBIN=~/.cache/strata/bin go install github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@v1.151.0)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "-storageDataPath="+dir, "-httpListenAddr="+addr, "-retentionPeriod=100y",
		"-search.disableCache", "-loggerLevel=ERROR")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
	b.Cleanup(stop)
	base := "http://" + addr
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return base, stop
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("VictoriaMetrics at %s not healthy after a minute: %v", base, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lineRound is round r of the TSBS cpu workload (every host's row at start
// + r intervals) as line protocol with nanosecond timestamps: the same
// bytes go to both systems.
func lineRound(hosts, r int, start int64) []byte {
	var buf bytes.Buffer
	ts := strconv.FormatInt(start+int64(r)*tsbs.Interval, 10)
	for h := range hosts {
		k := r*hosts + h
		buf.WriteString("cpu")
		buf.WriteString(tsbs.LineTags(h))
		for f, name := range tsbs.Fields {
			if f == 0 {
				buf.WriteByte(' ')
			} else {
				buf.WriteByte(',')
			}
			buf.WriteString(name)
			buf.WriteByte('=')
			buf.WriteString(strconv.FormatFloat(tsbs.Value(k, f), 'f', -1, 64))
		}
		buf.WriteByte(' ')
		buf.WriteString(ts)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// holdsAll fails the benchmark unless the server at base holds every
// series and sample load sent (hosts × the TSBS fields, each with rounds
// samples before end), counted through its own query API: a ratio against
// a server that dropped rows (retention, limits) compares nothing.
func holdsAll(b *testing.B, name, base string, hosts, rounds int, end time.Time) {
	b.Helper()
	count := func(expr string) float64 {
		resp, data, err := postRange(context.Background(), base, expr, end, end, time.Minute)
		if err != nil {
			b.Fatalf("%s: %s: %v", name, expr, err)
		}
		var r struct {
			Data struct {
				Result []struct {
					Values [][2]any `json:"values"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := json.Unmarshal(data, &r); err != nil || len(r.Data.Result) == 0 {
			b.Fatalf("%s: %s: %s: %.300s (%v)", name, expr, resp.Status, data, err)
		}
		sum := 0.0
		for _, s := range r.Data.Result {
			if len(s.Values) != 1 {
				b.Fatalf("%s: %s: %.300s", name, expr, data)
			}
			v, err := strconv.ParseFloat(fmt.Sprint(s.Values[0][1]), 64)
			if err != nil {
				b.Fatalf("%s: %s: %v", name, expr, err)
			}
			sum += v
		}
		return sum
	}
	// Per name, added here: both systems answer AGG by (__name__) over a
	// name-dropping function with a series per name.
	window := fmt.Sprintf("[%ds]", rounds*int(tsbs.Interval/time.Second)+60)
	series := count(`count by (__name__) ({__name__=~"cpu_.+"})`)
	samples := count(`sum by (__name__) (count_over_time({__name__=~"cpu_.+"}` + window + `))`)
	wantSeries, wantSamples := float64(hosts*len(tsbs.Fields)), float64(hosts*len(tsbs.Fields)*rounds)
	if series != wantSeries || samples != wantSamples {
		b.Fatalf("%s holds %v series and %v samples, not the %v and %v sent", name, series, samples, wantSeries, wantSamples)
	}
	b.Logf("%s holds every series and sample sent: %v and %v", name, series, samples)
}

// load POSTs rounds [0, rounds) of line protocol to each base URL's /write,
// with a few workers.
func load(b *testing.B, hosts, rounds int, start int64, bases ...string) {
	const workers = 4
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	next := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range next {
				body := lineRound(hosts, r, start)
				for _, base := range bases {
					resp, err := http.Post(base+"/write?db=bench&precision=ns", "text/plain", bytes.NewReader(body))
					if err != nil {
						errc <- err
						return
					}
					msg, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode/100 != 2 {
						errc <- fmt.Errorf("write to %s: %s: %s", base, resp.Status, msg)
						return
					}
				}
			}
		}()
	}
	go func() {
		defer close(next)
		for r := range rounds {
			select {
			case next <- r:
			case err := <-errc:
				errc <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// rangeQuery runs a query_range and returns each series' values keyed by
// its labels, for comparing the two systems' answers. dropName leaves
// __name__ out of the keys (for an aggregation by __name__ over one name,
// where Strata answers as Prometheus does, without the name, and
// VictoriaMetrics keeps it); two series left with the same key are an
// error.
func rangeQuery(base, expr string, start, end time.Time, step time.Duration, dropName bool) (map[string][]string, error) {
	resp, data, err := postRange(context.Background(), base, expr, start, end, step)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(data, &r); err != nil || r.Status != "success" {
		return nil, fmt.Errorf("%s: %s: %.300s (%v)", expr, resp.Status, data, err)
	}
	out := map[string][]string{}
	for _, s := range r.Data.Result {
		if dropName {
			delete(s.Metric, "__name__")
		}
		k, _ := json.Marshal(s.Metric)
		if _, dup := out[string(k)]; dup {
			return nil, fmt.Errorf("%s: two series %s", expr, k)
		}
		out[string(k)] = []string{}
		for _, v := range s.Values {
			out[string(k)] = append(out[string(k)], fmt.Sprintf("%v=%v", v[0], v[1]))
		}
	}
	return out, nil
}

// sameAnswer compares two answers: the same series, each with the same
// timestamps, and values equal to 1e-9 relative (the systems sum floats in
// different orders, so an average may differ in its last bits). It returns
// how many points it compared and how many of those were not equal to the
// bit, and the largest relative difference.
func sameAnswer(a, b map[string][]string) (points, inexact int, maxRel float64, err error) {
	if len(a) != len(b) {
		return 0, 0, 0, fmt.Errorf("%d series against %d", len(a), len(b))
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok {
			return 0, 0, 0, fmt.Errorf("series %s only in the first", k)
		}
		if len(va) != len(vb) {
			return 0, 0, 0, fmt.Errorf("series %s: %d points against %d", k, len(va), len(vb))
		}
		for i := range va {
			ta, xa, _ := strings.Cut(va[i], "=")
			tb, xb, _ := strings.Cut(vb[i], "=")
			fa, _ := strconv.ParseFloat(xa, 64)
			fb, _ := strconv.ParseFloat(xb, 64)
			if ta != tb || math.Abs(fa-fb) > 1e-9*max(1, math.Abs(fa)) {
				return 0, 0, 0, fmt.Errorf("series %s point %d: %s against %s", k, i, va[i], vb[i])
			}
			points++
			if fa != fb {
				inexact++
				maxRel = max(maxRel, math.Abs(fa-fb)/max(math.Abs(fa), math.Abs(fb)))
			}
		}
	}
	return points, inexact, maxRel, nil
}

// benchQuery is one query_range: an expression over [start, end] at step.
type benchQuery struct {
	expr       string
	start, end time.Time
	step       time.Duration
}

// queryType is a kind of query the benchmark times: a set of queries of
// that shape (TSBS's: random hosts and time windows), run in turn.
type queryType struct {
	name string
	// oneName: the selector names one metric, so an aggregation by
	// __name__ is Prometheus' (no name: Strata) or VictoriaMetrics' (the
	// name kept); the answers are compared without it.
	oneName bool
	queries []benchQuery
}

// tsbsQueries are TSBS's 11 VictoriaMetrics cpu-only query types as its
// generator writes them (the devops queries of its victoriametrics
// database in github.com/timescale/tsbs), n of each
// with random hosts of [0, hosts) and random windows of [start, end] drawn
// from rng as TSBS draws them (RandWindow: a start second uniform in
// [start, end-window)). A window as long as the data or longer (12 h over
// 12 h of data, where TSBS's generator gives up) is the whole of it.
func tsbsQueries(rng *rand.Rand, n, hosts int, start, end time.Time) []queryType {
	metrics := func(n int) []string { return tsbs.Fields[:n] }
	randomHosts := func(n int) []string {
		var hs []string
		for _, h := range rng.Perm(hosts)[:min(n, hosts)] {
			hs = append(hs, "host_"+strconv.Itoa(h))
		}
		return hs
	}
	// getSelectClause in TSBS.
	selector := func(metrics, hosts []string) string {
		hostsClause := ""
		if len(hosts) == 1 {
			hostsClause = "hostname='" + hosts[0] + "'"
		} else if len(hosts) > 1 {
			hostsClause = "hostname=~'" + strings.Join(hosts, "|") + "'"
		}
		if len(metrics) == 1 {
			return "cpu_" + metrics[0] + "{" + hostsClause + "}"
		}
		if len(hosts) > 0 {
			return "{__name__=~'cpu_(" + strings.Join(metrics, "|") + ")', " + hostsClause + "}"
		}
		return "{__name__=~'cpu_(" + strings.Join(metrics, "|") + ")'}"
	}
	window := func(d time.Duration) (time.Time, time.Time) {
		lower, upper := start.Unix(), end.Add(-d).Unix()
		if upper <= lower {
			return start, end
		}
		s := time.Unix(lower+rng.Int64N(upper-lower), 0)
		return s, s.Add(d)
	}
	var types []queryType
	add := func(name string, nMetrics int, q func() benchQuery) {
		t := queryType{name: name, oneName: nMetrics == 1}
		for range n {
			t.queries = append(t.queries, q())
		}
		types = append(types, t)
	}
	// GroupByTime: single-groupby-<metrics>-<hosts>-<hours>.
	for _, g := range [][3]int{{1, 1, 1}, {1, 1, 12}, {1, 8, 1}, {5, 1, 1}, {5, 1, 12}, {5, 8, 1}} {
		add(fmt.Sprintf("single-groupby-%d-%d-%d", g[0], g[1], g[2]), g[0], func() benchQuery {
			expr := fmt.Sprintf("max(max_over_time(%s[1m])) by (__name__)", selector(metrics(g[0]), randomHosts(g[1])))
			s, e := window(time.Duration(g[2]) * time.Hour)
			return benchQuery{expr, s, e, time.Minute}
		})
	}
	// MaxAllCPU: cpu-max-all-<hosts>, 8 h windows.
	for _, h := range []int{1, 8} {
		add(fmt.Sprintf("cpu-max-all-%d", h), len(tsbs.Fields), func() benchQuery {
			expr := fmt.Sprintf("max(max_over_time(%s[1h])) by (__name__)", selector(tsbs.Fields, randomHosts(h)))
			s, e := window(8 * time.Hour)
			return benchQuery{expr, s, e, time.Hour}
		})
	}
	// GroupByTimeAndPrimaryTag: double-groupby-<metrics>, 12 h windows.
	for _, m := range []int{1, 5, len(tsbs.Fields)} {
		name := fmt.Sprintf("double-groupby-%d", m)
		if m == len(tsbs.Fields) {
			name = "double-groupby-all"
		}
		add(name, m, func() benchQuery {
			expr := fmt.Sprintf("avg(avg_over_time(%s[1h])) by (__name__, hostname)", selector(metrics(m), nil))
			s, e := window(12 * time.Hour)
			return benchQuery{expr, s, e, time.Hour}
		})
	}
	return types
}

// envInt is the integer in $name, or def.
func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q", name, s)
	}
	return n
}

// BenchmarkQueryVsVictoriaMetrics loads the same TSBS cpu-only rows
// ($STRATA_BENCH_HOSTS hosts, default 4,000; 10 fields, 10 s apart,
// $STRATA_BENCH_HOURS hours, default 12) into Strata (a standalone,
// flushed and compacted) and VictoriaMetrics v1.151.0 (force-merged), then
// times queries through each one's /api/v1/query_range, alternating
// between the systems: TSBS's 11 VictoriaMetrics query types
// ($STRATA_BENCH_QUERIES of each, default 10, with random hosts and
// windows from $STRATA_BENCH_SEED, printed; run in turn) and three of
// Strata's own, after checking that both give the same answer to every
// one of them. Strata runs on file:// and on MinIO; VictoriaMetrics on its
// local disk. Each sub-benchmark reports both systems' p50 and p99 and
// the ratio of the p50s (Strata / VM). Last, the cold case: Strata
// restarted over the same MinIO bucket (a new engine and store client:
// empty caches) and VictoriaMetrics restarted over its directory, each
// timed on its first every-host hourly average, with the GETs Strata made.
//
//	STRATA_BENCH_HOSTS=400 go test -run XXX -bench QueryVsVictoriaMetrics -benchtime 10x -timeout 2h ./internal/prom
func BenchmarkQueryVsVictoriaMetrics(b *testing.B) {
	hours := envInt(b, "STRATA_BENCH_HOURS", 12)
	hosts := envInt(b, "STRATA_BENCH_HOSTS", 4000)
	perType := envInt(b, "STRATA_BENCH_QUERIES", 10)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("STRATA_BENCH_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			b.Fatalf("STRATA_BENCH_SEED=%q", s)
		}
	}
	b.Logf("%d hosts, %d h, %d queries of each TSBS type, STRATA_BENCH_SEED=%d", hosts, hours, perType, seed)
	rounds := hours * 360
	vmDir := b.TempDir()
	vm, stopVM := startVM(b, vmDir)
	// Recent timestamps: VictoriaMetrics refuses rows far in the past.
	end := time.Now().Truncate(time.Hour).Add(-time.Hour)
	start := end.Add(-time.Duration(hours) * time.Hour)
	began := time.Now()
	load(b, hosts, rounds, start.UnixNano(), vm)
	for _, p := range []string{"/internal/force_flush", "/internal/force_merge?partition_prefix=" + start.Format("2006_01")} {
		if resp, err := http.Get(vm + p); err != nil {
			b.Fatal(err)
		} else {
			resp.Body.Close()
		}
	}
	b.Logf("VictoriaMetrics: %d rows loaded and merged in %s", rounds*hosts, time.Since(began).Round(time.Second))
	holdsAll(b, "VictoriaMetrics", vm, hosts, rounds, end)
	last := end.Add(-tsbs.Interval)
	hourIn := start.Add(time.Hour) // the first full hour's end
	if hourIn.After(last) {
		hourIn = last
	}
	allHostsAvg := benchQuery{`avg by (hostname) (avg_over_time(cpu_usage_user[1h]))`, hourIn, last, time.Hour}
	types := []queryType{
		{name: "1-host-1h", queries: []benchQuery{{`max(max_over_time(cpu_usage_user{hostname="host_1"}[1m]))`, last.Add(-time.Hour), last, time.Minute}}},
		{name: "8-hosts-12h", queries: []benchQuery{{`max(max_over_time(cpu_usage_user{hostname=~"host_1|host_2|host_3|host_4|host_5|host_6|host_7|host_8"}[1m]))`, start, last, time.Minute}}},
		{name: "all-hosts-avg-12h", queries: []benchQuery{allHostsAvg}},
	}
	for _, t := range tsbsQueries(rand.New(rand.NewPCG(seed, seed)), perType, hosts, start, end) {
		q := t.queries[0]
		b.Logf("%s, the first of %d: %s over %s from %s step %s", t.name, len(t.queries), q.expr, q.end.Sub(q.start), q.start.UTC().Format(time.TimeOnly), q.step)
		types = append(types, t)
	}
	for _, store := range []string{"file", "minio"} {
		ctx := context.Background()
		var bucket *objstore.Store
		var err error
		storeURL := "file://" + b.TempDir()
		if store == "minio" {
			storeURL = objstoretest.MinIO(b).NewBucket(b)
		}
		if bucket, err = objstore.Open(ctx, storeURL, objstore.Options{}); err != nil {
			b.Fatal(err)
		}
		dir := b.TempDir()
		n := servertest.Start(b, bucket, servertest.Options{Dir: dir})
		strata := "http://" + n.HTTPAddr()
		began := time.Now()
		load(b, hosts, rounds, start.UnixNano(), strata)
		loaded := time.Since(began)
		if err := n.Engine().Flush(ctx, "cpu"); err != nil {
			b.Fatal(err)
		}
		// A background compaction may be running: wait for it, then
		// compact everything.
		for {
			_, err := n.Engine().Compact(ctx, "cpu", true)
			if err == nil {
				break
			}
			if !errors.Is(err, compact.ErrBusy) {
				b.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		holdsAll(b, "Strata on "+store, strata, hosts, rounds, end)
		stats, _ := n.Engine().Stats(context.Background(), "cpu")
		b.Logf("Strata on %s: %d rows loaded in %s, flushed and compacted in %s more: %+v", store, rounds*hosts, loaded.Round(time.Second), (time.Since(began) - loaded).Round(time.Second), stats)
		for _, t := range types {
			points, inexact, maxRel, err := sameAnswers(strata, vm, t)
			if err != nil {
				b.Errorf("%s on %s: Strata and VictoriaMetrics disagree, not timed: %v", t.name, store, err)
				continue
			}
			b.Logf("%s on %s: the same series and values, %d points over %d queries, %d of them equal only to 1e-9 relative (at most %.1e apart)", t.name, store, points, len(t.queries), inexact, maxRel)
			b.Run(store+"/"+t.name, func(b *testing.B) {
				gets := bucket.Requests()[objstore.OpGet]
				n := compare(b, strata, vm, func(i int, base string) error {
					q := t.queries[i%len(t.queries)]
					return fetchRange(ctx, base, q.expr, q.start, q.end, q.step)
				})
				b.ReportMetric(float64(bucket.Requests()[objstore.OpGet]-gets)/float64(n), "strata-GETs/op")
			})
		}
		// The label endpoints Grafana calls as a dashboard loads, over the
		// data's 12 hours (VictoriaMetrics answers for the current day
		// only without a range).
		window := "?start=" + strconv.FormatInt(start.Unix(), 10) + "&end=" + strconv.FormatInt(end.Unix(), 10)
		for _, l := range []struct{ name, path string }{
			{"labels", "/api/v1/labels" + window},
			{"label-hostname-values", "/api/v1/label/hostname/values" + window},
		} {
			b.Run(store+"/"+l.name, func(b *testing.B) {
				want := fmt.Sprintf("host_%d", hosts-1)
				if l.name == "labels" {
					want = "hostname"
				}
				_ = compare(b, strata, vm, func(_ int, base string) error { return fetchPath(ctx, base+l.path, want) })
			})
		}
		n.Stop()
		if store != "minio" {
			continue
		}
		// Cold: a new standalone over the same bucket and etcd directory,
		// with a new store client (its request counts from zero) and so
		// an empty SST cache.
		began = time.Now()
		if bucket, err = objstore.Open(ctx, storeURL, objstore.Options{}); err != nil {
			b.Fatal(err)
		}
		n = servertest.Start(b, bucket, servertest.Options{Dir: dir})
		servertest.WaitHosted(b, n.Engine(), "cpu")
		opened, openGets := time.Since(began), bucket.Requests()[objstore.OpGet]
		strata = "http://" + n.HTTPAddr()
		var sc [2]time.Duration
		var sg [2]int64
		for i := range sc {
			gets := bucket.Requests()[objstore.OpGet]
			t0 := time.Now()
			if err := fetchRange(ctx, strata, allHostsAvg.expr, allHostsAvg.start, allHostsAvg.end, allHostsAvg.step); err != nil {
				b.Fatal(err)
			}
			sc[i], sg[i] = time.Since(t0), int64(bucket.Requests()[objstore.OpGet]-gets)
		}
		if _, _, _, err := sameAnswers(strata, vm, types[2]); err != nil {
			b.Errorf("cold: Strata and VictoriaMetrics disagree: %v", err)
		}
		n.Stop()
		stopVM()
		began = time.Now()
		vm, stopVM = startVM(b, vmDir)
		vmOpened := time.Since(began)
		var vc [2]time.Duration
		for i := range vc {
			t0 := time.Now()
			if err := fetchRange(ctx, vm, allHostsAvg.expr, allHostsAvg.start, allHostsAvg.end, allHostsAvg.step); err != nil {
				b.Fatal(err)
			}
			vc[i] = time.Since(t0)
		}
		b.Logf("cold, %s: Strata on MinIO restarted in %s (%d GETs), first query %s (%d GETs), second %s (%d GETs); VictoriaMetrics restarted in %s, first query %s, second %s",
			allHostsAvg.expr, opened.Round(time.Millisecond), openGets, sc[0].Round(time.Millisecond), sg[0], sc[1].Round(time.Millisecond), sg[1],
			vmOpened.Round(time.Millisecond), vc[0].Round(time.Millisecond), vc[1].Round(time.Millisecond))
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.Run("minio/cold-all-hosts-avg-12h", func(b *testing.B) {
			b.ReportMetric(ms(opened), "strata-open-ms")
			b.ReportMetric(float64(openGets), "strata-open-GETs")
			b.ReportMetric(ms(sc[0]), "strata-first-ms")
			b.ReportMetric(float64(sg[0]), "strata-first-GETs")
			b.ReportMetric(ms(sc[1]), "strata-second-ms")
			b.ReportMetric(ms(vc[0]), "vm-first-ms")
			b.ReportMetric(ms(vc[1]), "vm-second-ms")
			b.ReportMetric(ms(sc[0])/ms(vc[0]), "first-ratio")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// sameAnswers checks that Strata and VictoriaMetrics give the same answer
// to each of t's queries, and returns how many points it compared and how
// many of those were equal only to 1e-9 relative, and the largest relative
// difference.
func sameAnswers(strata, vm string, t queryType) (points, inexact int, maxRel float64, err error) {
	for _, q := range t.queries {
		sa, err := rangeQuery(strata, q.expr, q.start, q.end, q.step, t.oneName)
		if err != nil {
			return 0, 0, 0, err
		}
		va, err := rangeQuery(vm, q.expr, q.start, q.end, q.step, t.oneName)
		if err != nil {
			return 0, 0, 0, err
		}
		p, i, r, err := sameAnswer(sa, va)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%s over [%s, %s] step %s: %w", q.expr, q.start.UTC().Format(time.TimeOnly), q.end.UTC().Format(time.TimeOnly), q.step, err)
		}
		points, inexact, maxRel = points+p, inexact+i, max(maxRel, r)
	}
	return points, inexact, maxRel, nil
}

// postRange asks base's /api/v1/query_range and reads the response whole.
func postRange(ctx context.Context, base, expr string, start, end time.Time, step time.Duration) (*http.Response, []byte, error) {
	q := url.Values{"query": {expr}, "start": {strconv.FormatInt(start.Unix(), 10)}, "end": {strconv.FormatInt(end.Unix(), 10)},
		"step": {strconv.FormatInt(int64(step/time.Second), 10)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/query_range", strings.NewReader(q.Encode()))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp, data, err
}

// fetchRange is a timed query: the request, and the response read whole
// (not decoded: that is the client's work, not the server's).
func fetchRange(ctx context.Context, base, expr string, start, end time.Time, step time.Duration) error {
	resp, data, err := postRange(ctx, base, expr, start, end, step)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s: %.300s", expr, resp.Status, data)
	}
	return err
}

// fetchPath GETs url and reads the response whole, which must be a 200
// holding want.
func fetchPath(ctx context.Context, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil && (resp.StatusCode != http.StatusOK || !strings.Contains(string(data), want)) {
		err = fmt.Errorf("%s: %s: %.200s", url, resp.Status, data)
	}
	return err
}

// compare times do (given the iteration's number) against Strata and
// VictoriaMetrics in turn, b.N times each, and reports both systems' p50 and p99 and the ratio of the p50s.
// It returns how many times each ran.
func compare(b *testing.B, strata, vm string, do func(i int, base string) error) int {
	var ls, lv []time.Duration
	for i := 0; b.Loop(); i++ {
		for _, sys := range []struct {
			base string
			lat  *[]time.Duration
		}{{strata, &ls}, {vm, &lv}} {
			t0 := time.Now()
			if err := do(i, sys.base); err != nil {
				b.Fatal(err)
			}
			*sys.lat = append(*sys.lat, time.Since(t0))
		}
	}
	p := func(l []time.Duration, q float64) float64 {
		slices.Sort(l)
		return float64(l[min(len(l)-1, int(q*float64(len(l))))].Microseconds()) / 1000
	}
	b.ReportMetric(p(ls, 0.5), "strata-p50-ms")
	b.ReportMetric(p(ls, 0.99), "strata-p99-ms")
	b.ReportMetric(p(lv, 0.5), "vm-p50-ms")
	b.ReportMetric(p(lv, 0.99), "vm-p99-ms")
	b.ReportMetric(p(ls, 0.5)/p(lv, 0.5), "p50-ratio")
	b.ReportMetric(0, "ns/op")
	return len(ls)
}
