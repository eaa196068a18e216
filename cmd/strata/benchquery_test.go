package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// bench query repeats a range query as a form POST, writes the first
// answer, and reports the peer bytes the datanodes' counters moved per
// timed query (warm-up requests left out).
func TestBenchQuery(t *testing.T) {
	var queries atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/query_range":
			if r.Method != http.MethodPost || r.FormValue("query") != "max(cpu_usage_user)" || r.FormValue("start") != "100" ||
				r.FormValue("end") != "3700" || r.FormValue("step") != "60" {
				http.Error(w, "bad request "+r.Form.Encode(), http.StatusBadRequest)
				return
			}
			queries.Add(1)
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[]}}`)
		case "/api/v1/labels":
			fmt.Fprint(w, `{"status":"error","error":"nope"}`)
		case "/metrics":
			// Each query moved 100 bytes out and 1,000 in on this node.
			n := queries.Load()
			fmt.Fprintf(w, "# TYPE strata_peer_grpc_bytes_total counter\n"+
				"strata_peer_grpc_bytes_total{direction=\"sent\",method=\"/strata.v1.Datanode/Scan\"} %d\n"+
				"strata_peer_grpc_bytes_total{direction=\"received\",method=\"/strata.v1.Datanode/Scan\"} %d\n", 100*n, 1000*n)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	answer := filepath.Join(t.TempDir(), "answer.json")
	var out, errb bytes.Buffer
	code := run([]string{"bench", "query", "--url", srv.URL, "--promql", "max(cpu_usage_user)", "--start", "100", "--end", "3700", "--step", "1m",
		"--runs", "5", "--warmup", "2", "--answer", answer, "--peer-metrics", srv.URL + "/metrics," + srv.URL + "/metrics", "--json"}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep queryReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err, out.String())
	}
	if queries.Load() != 7 || rep.Runs != 5 || rep.P50 <= 0 || rep.P99 < rep.P50 || rep.Max < rep.P99 {
		t.Fatalf("%d queries, report %+v", queries.Load(), rep)
	}
	// Two URLs of the same node: its counters count twice.
	if rep.PeerSent == nil || *rep.PeerSent != 200 || *rep.PeerReceived != 2000 || rep.PeerByMethod["/strata.v1.Datanode/Scan"] != 2200 {
		t.Fatalf("peer bytes %+v", rep)
	}
	if b, err := os.ReadFile(answer); err != nil || !strings.Contains(string(b), `"matrix"`) {
		t.Fatalf("answer %q %v", b, err)
	}

	// An answer that is not a success fails the run.
	out.Reset()
	errb.Reset()
	if code := run([]string{"bench", "query", "--url", srv.URL, "--path", "/api/v1/labels", "--runs", "1"}, nil, &out, &errb); code == 0 {
		t.Fatalf("an error answer passed: %s", out.String())
	}
	// One of --promql and --path.
	if code := run([]string{"bench", "query", "--url", srv.URL}, nil, &out, &errb); code != exitUsage {
		t.Fatalf("neither --promql nor --path: exit %d", code)
	}
}

// With --vary, the requests take the values in turn, warm-up ones
// included (at least one a value), and each value's answer is written.
func TestBenchQueryVaries(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.FormValue("query"))
		mu.Unlock()
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[],"q":%q}}`, r.FormValue("query"))
	}))
	defer srv.Close()
	answer := filepath.Join(t.TempDir(), "answer.json")
	var out, errb bytes.Buffer
	code := run([]string{"bench", "query", "--url", srv.URL, "--promql", `max(cpu{h=~"{host}"})`, "--end", "100", "--vary", "host=a,b|c,d",
		"--runs", "4", "--warmup", "2", "--answer", answer}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	a, bc, d := `max(cpu{h=~"a"})`, `max(cpu{h=~"b|c"})`, `max(cpu{h=~"d"})`
	if want := []string{a, bc, d, a, bc, d, a}; !slices.Equal(asked, want) {
		t.Fatalf("asked %q, want %q", asked, want)
	}
	for i, q := range []string{a, bc, d} {
		name := answer
		if i > 0 {
			name += "." + fmt.Sprint(i)
		}
		if b, err := os.ReadFile(name); err != nil || !strings.Contains(string(b), strconv.Quote(q)[1:len(strconv.Quote(q))-1]) {
			t.Fatalf("answer %d (%s): %s %v", i, q, b, err)
		}
	}
	for _, bad := range []string{"host", "=a", "other=a,b"} {
		if code := run([]string{"bench", "query", "--url", srv.URL, "--promql", `max(cpu{h=~"{host}"})`, "--end", "100", "--vary", bad}, nil, &out, &errb); code != exitUsage {
			t.Errorf("--vary %q: exit %d", bad, code)
		}
	}
}

// With several servers, each run asks them all, the first of a run
// turning from one to the next; warm-ups ask each server in its turn, and
// the report is a list, one a server, each with its own answer file.
func TestBenchQueryTakesServersInTurn(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	server := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			asked = append(asked, name)
			mu.Unlock()
			fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[],"server":%q}}`, name)
		}))
	}
	a, b := server("a"), server("b")
	defer a.Close()
	defer b.Close()
	dir := t.TempDir()
	answers := filepath.Join(dir, "a.json") + "," + filepath.Join(dir, "b.json")
	var out, errb bytes.Buffer
	code := run([]string{"bench", "query", "--url", a.URL + "," + b.URL, "--promql", "up", "--end", "100",
		"--runs", "4", "--warmup", "1", "--answer", answers, "--json"}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if want := []string{"a", "b", "a", "b", "b", "a", "a", "b", "b", "a"}; !slices.Equal(asked, want) {
		t.Fatalf("asked %q, want %q", asked, want)
	}
	var reps []queryReport
	if err := json.Unmarshal(out.Bytes(), &reps); err != nil {
		t.Fatal(err, out.String())
	}
	if len(reps) != 2 || !strings.Contains(reps[0].Request, "up") || reps[0].Runs != 4 || reps[1].Runs != 4 || reps[0].P50 <= 0 || reps[1].P50 <= 0 {
		t.Fatalf("reports %+v", reps)
	}
	for _, name := range []string{"a", "b"} {
		if got, err := os.ReadFile(filepath.Join(dir, name+".json")); err != nil || !strings.Contains(string(got), `"server":"`+name+`"`) {
			t.Fatalf("answer of %s: %s %v", name, got, err)
		}
	}
	// An answer file each server, or none.
	if code := run([]string{"bench", "query", "--url", a.URL + "," + b.URL, "--promql", "up", "--answer", "x.json"}, nil, &out, &errb); code != exitUsage {
		t.Fatalf("one answer file for two servers: exit %d", code)
	}
}
