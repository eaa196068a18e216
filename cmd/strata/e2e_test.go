package main

// End-to-end tests: they build the strata binary, run `strata standalone`
// as a real process, write through HTTP with the InfluxDB client library
// and plain HTTP, read through the CLI, and kill the server with SIGKILL.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	influxdb2 "github.com/influxdata/influxdb-client-go/v2"
)

var strataBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "strata-e2e-")
	if err != nil {
		panic(err)
	}
	strataBin = filepath.Join(dir, "strata")
	if out, err := exec.Command("go", "build", "-o", strataBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building strata: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running `strata standalone`.
type proc struct {
	cmd        *exec.Cmd
	http, grpc string
	logs       *syncBuffer
	exited     chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

var servingRE = regexp.MustCompile(`msg=serving http=(\S+) grpc=(\S+)`)

// start runs the server on loopback ports of its own choosing and waits
// until it logs its addresses.
func start(t *testing.T, dataDir string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"standalone", "--data-dir", dataDir, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"}, extra...)
	cmd := exec.Command(strataBin, args...)
	pr, pw := io.Pipe()
	p := &proc{cmd: cmd, logs: &syncBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = pw
	cmd.Stdout = p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			_, _ = p.logs.Write([]byte(line + "\n"))
			if m := servingRE.FindStringSubmatch(line); m != nil {
				addrs <- m[1:]
			}
		}
	}()
	go func() { p.exited <- cmd.Wait(); _ = pw.Close() }()
	select {
	case a := <-addrs:
		p.http, p.grpc = "http://"+a[0], a[1]
	case err := <-p.exited:
		t.Fatalf("strata standalone exited: %v\n%s", err, p.logs.String())
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("strata standalone did not start in 60s\n%s", p.logs.String())
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			t.Logf("strata standalone stopped: %v", <-p.exited)
		}
	})
	return p
}

// stop sends sig and waits for the process to exit.
func (p *proc) stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	_ = p.cmd.Process.Signal(sig) // failing that, it has exited: the wait below says so
	select {
	case err := <-p.exited:
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("no exit 60s after %v\n%s", sig, p.logs.String())
	}
	return nil
}

// cli runs the strata CLI against p and returns stdout, stderr and the
// exit code.
func (p *proc) cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(strataBin, args...)
	cmd.Env = append(os.Environ(), "STRATA_SERVER="+p.grpc)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// queryCSV runs `strata query -o csv` and returns the records (header
// first).
func (p *proc) queryCSV(t *testing.T, args ...string) [][]string {
	t.Helper()
	out, errs, code := p.cli(t, append([]string{"query", "-o", "csv"}, args...)...)
	if code != 0 {
		t.Fatalf("query %v: exit %d: %s", args, code, errs)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("query output: %v\n%s", err, out)
	}
	return recs
}

func post(t *testing.T, url, body string, gz bool) (int, string) {
	t.Helper()
	var r io.Reader = strings.NewReader(body)
	if gz {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		r = &b
	}
	req, _ := http.NewRequest(http.MethodPost, url, r)
	if gz {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(msg)
}

func TestWriteWithInfluxClientQueryWithCLI(t *testing.T) {
	p := start(t, t.TempDir(), "--max-body-bytes", "1048576")
	ctx := context.Background()

	// InfluxDB 2.x client library.
	client := influxdb2.NewClient(p.http, "unused-token")
	defer client.Close()
	if ok, err := client.Ping(ctx); !ok || err != nil {
		t.Fatalf("ping: %v %v", ok, err)
	}
	w := client.WriteAPIBlocking("org", "bucket")
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range 10 {
		pt := influxdb2.NewPoint("weather", map[string]string{"city": "oslo", "sensor": "s 1"},
			map[string]any{"temp": float64(i) + 0.5, "count": int64(i), "ok": i%2 == 0, "note": fmt.Sprintf("n=%d, \"q\"", i)}, base.Add(time.Duration(i)*time.Minute))
		if err := w.WritePoint(ctx, pt); err != nil {
			t.Fatalf("write point %d: %v", i, err)
		}
	}
	// InfluxDB 1.x endpoint, gzip, second precision, escaped names.
	code, msg := post(t, p.http+"/write?db=x&precision=s", fmt.Sprintf("weather,city=bergen,sensor=s\\ 1 temp=-3,count=7i %d\n", base.Unix()), true)
	if code != http.StatusNoContent {
		t.Fatalf("v1 write: %d %s", code, msg)
	}

	recs := p.queryCSV(t, "weather", "--tag", "city=oslo", "--start", base.Add(2*time.Minute).Format(time.RFC3339), "--end", base.Add(4*time.Minute).Format(time.RFC3339))
	header := strings.Join(recs[0], ",")
	if len(recs) != 3 || !strings.HasPrefix(header, "time,") || !strings.Contains(header, "city") || !strings.Contains(header, "temp") {
		t.Fatalf("query: %v", recs)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	if r := recs[1]; r[col["temp"]] != "2.5" || r[col["count"]] != "2" || r[col["ok"]] != "true" || r[col["note"]] != `n=2, "q"` || r[col["sensor"]] != "s 1" {
		t.Fatalf("row: %v", r)
	}
	all := p.queryCSV(t, "weather")
	if len(all) != 12 {
		t.Fatalf("all rows: %d", len(all)-1)
	}
	bergen := 0
	for _, r := range all[1:] {
		if r[col["city"]] == "bergen" {
			bergen++
			if r[col["temp"]] != "-3" || r[col["count"]] != "7" || r[col["sensor"]] != "s 1" || r[0] != "2026-03-01T12:00:00Z" {
				t.Fatalf("bergen row: %v", r)
			}
		}
	}
	if bergen != 1 {
		t.Fatalf("%d bergen rows", bergen)
	}

	// Bad input: a malformed line names its line; nothing is written.
	code, msg = post(t, p.http+"/api/v2/write?bucket=b", "weather,city=x temp=1 1\nweather temp=\nweather,city=y temp=2 2\n", false)
	if code != 400 || !strings.Contains(msg, "line 2") || !strings.Contains(msg, "nothing written") {
		t.Fatalf("malformed: %d %s", code, msg)
	}
	// A type conflict names the column and both types.
	code, msg = post(t, p.http+"/api/v2/write?bucket=b", "weather,city=z temp=1 1\nweather,city=z temp=\"hot\" 2\n", false)
	if code != 400 || !strings.Contains(msg, "temp") || !strings.Contains(msg, "float64") || !strings.Contains(msg, "string") || !strings.Contains(msg, "line 2") {
		t.Fatalf("conflict: %d %s", code, msg)
	}
	if n := len(p.queryCSV(t, "weather")); n != 12 {
		t.Fatalf("rejected requests wrote rows: %d", n-1)
	}
	// Too large; missing bucket; bad precision.
	if code, msg = post(t, p.http+"/api/v2/write?bucket=b", strings.Repeat("m x=1\n", 2<<20/6), false); code != 413 {
		t.Fatalf("oversized: %d %s", code, msg)
	}
	if code, _ = post(t, p.http+"/api/v2/write", "m x=1", false); code != 400 {
		t.Fatalf("no bucket: %d", code)
	}
	if code, _ = post(t, p.http+"/write?db=x&precision=d", "m x=1", false); code != 400 {
		t.Fatalf("bad precision: %d", code)
	}

	// Tables, describe, flush, exit codes.
	out, _, code := p.cli(t, "table", "list")
	if code != 0 || !strings.Contains(out, "weather") {
		t.Fatalf("table list: %d %s", code, out)
	}
	if _, _, code = p.cli(t, "admin", "flush", "weather"); code != 0 {
		t.Fatalf("flush: %d", code)
	}
	if out, _, code := p.cli(t, "admin", "compact", "weather", "--all"); code != 0 || !strings.Contains(out, "nothing to compact") {
		t.Fatalf("compact one file: %d %s", code, out)
	}
	if out, _, code := p.cli(t, "admin", "cancel-compaction", "weather"); code != 0 || !strings.Contains(out, "cancelled 0") {
		t.Fatalf("cancel-compaction: %d %s", code, out)
	}
	out, _, code = p.cli(t, "table", "describe", "weather", "-o", "json")
	if code != 0 || !strings.Contains(out, `"role": "tag"`) || !strings.Contains(out, `"files": "1"`) {
		t.Fatalf("describe: %d %s", code, out)
	}
	if _, errs, code := p.cli(t, "query", "nosuch"); code != exitNotFound || !strings.Contains(errs, "nosuch") {
		t.Fatalf("missing table: exit %d: %s", code, errs)
	}
	if _, _, code := p.cli(t, "query", "weather", "--start", "yesterday-ish"); code != exitUsage {
		t.Fatalf("bad --start: exit %d", code)
	}
	if _, _, code := p.cli(t, "query", "weather", "--fields", "nope"); code != exitUsage {
		t.Fatalf("unknown field: exit %d", code)
	}
	if _, _, code := p.cli(t, "query"); code != exitUsage {
		t.Fatalf("no table: exit %d", code)
	}
	if _, _, code := p.cli(t, "query", "weather", "--server", "127.0.0.1:1", "--timeout", "2s"); code != exitUnavailable {
		t.Fatalf("unreachable server: exit %d", code)
	}
	// PromQL through the HTTP API: an instant and a range query.
	httpAddr := strings.TrimPrefix(p.http, "http://")
	recs = p.queryCSV(t, "--promql", `weather_temp{city="oslo"}`, "--end", base.Add(4*time.Minute).Format(time.RFC3339), "--http", httpAddr)
	if len(recs) != 2 || recs[1][0] != `weather_temp{city="oslo",sensor="s 1"}` || recs[1][2] != "4.5" {
		t.Fatalf("instant PromQL: %v", recs)
	}
	recs = p.queryCSV(t, "--promql", "max(weather_temp)", "--start", base.Format(time.RFC3339), "--end", base.Add(9*time.Minute).Format(time.RFC3339), "--step", "3m", "--http", httpAddr)
	var got []string
	for _, r := range recs[1:] {
		got = append(got, r[2])
	}
	if strings.Join(got, " ") != "0.5 3.5 6.5 9.5" {
		t.Fatalf("range PromQL: %v", recs)
	}
	if _, errs, code := p.cli(t, "query", "--promql", "sum(", "--http", httpAddr); code == 0 || !strings.Contains(errs, "parse error") {
		t.Fatalf("bad PromQL: exit %d: %s", code, errs)
	}
}

func TestCLIWriteLineProtocolAndCSV(t *testing.T) {
	p := start(t, t.TempDir())
	dir := t.TempDir()
	lp := filepath.Join(dir, "in.lp")
	var b strings.Builder
	for i := range 12_000 {
		fmt.Fprintf(&b, "mem,host=h%d used=%di %d\n", i%7, i, int64(i)*1e9)
	}
	if err := os.WriteFile(lp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code := p.cli(t, "write", lp, "--batch", "5000")
	if code != 0 || !strings.Contains(out, "wrote 12000 points") {
		t.Fatalf("write lp: %d %s %s", code, out, errs)
	}
	csvPath := filepath.Join(dir, "in.csv")
	if err := os.WriteFile(csvPath, []byte("time,host,load,count:int64,up\n2026-01-01T00:00:00Z,a,0.5,3,true\n2026-01-01T00:00:10Z,a,,4,false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code = p.cli(t, "write", csvPath, "--table", "sys", "--tags", "host")
	if code != 0 || !strings.Contains(out, "wrote 2 points") {
		t.Fatalf("write csv: %d %s %s", code, out, errs)
	}
	recs := p.queryCSV(t, "sys")
	if len(recs) != 3 || strings.Join(recs[0], ",") != "time,host,load,count,up" || strings.Join(recs[2], ",") != "2026-01-01T00:00:10Z,a,,4,false" {
		t.Fatalf("csv rows: %v", recs)
	}
	if n := len(p.queryCSV(t, "mem")); n != 12_001 {
		t.Fatalf("mem rows: %d", n-1)
	}
	// Table lifecycle and stdin.
	if out, errs, code := p.cli(t, "table", "create", "logs", "--regions", "2", "--ttl", "720h", "--compaction-window", "24h"); code != 0 || !strings.Contains(out, "2 regions") {
		t.Fatalf("table create: %d %s %s", code, out, errs)
	}
	if _, _, code := p.cli(t, "table", "create", "logs"); code != exitNotFound {
		t.Fatalf("duplicate create: exit %d", code)
	}
	cmd := exec.Command(strataBin, "write", "-")
	cmd.Env = append(os.Environ(), "STRATA_SERVER="+p.grpc)
	cmd.Stdin = strings.NewReader(fmt.Sprintf("logs,app=x msg=\"hello\" %d\nlogs,app=y msg=\"bye\" %d\n", time.Now().UnixNano(), time.Now().UnixNano()))
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "wrote 2 points") {
		t.Fatalf("write from stdin: %v %s", err, out)
	}
	if n := len(p.queryCSV(t, "logs")); n != 3 {
		t.Fatalf("logs rows: %d", n-1)
	}
	if _, _, code := p.cli(t, "table", "drop", "logs"); code != 0 {
		t.Fatalf("drop: exit %d", code)
	}
	if _, _, code := p.cli(t, "query", "logs"); code != exitNotFound {
		t.Fatalf("query dropped table: exit %d", code)
	}
	// A malformed line: the CLI names file and line and exits 2.
	bad := filepath.Join(dir, "bad.lp")
	if err := os.WriteFile(bad, []byte("mem,host=z used=1i 1\nmem,host=z used=oops 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs, code = p.cli(t, "write", bad)
	if code != exitUsage || !strings.Contains(errs, "bad.lp: line 2") {
		t.Fatalf("bad lp: %d %s", code, errs)
	}
}

// An acknowledged write survives kill -9 at any moment; a request in
// flight at the kill is applied wholly or not at all.
func TestKill9MidIngestLosesNothingAcknowledged(t *testing.T) {
	dataDir := t.TempDir()
	p := start(t, dataDir, "--flush-bytes", "2097152") // small: flushes happen during ingest
	const perReq, hosts = 500, 50
	var mu sync.Mutex
	acked := 0     // requests answered 204, in order
	inflight := -1 // the request that was in flight when the server died
	done := make(chan struct{})
	reached := make(chan struct{}) // closed at the 200th acknowledgement
	body := func(req int) string {
		var b strings.Builder
		for j := range perReq {
			k := req*perReq + j
			fmt.Fprintf(&b, "cpu,host=h%d usage=%d.5,req=%di %d\n", k%hosts, k, req, int64(k/hosts)*1e9)
		}
		return b.String()
	}
	go func() {
		defer close(done)
		for req := 0; ; req++ {
			mu.Lock()
			inflight = req
			mu.Unlock()
			resp, err := http.Post(p.http+"/api/v2/write?bucket=b", "text/plain", strings.NewReader(body(req)))
			if err != nil {
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				return
			}
			mu.Lock()
			acked = req + 1
			mu.Unlock()
			if req+1 == 200 {
				close(reached)
			}
		}
	}()
	// Kill once enough has been acknowledged that flushes have happened.
	select {
	case <-reached:
	case <-done:
		t.Fatalf("writer stopped early\n%s", p.logs.String())
	}
	_ = p.stop(t, syscall.SIGKILL) // killed: its exit status says only that
	<-done
	mu.Lock()
	nAcked, nInflight := acked, inflight
	mu.Unlock()

	q := start(t, dataDir)
	recs := q.queryCSV(t, "cpu", "--fields", "req")
	reqs := map[int]int{}
	for _, r := range recs[1:] {
		n, err := strconv.Atoi(r[2])
		if err != nil {
			t.Fatalf("row %v", r)
		}
		reqs[n]++
	}
	for req := range nAcked {
		if reqs[req] != perReq {
			t.Fatalf("acknowledged request %d has %d of %d rows after kill -9", req, reqs[req], perReq)
		}
	}
	if c := reqs[nInflight]; nInflight >= nAcked && c != 0 && c != perReq {
		t.Fatalf("in-flight request %d is half applied: %d rows", nInflight, c)
	}
	for req := range reqs {
		if req > nInflight {
			t.Fatalf("rows of request %d that was never sent", req)
		}
	}
	t.Logf("killed after %d acknowledged requests (%d rows); all present after restart", nAcked, nAcked*perReq)

	// SIGTERM shuts down gracefully: everything is flushed, so the next
	// start replays no WAL.
	if err := q.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("graceful shutdown: %v\n%s", err, q.logs.String())
	}
	if !strings.Contains(q.logs.String(), "shut down cleanly") {
		t.Fatalf("no clean shutdown:\n%s", q.logs.String())
	}
	r := start(t, dataDir)
	out, _, code := r.cli(t, "table", "describe", "cpu", "-o", "csv")
	if code != 0 || !strings.Contains(out, "memtable_bytes") {
		t.Fatalf("describe: %s", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := strings.Split(lines[len(lines)-1], ",")
	if last[4] != "0" {
		t.Fatalf("memtable after a graceful restart holds %s bytes (WAL replayed)", last[4])
	}
}

// Truncate, GC through the CLI, and fsck of the store afterwards: clean,
// then with a planted orphan (exit 1), then with a live file deleted
// (exit 2).
func TestTruncateGCAndFsck(t *testing.T) {
	dataDir := t.TempDir()
	p := start(t, dataDir, "--gc-interval", "0")
	// Created, not left to the write: a table of its own regions, whose
	// truncate leaves files for GC (a measurement a write creates is a
	// logical table, whose truncate writes tombstones in __lines).
	if _, errs, code := p.cli(t, "table", "create", "cpu"); code != 0 {
		t.Fatalf("create: %s", errs)
	}
	var b strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&b, "cpu,host=h%d v=%d %d\n", i%5, i, int64(i)*1e9)
	}
	if code, body := post(t, p.http+"/write?db=x", b.String(), false); code != 204 {
		t.Fatalf("write: %d %s", code, body)
	}
	for i := range 2 {
		if _, errs, code := p.cli(t, "admin", "flush", "cpu"); code != 0 {
			t.Fatalf("flush %d: %s", i, errs)
		}
		post(t, p.http+"/write?db=x", "cpu,host=late v=1 5000000000000\n", false)
	}
	if out, errs, code := p.cli(t, "table", "truncate", "cpu"); code != 0 || !strings.Contains(out, "truncated table cpu") {
		t.Fatalf("truncate: %d %s %s", code, out, errs)
	}
	if n := len(p.queryCSV(t, "cpu")); n != 1 {
		t.Fatalf("%d rows after truncate", n-1)
	}
	if _, _, code := p.cli(t, "table", "truncate", "nope"); code != exitNotFound {
		t.Fatalf("truncate of a missing table: exit %d", code)
	}
	post(t, p.http+"/write?db=x", "cpu,host=new v=7 6000000000000\n", false)
	p.cli(t, "admin", "flush", "cpu")

	// Fast GC: a dry run names the truncated files, then a run with no
	// lingering deletes them.
	out, errs, code := p.cli(t, "admin", "gc", "run", "--table", "cpu", "--dry-run", "--lingering", "0", "-o", "json")
	var dry []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &dry) != nil || len(dry) != 1 || dry[0]["removed_files"] == nil || dry[0]["dry_run"] != true {
		t.Fatalf("gc dry run: %d %s %s", code, out, errs)
	}
	out, errs, code = p.cli(t, "admin", "gc", "run", "--table", "cpu", "--lingering", "0")
	if code != 0 || !strings.Contains(out, "removed_files") {
		t.Fatalf("gc run: %d %s %s", code, out, errs)
	}
	out, errs, code = p.cli(t, "admin", "gc", "run", "--full", "--min-age", "0")
	if code != 0 || !strings.Contains(out, "orphans") || strings.Contains(out, "orphan ") {
		t.Fatalf("full gc: %d %s %s", code, out, errs)
	}
	if _, errs, code := p.cli(t, "admin", "gc", "run", "--table", "cpu", "--region", "1/0"); code != exitUsage {
		t.Fatalf("both --table and --region: exit %d %s", code, errs)
	}
	if _, errs, code := p.cli(t, "admin", "gc", "run", "--region", "x"); code != exitUsage {
		t.Fatalf("bad region: exit %d %s", code, errs)
	}
	// A dropped table's entries in the node's WAL stream go with it: the
	// drop seals the stream and deletes the segments no other table
	// needs; fsck below finds nothing unowned.
	if _, errs, code := p.cli(t, "table", "create", "tmp", "--regions", "2"); code != 0 {
		t.Fatalf("create tmp: %s", errs)
	}
	for i := range 3 {
		if code, body := post(t, p.http+"/write?db=x", fmt.Sprintf("tmp,host=h%d v=1 %d\n", i, 7000000000000+i), false); code != 204 {
			t.Fatalf("write tmp: %d %s", code, body)
		}
	}
	if _, errs, code := p.cli(t, "table", "drop", "tmp"); code != 0 {
		t.Fatalf("drop tmp: %s", errs)
	}
	if err := p.stop(t, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}

	store := "file://" + filepath.Join(dataDir, "store")
	out, errs, code = p.cli(t, "fsck", "--store", store)
	if code != 0 || !strings.Contains(out, "0 missing, 0 unowned") || !strings.Contains(out, "WAL streams:") {
		t.Fatalf("fsck of a clean store: %d\n%s%s", code, out, errs)
	}
	// A planted unowned SST: exit 1, or 0 with --allow-orphans.
	sstDir := filepath.Join(dataDir, "store", "1", "0", "sst")
	if err := os.MkdirAll(sstDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sstDir, "01JPLANTEDPLANTEDPLANTED00.parquet"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = p.cli(t, "fsck", "--store", store, "--table", "1")
	if code != 1 || !strings.Contains(out, "unowned sst 1/0/sst/01JPLANTEDPLANTEDPLANTED00.parquet") {
		t.Fatalf("fsck with an orphan: %d\n%s", code, out)
	}
	if _, _, code = p.cli(t, "fsck", "--store", store, "--allow-orphans"); code != 0 {
		t.Fatalf("fsck --allow-orphans: exit %d", code)
	}
	// A live file deleted: data loss, exit 2, also in JSON.
	var rep struct {
		Regions []struct {
			Region  string   `json:"region"`
			Missing []string `json:"missing"`
		} `json:"regions"`
	}
	missing := func() int { // of region 1/0 (the dropped table's regions may linger until the drop's final sweep)
		for _, g := range rep.Regions {
			if g.Region == "1/0" {
				return len(g.Missing)
			}
		}
		return -1
	}
	out, _, _ = p.cli(t, "fsck", "--store", store, "-o", "json", "--allow-orphans")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	// First only its series index (label queries of the region would
	// fail), then its SST too.
	for _, suffix := range []string{".series", ".parquet"} {
		ents, _ := os.ReadDir(sstDir)
		for _, e := range ents {
			if !strings.Contains(e.Name(), "PLANTED") && strings.HasSuffix(e.Name(), suffix) {
				if err := os.Remove(filepath.Join(sstDir, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
		}
		out, _, code = p.cli(t, "fsck", "--store", store, "-o", "json", "--allow-orphans")
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 2 || missing() != 1 {
			t.Fatalf("fsck with a live file's %s missing: %d %v\n%s", suffix, code, err, out)
		}
	}
	if _, _, code = p.cli(t, "fsck"); code != exitUsage {
		t.Fatalf("fsck without --store: exit %d", code)
	}
}
