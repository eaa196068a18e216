package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratadb/strata/internal/tsbs"
)

func newBench() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Load generators"}
	ingest := &cobra.Command{
		Use:   "ingest",
		Short: "Load TSBS cpu-only shaped line protocol over HTTP and report rows/s",
		Long: `Generate TSBS "cpu-only" shaped data (10 tags, 10 fields per row, N hosts
reporting every 10 s; each field a random walk over 0-100 with two decimals,
or integers as TSBS writes them with --ints) as line protocol, then POST it to a server's
/api/v2/write with several workers. The data is generated before the clock
starts. Prints rows/s, request latency percentiles, the server's peak
resident memory (from process_resident_memory_bytes on /metrics), and the
object-store requests the server made during the run
(strata_objstore_requests_total) per million rows, with what they would
cost per day on S3 at the measured rate (docs/cost.md).`,
		Args: exactArgs(0),
		RunE: runBenchIngest,
	}
	f := ingest.Flags()
	f.String("url", "http://localhost:8086", "the server's HTTP address; several, comma-separated, take the requests in turn (the server figures are the first one's)")
	f.String("table", "cpu", "measurement (table) to write")
	f.Int("hosts", 4000, "number of hosts (series)")
	f.Int("rows", 1_400_000, "rows to write")
	f.Int("batch", 5000, "rows per request")
	f.Int("workers", 8, "concurrent requests")
	f.String("start", "2026-01-01T00:00:00Z", "timestamp of the first row")
	f.Uint64("seed", 1, "seed of the generated values")
	f.Bool("ints", false, "write the values as TSBS does, truncated to integers (usage_user=58i), not with two decimals")
	f.Bool("verify", true, "count the rows back through the server's PromQL API (/api/v1/query) and fail on a difference: a peer that drops data (retention, limits) makes every ratio a lie")
	f.Duration("verify-timeout", 2*time.Minute, "how long the check waits for the counts to match (a server may make rows searchable after it acknowledged them)")
	cmd.AddCommand(ingest, newBenchRemoteWrite(), newBenchQuery())
	return cmd
}

func runBenchIngest(cmd *cobra.Command, args []string) error {
	f := cmd.Flags()
	url, _ := f.GetString("url")
	table, _ := f.GetString("table")
	hosts, _ := f.GetInt("hosts")
	rows, _ := f.GetInt("rows")
	batch, _ := f.GetInt("batch")
	workers, _ := f.GetInt("workers")
	startS, _ := f.GetString("start")
	seed, _ := f.GetUint64("seed")
	ints, _ := f.GetBool("ints")
	verify, _ := f.GetBool("verify")
	verifyTimeout, _ := f.GetDuration("verify-timeout")
	if hosts <= 0 || rows <= 0 || batch <= 0 || workers <= 0 {
		return usagef("--hosts, --rows, --batch and --workers must be positive")
	}
	start, err := time.Parse(time.RFC3339, startS)
	if err != nil {
		return usagef("--start: %v", err)
	}
	out := cmd.OutOrStdout()
	var urls []string
	for _, u := range strings.Split(url, ",") {
		urls = append(urls, strings.TrimRight(strings.TrimSpace(u), "/"))
	}
	url = urls[0]

	// Generate every request body first: random walks per host and field.
	fmt.Fprintf(out, "generating %d rows for %d hosts...\n", rows, hosts)
	walk := tsbs.NewWalk(hosts, seed)
	tagSets := make([]string, hosts)
	for h := range hosts {
		tagSets[h] = table + tsbs.LineTags(h)
	}
	var bodies [][]byte
	var buf bytes.Buffer
	n := 0
	for i := 0; i < rows; i++ {
		h := i % hosts
		buf.WriteString(tagSets[h])
		vals := walk.Next(h)
		for j, name := range tsbs.Fields {
			v := vals[j]
			if j == 0 {
				buf.WriteByte(' ')
			} else {
				buf.WriteByte(',')
			}
			buf.WriteString(name)
			buf.WriteByte('=')
			if ints {
				buf.WriteString(strconv.FormatInt(tsbs.WalkInt(v), 10))
				buf.WriteByte('i')
			} else {
				buf.WriteString(tsbs.WalkText(v))
			}
		}
		buf.WriteByte(' ')
		buf.WriteString(strconv.FormatInt(start.Add(time.Duration(i/hosts)*10*time.Second).UnixNano(), 10))
		buf.WriteByte('\n')
		if n++; n == batch {
			bodies = append(bodies, bytes.Clone(buf.Bytes()))
			buf.Reset()
			n = 0
		}
	}
	if buf.Len() > 0 {
		bodies = append(bodies, bytes.Clone(buf.Bytes()))
	}
	var total int64
	for _, b := range bodies {
		total += int64(len(b))
	}
	fmt.Fprintf(out, "%d requests, %.1f MiB of line protocol; writing with %d workers to %d server(s)...\n", len(bodies), float64(total)/(1<<20), workers, len(urls))

	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	if c := clientTLS(cmd); c.Client() {
		if tr.TLSClientConfig, err = c.ClientTLS(); err != nil {
			return usagef("%v", err)
		}
	}
	client := &http.Client{Transport: tr}
	rss := watchRSS(ctx, client, url+"/metrics")
	before, berr := scrapeMetrics(ctx, client, url+"/metrics")
	var next atomic.Int64
	lat := make([][]time.Duration, workers)
	errc := make(chan error, workers)
	began, clientCPU0, idle0 := time.Now(), processCPU(), machineIdle()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(bodies) || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, urls[i%len(urls)]+"/api/v2/write?bucket=bench&precision=ns", bytes.NewReader(bodies[i]))
				authorize(req)
				resp, err := client.Do(req)
				if err != nil {
					errc <- err
					cancel()
					return
				}
				msg, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					errc <- fmt.Errorf("request %d: %s: %s", i, resp.Status, msg)
					cancel()
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed, clientCPU, idle1 := time.Since(began), processCPU()-clientCPU0, machineIdle()
	after, aerr := scrapeMetrics(context.Background(), client, url+"/metrics")
	if aerr == nil {
		rss.observe(int64(after["process_resident_memory_bytes"]))
	}
	peakRSS := rss.stop()
	cancel()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) time.Duration { return all[min(len(all)-1, int(p*float64(len(all))))] }
	fmt.Fprintf(out, "rows:        %d in %s\n", rows, elapsed.Round(time.Millisecond))
	fmt.Fprintf(out, "throughput:  %.0f rows/s (%.1f MiB/s of line protocol)\n", float64(rows)/elapsed.Seconds(), float64(total)/(1<<20)/elapsed.Seconds())
	fmt.Fprintf(out, "latency:     p50 %s  p99 %s  max %s (per %d-row request)\n", pct(0.5).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), all[len(all)-1].Round(time.Microsecond), batch)
	printRSS(out, peakRSS)
	// The loader shares the machine with the server: its CPU is printed
	// apart, so what the server spent a row is read on its own.
	cpu := fmt.Sprintf("client %.2f s", clientCPU.Seconds())
	if s, ok := serverCPU(before, after); berr == nil && aerr == nil && ok {
		cpu += fmt.Sprintf(", server %.2f s (%.2f µs a row)", s, s/float64(rows)*1e6)
	} else {
		cpu += ", server unknown (no process_cpu_seconds_total on /metrics)"
	}
	if idle0.ok && idle1.ok && idle1.total > idle0.total {
		cpu += fmt.Sprintf("; the machine was %.0f%% idle", 100*float64(idle1.idle-idle0.idle)/float64(idle1.total-idle0.total))
	}
	fmt.Fprintf(out, "CPU:         %s during the run\n", cpu)
	if verify {
		c := ingestCheck{table: table, hosts: hosts, rows: rows, start: start}
		if err := c.run(cmd.Context(), client, url, verifyTimeout); err != nil {
			return err
		}
		fmt.Fprintf(out, "verify:      %s\n", c)
	}
	if berr != nil || aerr != nil {
		fmt.Fprintln(out, "requests:    unknown (no strata_objstore_requests_total on /metrics)")
		return nil
	}
	reqs := requestsByOp(after).sub(requestsByOp(before))
	fmt.Fprintf(out, "requests:    %s during the run; per million rows: %s\n", reqs, reqs.scale(1e6/float64(rows)))
	perDay := reqs.scale(86400 / elapsed.Seconds())
	fmt.Fprintf(out, "at this rate: %.0f PUT/s; per day $%.2f on S3 Standard, $%.2f on S3 Express One Zone (requests only; docs/cost.md)\n",
		reqs["PUT"]/elapsed.Seconds(), perDay.price(s3Standard), perDay.price(s3Express))
	return nil
}

// serverCPU is the server's CPU seconds between two scrapes of its
// /metrics (process_cpu_seconds_total, which Strata and VictoriaMetrics
// both export), and whether both had it.
func serverCPU(before, after map[string]float64) (float64, bool) {
	b, okb := before["process_cpu_seconds_total"]
	a, oka := after["process_cpu_seconds_total"]
	return a - b, okb && oka
}

// processCPU is the user and system CPU this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuTicks are the machine's CPU time, all of it and idle, in clock ticks
// (the first line of /proc/stat; ok false where there is none).
type cpuTicks struct {
	idle, total uint64
	ok          bool
}

// machineIdle reads the machine's CPU ticks: whether a run left CPU idle
// (then it waited on something) or used it all.
func machineIdle() cpuTicks {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}
	}
	return parseCPUTicks(string(data))
}

func parseCPUTicks(stat string) cpuTicks {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return cpuTicks{}
	}
	var t cpuTicks
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cpuTicks{}
		}
		if i >= 8 {
			break // guest time, counted in user time already
		}
		t.total += n
		if i == 3 || i == 4 { // idle, iowait
			t.idle += n
		}
	}
	t.ok = true
	return t
}

// requestCounts are object-store requests by operation.
type requestCounts map[string]float64

// requestsByOp sums strata_objstore_requests_total over results, by op.
func requestsByOp(m map[string]float64) requestCounts {
	out := requestCounts{}
	for k, v := range m {
		labels, ok := strings.CutPrefix(k, "strata_objstore_requests_total{")
		if !ok {
			continue
		}
		for _, l := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
			if op, ok := strings.CutPrefix(l, `op="`); ok {
				out[strings.TrimSuffix(op, `"`)] += v
			}
		}
	}
	return out
}

func (r requestCounts) sub(o requestCounts) requestCounts {
	out := requestCounts{}
	for k, v := range r {
		out[k] = v - o[k]
	}
	return out
}

func (r requestCounts) scale(f float64) requestCounts {
	out := requestCounts{}
	for k, v := range r {
		out[k] = v * f
	}
	return out
}

func (r requestCounts) String() string {
	var parts []string
	for _, op := range []string{"PUT", "GET", "HEAD", "LIST", "DELETE"} {
		parts = append(parts, fmt.Sprintf("%.0f %s", r[op], op))
	}
	return strings.Join(parts, ", ")
}

// requestPrices are USD per 1,000 requests by operation (DELETE is free).
type requestPrices map[string]float64

// S3 request prices, us-east-1, as published by AWS in 2025.
var (
	s3Standard = requestPrices{"PUT": 0.005, "LIST": 0.005, "GET": 0.0004, "HEAD": 0.0004}
	s3Express  = requestPrices{"PUT": 0.00113, "LIST": 0.00113, "GET": 0.00003, "HEAD": 0.00003}
)

func (r requestCounts) price(p requestPrices) float64 {
	total := 0.0
	for op, n := range r {
		total += n / 1000 * p[op]
	}
	return total
}

// authorize sends $STRATA_AUTH_TOKEN, if set.
func authorize(req *http.Request) {
	if tok := os.Getenv("STRATA_AUTH_TOKEN"); tok != "" {
		req.Header.Set("Authorization", "Token "+tok)
	}
}

// rssWatch samples a server's resident memory every 250 ms until stop.
type rssWatch struct {
	peak   atomic.Int64
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// watchRSS starts sampling process_resident_memory_bytes (which Strata and
// VictoriaMetrics both export) from the Prometheus endpoint at url.
func watchRSS(ctx context.Context, c *http.Client, url string) *rssWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &rssWatch{cancel: cancel}
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := scrapeRSS(ctx, c, url); err == nil {
				w.observe(v)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// observe counts a reading taken elsewhere (a last scrape after the run).
func (w *rssWatch) observe(v int64) {
	for p := w.peak.Load(); v > p && !w.peak.CompareAndSwap(p, v); p = w.peak.Load() {
	}
}

// stop ends the sampling and returns the peak (0: never read).
func (w *rssWatch) stop() int64 {
	w.cancel()
	w.done.Wait()
	return w.peak.Load()
}

// printRSS prints the server's peak RSS line.
func printRSS(out io.Writer, peak int64) {
	if peak > 0 {
		fmt.Fprintf(out, "server RSS:  peak %.0f MiB\n", float64(peak)/(1<<20))
	} else {
		fmt.Fprintln(out, "server RSS:  unknown (no process_resident_memory_bytes on /metrics)")
	}
}

// scrapeRSS reads process_resident_memory_bytes from a Prometheus endpoint.
func scrapeRSS(ctx context.Context, c *http.Client, url string) (int64, error) {
	m, err := scrapeMetrics(ctx, c, url)
	if err != nil {
		return 0, err
	}
	v, ok := m["process_resident_memory_bytes"]
	if !ok {
		return 0, fmt.Errorf("no process_resident_memory_bytes at %s", url)
	}
	return int64(v), nil
}

// scrapeMetrics reads a Prometheus text endpoint's samples, by their
// name{labels} as written.
func scrapeMetrics(ctx context.Context, c *http.Client, url string) (map[string]float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	authorize(req) // /metrics needs the token too
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}
