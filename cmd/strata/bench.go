package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratadb/strata/internal/tsbs"
)

func newBench() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Load generators"}
	ingest := &cobra.Command{
		Use:   "ingest",
		Short: "Load TSBS cpu-only shaped line protocol over HTTP and report rows/s",
		Long: `Generate TSBS "cpu-only" shaped data (10 tags, 10 float fields per row, N
hosts reporting every 10 s) as line protocol, then POST it to a server's
/api/v2/write with several workers. The data is generated before the clock
starts. Prints rows/s, request latency percentiles and the server's peak
resident memory (from process_resident_memory_bytes on /metrics).`,
		Args: exactArgs(0),
		RunE: runBenchIngest,
	}
	f := ingest.Flags()
	f.String("url", "http://localhost:8086", "the server's HTTP address")
	f.String("table", "cpu", "measurement (table) to write")
	f.Int("hosts", 4000, "number of hosts (series)")
	f.Int("rows", 1_400_000, "rows to write")
	f.Int("batch", 5000, "rows per request")
	f.Int("workers", 8, "concurrent requests")
	f.String("start", "2026-01-01T00:00:00Z", "timestamp of the first row")
	f.Uint64("seed", 1, "seed of the generated values")
	cmd.AddCommand(ingest)
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
	if hosts <= 0 || rows <= 0 || batch <= 0 || workers <= 0 {
		return usagef("--hosts, --rows, --batch and --workers must be positive")
	}
	start, err := time.Parse(time.RFC3339, startS)
	if err != nil {
		return usagef("--start: %v", err)
	}
	out := cmd.OutOrStdout()
	url = strings.TrimRight(url, "/")

	// Generate every request body first: random walks per host and field.
	fmt.Fprintf(out, "generating %d rows for %d hosts...\n", rows, hosts)
	rng := rand.New(rand.NewPCG(seed, 7))
	tagSets := make([]string, hosts)
	vals := make([][]float64, hosts)
	for h := range hosts {
		tagSets[h] = table + tsbs.LineTags(h)
		vals[h] = make([]float64, len(tsbs.Fields))
		for j := range vals[h] {
			vals[h][j] = rng.Float64() * 100
		}
	}
	var bodies [][]byte
	var buf bytes.Buffer
	n := 0
	for i := 0; i < rows; i++ {
		h := i % hosts
		buf.WriteString(tagSets[h])
		for j, name := range tsbs.Fields {
			v := vals[h][j] + rng.NormFloat64()
			v = min(100, max(0, v))
			vals[h][j] = v
			if j == 0 {
				buf.WriteByte(' ')
			} else {
				buf.WriteByte(',')
			}
			buf.WriteString(name)
			buf.WriteByte('=')
			buf.WriteString(strconv.FormatFloat(v, 'f', 2, 64))
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
	fmt.Fprintf(out, "%d requests, %.1f MiB of line protocol; writing with %d workers...\n", len(bodies), float64(total)/(1<<20), workers)

	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	var peakRSS atomic.Int64
	var rssWG sync.WaitGroup
	rssWG.Add(1)
	go func() {
		defer rssWG.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := scrapeRSS(ctx, client, url+"/metrics"); err == nil && v > peakRSS.Load() {
				peakRSS.Store(v)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	var next atomic.Int64
	lat := make([][]time.Duration, workers)
	errc := make(chan error, workers)
	began := time.Now()
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
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/api/v2/write?bucket=bench&precision=ns", bytes.NewReader(bodies[i]))
				if tok := os.Getenv("STRATA_AUTH_TOKEN"); tok != "" {
					req.Header.Set("Authorization", "Token "+tok)
				}
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
	elapsed := time.Since(began)
	if v, err := scrapeRSS(context.Background(), client, url+"/metrics"); err == nil && v > peakRSS.Load() {
		peakRSS.Store(v)
	}
	cancel()
	rssWG.Wait()
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
	if v := peakRSS.Load(); v > 0 {
		fmt.Fprintf(out, "server RSS:  peak %.0f MiB\n", float64(v)/(1<<20))
	} else {
		fmt.Fprintln(out, "server RSS:  unknown (no process_resident_memory_bytes on /metrics)")
	}
	return nil
}

// scrapeRSS reads process_resident_memory_bytes from a Prometheus endpoint.
func scrapeRSS(ctx context.Context, c *http.Client, url string) (int64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_resident_memory_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("no process_resident_memory_bytes at %s", url)
}
