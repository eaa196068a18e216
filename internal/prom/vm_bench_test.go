package prom_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
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

// startVM starts VictoriaMetrics on loopback over a new directory, with
// its rollup result cache off (Strata has none: both evaluate every query),
// and returns its base URL.
func startVM(b *testing.B) string {
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
	cmd := exec.Command(bin, "-storageDataPath="+b.TempDir(), "-httpListenAddr="+addr, "-retentionPeriod=100y",
		"-search.disableCache", "-loggerLevel=ERROR")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := "http://" + addr
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return base
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
// its labels, for comparing the two systems' answers.
func rangeQuery(base, expr string, start, end time.Time, step time.Duration) (map[string][]string, error) {
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
		delete(s.Metric, "__name__")
		k, _ := json.Marshal(s.Metric)
		for _, v := range s.Values {
			out[string(k)] = append(out[string(k)], fmt.Sprintf("%v=%v", v[0], v[1]))
		}
	}
	return out, nil
}

// sameAnswer compares two answers, values to 1e-9 relative (the systems
// sum floats in different orders).
func sameAnswer(a, b map[string][]string) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d series against %d", len(a), len(b))
	}
	for k, va := range a {
		vb := b[k]
		if len(va) != len(vb) {
			return fmt.Errorf("series %s: %d points against %d", k, len(va), len(vb))
		}
		for i := range va {
			ta, xa, _ := strings.Cut(va[i], "=")
			tb, xb, _ := strings.Cut(vb[i], "=")
			fa, _ := strconv.ParseFloat(xa, 64)
			fb, _ := strconv.ParseFloat(xb, 64)
			if ta != tb || math.Abs(fa-fb) > 1e-9*max(1, math.Abs(fa)) {
				return fmt.Errorf("series %s point %d: %s against %s", k, i, va[i], vb[i])
			}
		}
	}
	return nil
}

// BenchmarkQueryVsVictoriaMetrics loads the same TSBS cpu-only rows (4,000
// hosts, 10 fields, 10 s apart, $STRATA_BENCH_HOURS hours, default 12)
// into Strata (a standalone, flushed and compacted) and VictoriaMetrics
// v1.151.0 (force-merged), then times three queries through each one's
// /api/v1/query_range, alternating between the systems, after checking
// that both give the same answer. Strata runs on file:// and on MinIO;
// VictoriaMetrics on its local disk. Each sub-benchmark reports both
// systems' p50 and p99 and the ratio of the p50s (Strata / VM).
//
//	go test -run XXX -bench QueryVsVictoriaMetrics -benchtime 30x -timeout 2h ./internal/prom
func BenchmarkQueryVsVictoriaMetrics(b *testing.B) {
	hours := 12
	if s := os.Getenv("STRATA_BENCH_HOURS"); s != "" {
		var err error
		if hours, err = strconv.Atoi(s); err != nil || hours < 1 {
			b.Fatalf("STRATA_BENCH_HOURS=%q", s)
		}
	}
	const hosts = 4000
	rounds := hours * 360
	vm := startVM(b)
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
	last := end.Add(-tsbs.Interval)
	hourIn := start.Add(time.Hour) // the first full hour's end
	if hourIn.After(last) {
		hourIn = last
	}
	queries := []struct {
		name       string
		expr       string
		start, end time.Time
		step       time.Duration
	}{
		{"1-host-1h", `max(max_over_time(cpu_usage_user{hostname="host_1"}[1m]))`, last.Add(-time.Hour), last, time.Minute},
		{"8-hosts-12h", `max(max_over_time(cpu_usage_user{hostname=~"host_1|host_2|host_3|host_4|host_5|host_6|host_7|host_8"}[1m]))`, start, last, time.Minute},
		{"all-hosts-avg-12h", `avg by (hostname) (avg_over_time(cpu_usage_user[1h]))`, hourIn, last, time.Hour},
	}
	for _, store := range []string{"file", "minio"} {
		ctx := context.Background()
		var bucket *objstore.Store
		var err error
		if store == "file" {
			bucket, err = objstore.Open(ctx, "file://"+b.TempDir(), objstore.Options{})
		} else {
			bucket, err = objstore.Open(ctx, objstoretest.MinIO(b).NewBucket(b), objstore.Options{})
		}
		if err != nil {
			b.Fatal(err)
		}
		n := servertest.Start(b, bucket, servertest.Options{})
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
		stats, _ := n.Engine().Stats(context.Background(), "cpu")
		b.Logf("Strata on %s: %d rows loaded in %s, flushed and compacted in %s more: %+v", store, rounds*hosts, loaded.Round(time.Second), (time.Since(began) - loaded).Round(time.Second), stats)
		for _, q := range queries {
			sa, err := rangeQuery(strata, q.expr, q.start, q.end, q.step)
			if err != nil {
				b.Fatal(err)
			}
			va, err := rangeQuery(vm, q.expr, q.start, q.end, q.step)
			if err != nil {
				b.Fatal(err)
			}
			if err := sameAnswer(sa, va); err != nil {
				b.Fatalf("%s: Strata and VictoriaMetrics disagree: %v", q.name, err)
			}
			b.Run(store+"/"+q.name, func(b *testing.B) {
				gets := bucket.Requests()[objstore.OpGet]
				n := compare(b, strata, vm, func(base string) error { return fetchRange(ctx, base, q.expr, q.start, q.end, q.step) })
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
				want := "host_3999"
				if l.name == "labels" {
					want = "hostname"
				}
				_ = compare(b, strata, vm, func(base string) error { return fetchPath(ctx, base+l.path, want) })
			})
		}
		n.Stop()
	}
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

// compare times do against Strata and VictoriaMetrics in turn, b.N times
// each, and reports both systems' p50 and p99 and the ratio of the p50s.
// It returns how many times each ran.
func compare(b *testing.B, strata, vm string, do func(base string) error) int {
	var ls, lv []time.Duration
	for b.Loop() {
		for _, sys := range []struct {
			base string
			lat  *[]time.Duration
		}{{strata, &ls}, {vm, &lv}} {
			t0 := time.Now()
			if err := do(sys.base); err != nil {
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
