package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rowsQuery counts table t's rows (freezeOwner's: timestamps in the first
// hours of 1970) through PromQL.
const rowsQuery = "sum(count_over_time(t_v[100d]))"

// queryRows runs rowsQuery on a datanode's Prometheus API and returns the
// count, or the error the datanode answered with.
func queryRows(httpAddr string) (int, error) { return queryWithTimeout(httpAddr, "150s") }

// queryWithTimeout is queryRows with the query's timeout parameter.
func queryWithTimeout(httpAddr, timeout string) (int, error) {
	c := &http.Client{Timeout: 3 * time.Minute}
	resp, err := c.Get("http://" + httpAddr + "/api/v1/query?time=8640000&timeout=" + timeout + "&query=" + url.QueryEscape(rowsQuery))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return 0, fmt.Errorf("%d %s", resp.StatusCode, data)
	}
	if out.Status != "success" {
		return 0, fmt.Errorf("%d %s", resp.StatusCode, out.Error)
	}
	if len(out.Data.Result) != 1 {
		return 0, nil
	}
	s, _ := out.Data.Result[0].Value[1].(string)
	n, err := strconv.Atoi(s)
	return n, err
}

// metricValue reads one unlabelled metric from a datanode's /metrics.
func metricValue(t *testing.T, httpAddr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s on %s", name, httpAddr)
	return 0
}

// answer is what a call run by later returned, and when.
type answer struct {
	n   int
	err error
	at  time.Time
}

// later runs call in a goroutine and hands its answer over.
func later(call func() (int, error)) <-chan answer {
	done := make(chan answer, 1)
	go func() {
		n, err := call()
		done <- answer{n, err, time.Now()}
	}()
	return done
}

// A query sent to a datanode while the owner of the region it reads is
// frozen (SIGSTOP) opens a scan stream the owner never answers. It must
// neither hang nor answer in part: once the owner's lease ends, the stream
// is cancelled and the scan starts again on the region's new owner, and
// the query answers every row.
func TestQueryThroughAFrozenOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and waits for a lease to expire")
	}
	f := ownedTable(t)
	want := len(f.acked)
	if n, err := queryRows(f.nw.http); err != nil || n != want {
		t.Fatalf("before the freeze: %d rows, %v; want %d", n, err, want)
	}
	retries := metricValue(t, f.nw.http, "strata_remote_scan_retries_total")
	f.freeze()
	done := later(func() (int, error) { return queryRows(f.nw.http) })
	// The query's stream to the frozen owner is open while metasrv still
	// places the region there: it was sent to a frozen node.
	for end := time.Now().Add(60 * time.Second); metricValue(t, f.nw.http, "strata_remote_scans") < 1; {
		if time.Now().After(end) {
			t.Fatal("no remote scan open on the querying datanode after 60 s")
		}
		time.Sleep(20 * time.Millisecond) // another process's state, read from its metrics
	}
	st := placed(t, f.c, 1, time.Second, "")
	if st.Regions[0].Owner != f.oldID {
		t.Fatalf("the region moved to %s before the query reached its frozen owner: the machine is too slow for this test", st.Regions[0].Owner)
	}
	select {
	case a := <-done:
		t.Fatalf("the query answered while the region's only owner was frozen: %d rows, %v", a.n, a.err)
	default:
	}
	f.failover()
	select {
	case a := <-done:
		if a.err != nil || a.n != want {
			t.Fatalf("query across the failover: %d rows, %v; want %d", a.n, a.err, want)
		}
		t.Logf("query answered %d rows %v after the freeze", a.n, a.at.Sub(f.paused).Round(100*time.Millisecond))
	case <-time.After(2 * time.Minute):
		t.Fatal("no answer 2 min after the region reopened on a live datanode")
	}
	f.retriedAndClosed(retries)
}

// retriedAndClosed checks, once f.nw answered across the failover, that
// it started a call to another datanode again (its
// strata_remote_scan_retries_total above retries) and left none open.
func (f *frozenOwner) retriedAndClosed(retries float64) {
	f.t.Helper()
	if r := metricValue(f.t, f.nw.http, "strata_remote_scan_retries_total"); r <= retries {
		f.t.Fatalf("%s started no call to another datanode again (%v before, %v after)", f.nw.name, retries, r)
	}
	if open := metricValue(f.t, f.nw.http, "strata_remote_scans"); open != 0 {
		f.t.Fatalf("%v calls to other datanodes still open after the answer", open)
	}
}

// Queries on both datanodes, in a loop, while the region they read
// moves back and forth: every answer has every row, or is an error naming
// the region. None is partial.
func TestQueriesWhileTheRegionMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	f := ownedTable(t)
	for range 20 {
		if code, err := f.write(f.old, 1000); code != http.StatusNoContent {
			t.Fatalf("write: %d %v", code, err)
		}
	}
	want := len(f.acked)
	f.askWhileMoving(6, func(p *proc) (bool, string, error) {
		n, err := queryRows(p.http)
		return err == nil && n == want, fmt.Sprintf("%d rows (want %d)", n, want), err
	})
}

// askWhileMoving asks both datanodes in a loop (ask says whether an
// answer was whole, what it was, and its error) while f's region moves
// back and forth moves times, with at least one answer between moves:
// every answer must be whole or an error naming the region, and after the
// moves both must answer whole.
func (f *frozenOwner) askWhileMoving(moves int, ask func(p *proc) (whole bool, got string, err error)) {
	t := f.t
	t.Helper()
	region := placed(t, f.c, 1, 30*time.Second, "").Regions[0].Region
	stop := make(chan struct{})
	var mu sync.Mutex
	complete, failed := map[string]int{}, map[string]int{}
	answers := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, p := range []*proc{f.old, f.nw} {
			n += complete[p.name] + failed[p.name]
		}
		return n
	}
	var wg sync.WaitGroup
	for _, p := range []*proc{f.old, f.nw} {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				whole, got, err := ask(p)
				mu.Lock()
				switch {
				case whole:
					complete[p.name]++
				case err != nil && strings.Contains(err.Error(), "region "+region):
					failed[p.name]++
					t.Logf("%s: %v", p.name, err)
				default:
					t.Errorf("%s answered %s, %v", p.name, got, err)
				}
				mu.Unlock()
			}
		})
	}
	to := []string{f.nw.name, f.old.name}
	for i := range moves {
		f.run("cluster", "move", region, to[i%2])
		// Until the new owner has opened the region: a call is then
		// sure to be running on it.
		for end := time.Now().Add(60 * time.Second); placed(t, f.c, 1, 30*time.Second, "").Regions[0].Owner != to[i%2]; {
			if time.Now().After(end) {
				t.Fatalf("region %s not on %s after 60 s", region, to[i%2])
			}
		}
		n := answers()
		for end := time.Now().Add(2 * time.Minute); answers() <= n; { // at least one answer more per move
			if time.Now().After(end) {
				t.Fatal("no answer for 2 min")
			}
			time.Sleep(50 * time.Millisecond) // answers of other processes
		}
	}
	close(stop)
	wg.Wait()
	for _, p := range []*proc{f.old, f.nw} {
		if whole, got, err := ask(p); !whole {
			t.Errorf("%s after the moves: %s, %v", p.name, got, err)
		}
	}
	t.Logf("%d moves of region %s: complete answers %v, errors %v", moves, region, complete, failed)
}

// A write sent to a datanode while the owner of the region it goes to is
// frozen (SIGSTOP) is forwarded to an owner that never answers. Once the
// owner's lease ends the forward is cancelled and sent again to the
// region's new owner: the write is acknowledged and reads back. (Without
// the watch it waits until gRPC's keepalive gives the connection to the
// frozen owner up, some 20 s.)
func TestWriteThroughAFrozenOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and waits for a lease to expire")
	}
	f := ownedTable(t)
	// A first forward connects the two datanodes: the write across the
	// freeze then waits on a connection the frozen owner holds open,
	// which only the watch (or 15 s of silence) ends. (Dialled during the
	// freeze, the connection's handshake would give up after 10 s, as the
	// lease does, and the retry would race the move.)
	if code, err := f.write(f.nw, 1); code != http.StatusNoContent {
		t.Fatalf("a write forwarded before the freeze: %d %v", code, err)
	}
	f.freeze()
	done := later(func() (int, error) { return f.write(f.nw, 5) })
	select {
	case a := <-done:
		if st := placed(t, f.c, 1, time.Second, ""); st.Regions[0].Owner == f.oldID {
			t.Fatalf("the write answered (%d %v) while the region's only owner was frozen", a.n, a.err)
		}
		t.Fatalf("the region moved (%s) before the write reached its frozen owner: the machine is too slow for this test", f.oldID)
	case <-time.After(2 * time.Second):
	}
	st := placed(t, f.c, 1, time.Second, "")
	if st.Regions[0].Owner != f.oldID {
		t.Fatalf("the region moved to %s before the write reached its frozen owner: the machine is too slow for this test", st.Regions[0].Owner)
	}
	f.failover()
	a := <-done
	if a.n != http.StatusNoContent {
		t.Fatalf("write through %s across the failover: %d %v", f.nw.name, a.n, a.err)
	}
	t.Logf("write acknowledged %v after the freeze", a.at.Sub(f.paused).Round(100*time.Millisecond))
	// Sent again because the owner moved, not because gRPC's keepalive
	// gave the connection to the frozen owner up (after 25 s of silence).
	if r := metricValue(t, f.nw.http, `strata_forward_retries_total{why="moved"}`); r < 1 {
		t.Fatalf("%s sent no write again on the region's new owner", f.nw.name)
	}
	n, err := queryRows(f.nw.http)
	if err != nil || n != 26 {
		t.Fatalf("after the failover %s reads %d rows, %v; want the 21 written before and the 5 across", f.nw.name, n, err)
	}
}

// A query waiting on a frozen owner ends when its client goes away, and
// when its own timeout passes: either way the querying datanode closes its
// stream to the owner at once (strata_remote_scans back to 0) while the
// region is still placed on the frozen owner, and starts no scan again.
func TestQueryEndsWithItsClientWhileAnOwnerIsFrozen(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and waits for a lease to expire")
	}
	f := ownedTable(t)
	f.freeze()
	retries := metricValue(t, f.nw.http, "strata_remote_scan_retries_total")
	waitScans := func(open func(float64) bool, what string) {
		t.Helper()
		for end := time.Now().Add(60 * time.Second); !open(metricValue(t, f.nw.http, "strata_remote_scans")); {
			if time.Now().After(end) {
				t.Fatalf("%s after 60 s", what)
			}
			time.Sleep(20 * time.Millisecond) // another process's state, read from its metrics
		}
	}
	stillFrozen := func(when string) {
		t.Helper()
		if st := placed(t, f.c, 1, time.Second, ""); st.Regions[0].Owner != f.oldID {
			t.Fatalf("%s: the region moved to %s already: the machine is too slow for this test", when, st.Regions[0].Owner)
		}
	}

	// The client goes away.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+f.nw.http+"/api/v1/query?time=8640000&query="+url.QueryEscape(rowsQuery), nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("answered %s", resp.Status)
		}
		done <- err
	}()
	waitScans(func(n float64) bool { return n >= 1 }, "no remote scan open")
	stillFrozen("scan open")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled request: %v", err)
	}
	waitScans(func(n float64) bool { return n == 0 }, "the remote scan of a query whose client went away still open")
	stillFrozen("client gone, scan closed")

	// The query's timeout passes.
	start := time.Now()
	_, err := queryWithTimeout(f.nw.http, "2s")
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("a query timing out on a frozen owner: %v", err)
	}
	t.Logf("query with timeout=2s answered after %v: %v", time.Since(start).Round(100*time.Millisecond), err)
	waitScans(func(n float64) bool { return n == 0 }, "the remote scan of a timed-out query still open")
	stillFrozen("query timed out, scan closed")
	if r := metricValue(t, f.nw.http, "strata_remote_scan_retries_total"); r != retries {
		t.Fatalf("remote scans started again (%v → %v): the owner was not moved", retries, r)
	}
}
