package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func newBenchQuery() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "query",
		Short: "Time a PromQL query or a Prometheus API path: p50/p99 over repeated runs",
		Long: `Ask a server one Prometheus HTTP API request --runs times, one after
another, and print the latency percentiles. The request is a PromQL range
query (--promql with --start, --end and --step, POSTed to
/api/v1/query_range), an instant query (--promql with --end alone, to
/api/v1/query), or a GET of --path as given (e.g.
"/api/v1/label/hostname/values?start=...&end=..."). A run is timed from
the request until the response is read whole; decoding it is left out.
Every answer must be 200 with "status":"success".

With several servers (--url A,B), each run asks every one of them, in an
order that turns from run to run (A then B, B then A, ...), and the
percentiles are each server's: a shared machine's drift falls on them
alike, as it would not on one server's runs and then the other's. --json
then prints a list of reports, one a server, in --url's order.

With --vary NAME=V1,V2,..., each request replaces {NAME} in --promql or
--path by the next value in turn (as TSBS's query generator picks another
host for each query): "--promql 'max(cpu{hostname=~\"{h}\"})' --vary
h=host_1,host_7,host_13".

--warmup untimed requests come first (with --vary, at least one a value);
the first one's body is written to --answer (a file a server), for
comparing servers' answers, and with --vary each other value's to
--answer.1, --answer.2, ... With --peer-metrics (datanodes' /metrics
URLs), the bytes of the gRPC messages those datanodes sent to and
received from each other during the timed runs
(strata_peer_grpc_bytes_total) are printed per run, by method (with
several servers, a run asks them all: give one cluster among them).`,
		Args: exactArgs(0),
		RunE: runBenchQuery,
	}
	f := cmd.Flags()
	f.StringSlice("url", []string{"http://localhost:8086"}, "the server's HTTP address; several (A,B): each run asks them all, in turn")
	f.String("promql", "", "PromQL expression")
	f.String("start", "", "range query start (Unix seconds or RFC 3339)")
	f.String("end", "", "range query end, or the instant query's time (Unix seconds or RFC 3339)")
	f.Duration("step", 0, "range query step")
	f.String("path", "", "instead of --promql: a path with its query string, fetched with GET")
	f.String("vary", "", "NAME=V1,V2,...: replace {NAME} in --promql or --path by each value in turn, a value a request")
	f.Int("runs", 30, "timed requests")
	f.Int("warmup", 2, "untimed requests before them (at least 1: the answer checked and written)")
	f.StringSlice("answer", nil, "write the first answer's body to this file (a file a --url)")
	f.StringSlice("peer-metrics", nil, "datanodes' /metrics URLs: report strata_peer_grpc_bytes_total moved per run (a run asks every --url)")
	f.Duration("timeout", 5*time.Minute, "bound on one request")
	f.Bool("json", false, "print the result as JSON")
	return cmd
}

// queryReport is a bench query's result as printed.
type queryReport struct {
	Request       string  `json:"request"`
	Runs          int     `json:"runs"`
	P50           float64 `json:"p50_seconds"`
	P99           float64 `json:"p99_seconds"`
	Min           float64 `json:"min_seconds"`
	Max           float64 `json:"max_seconds"`
	ResponseBytes int     `json:"response_bytes"`
	// Peer bytes per query, summed over the --peer-metrics datanodes
	// (nil without them).
	PeerSent     *float64           `json:"peer_sent_bytes_per_query,omitempty"`
	PeerReceived *float64           `json:"peer_received_bytes_per_query,omitempty"`
	PeerByMethod map[string]float64 `json:"peer_bytes_per_query_by_method,omitempty"`
}

func runBenchQuery(cmd *cobra.Command, args []string) error {
	f := cmd.Flags()
	bases, _ := f.GetStringSlice("url")
	expr, _ := f.GetString("promql")
	start, _ := f.GetString("start")
	end, _ := f.GetString("end")
	step, _ := f.GetDuration("step")
	path, _ := f.GetString("path")
	runs, _ := f.GetInt("runs")
	warmup, _ := f.GetInt("warmup")
	answers, _ := f.GetStringSlice("answer")
	peers, _ := f.GetStringSlice("peer-metrics")
	timeout, _ := f.GetDuration("timeout")
	asJSON, _ := f.GetBool("json")
	vary, _ := f.GetString("vary")
	if runs <= 0 || warmup <= 0 {
		return usagef("--runs and --warmup must be positive")
	}
	if len(bases) == 0 {
		return usagef("--url: give a server")
	}
	if len(answers) > 0 && len(answers) != len(bases) {
		return usagef("--answer: give a file for each of the %d --url", len(bases))
	}
	client := &http.Client{Timeout: timeout}
	if c := clientTLS(cmd); c.Client() {
		tc, err := c.ClientTLS()
		if err != nil {
			return usagef("%v", err)
		}
		client.Transport = &http.Transport{TLSClientConfig: tc}
	}
	ctx := cmd.Context()
	servers := make([]*benchServer, len(bases))
	for k, base := range bases {
		requests, desc, err := variedRequests(strings.TrimRight(base, "/"), expr, path, start, end, step, vary)
		if err != nil {
			return err
		}
		servers[k] = &benchServer{requests: requests, rep: queryReport{Request: desc, Runs: runs}}
		if len(answers) > 0 {
			servers[k].answer = answers[k]
		}
		if err := servers[k].warm(ctx, client, warmup); err != nil {
			return err
		}
	}
	before, err := scrapePeers(ctx, client, peers)
	if err != nil {
		return err
	}
	// Run i asks the servers from the i-th on, so that over runs a
	// multiple of their count each goes first, second, ... as often as
	// the others.
	for i := range runs {
		for k := range servers {
			s := servers[(i+k)%len(servers)]
			t0 := time.Now()
			if _, err := s.do(ctx, client, i); err != nil {
				return err
			}
			s.lat = append(s.lat, time.Since(t0))
		}
	}
	after, err := scrapePeers(ctx, client, peers)
	if err != nil {
		return err
	}
	reps := make([]queryReport, len(servers))
	for k, s := range servers {
		s.summarize(peers, after.sub(before))
		reps[k] = s.rep
	}
	out := cmd.OutOrStdout()
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if len(reps) == 1 {
			return enc.Encode(reps[0])
		}
		return enc.Encode(reps)
	}
	for _, rep := range reps {
		printQueryReport(out, rep)
	}
	printPeers(out, reps[0]) // a run's, whichever servers moved them
	return nil
}

// benchServer is one server a bench query asks: its requests (one a
// --vary value), the answer file, and its timed runs.
type benchServer struct {
	requests []func(context.Context) (*http.Request, error)
	answer   string
	lat      []time.Duration
	rep      queryReport
}

// do sends the server's n-th request (its values in turn) and reads the
// answer whole; an answer other than 200 is an error.
func (s *benchServer) do(ctx context.Context, client *http.Client, n int) ([]byte, error) {
	req, err := s.requests[n%len(s.requests)](ctx)
	if err != nil {
		return nil, err
	}
	authorize(req)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %.300s", s.rep.Request, resp.Status, body)
	}
	return body, nil
}

// warm sends the untimed requests (at least one a value), checks that
// each value's first answer is a success and writes it to the answer
// file (FILE, FILE.1, ...).
func (s *benchServer) warm(ctx context.Context, client *http.Client, warmup int) error {
	for i := range max(warmup, len(s.requests)) {
		body, err := s.do(ctx, client, i)
		if err != nil {
			return err
		}
		if i >= len(s.requests) {
			continue
		}
		var st struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(body, &st); err != nil || st.Status != "success" {
			return fmt.Errorf("%s: not a successful answer: %.300s", s.rep.Request, body)
		}
		if i == 0 {
			s.rep.ResponseBytes = len(body)
		}
		if s.answer != "" {
			name := s.answer
			if i > 0 {
				name += "." + strconv.Itoa(i)
			}
			if err := os.WriteFile(name, body, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// summarize fills the report's percentiles, and with peers the bytes
// moved a run (d, over every server's runs).
func (s *benchServer) summarize(peers []string, d peerCounts) {
	slices.Sort(s.lat)
	rep := &s.rep
	rep.P50, rep.P99 = percentile(s.lat, 0.5).Seconds(), percentile(s.lat, 0.99).Seconds()
	rep.Min, rep.Max = s.lat[0].Seconds(), s.lat[len(s.lat)-1].Seconds()
	if len(peers) == 0 {
		return
	}
	runs := float64(rep.Runs)
	sent, recv := d.direction("sent")/runs, d.direction("received")/runs
	rep.PeerSent, rep.PeerReceived = &sent, &recv
	rep.PeerByMethod = map[string]float64{}
	for k, v := range d {
		if v != 0 {
			rep.PeerByMethod[k.method] += v / runs
		}
	}
}

// printQueryReport prints a report's request and latencies as text.
func printQueryReport(out io.Writer, rep queryReport) {
	ms := func(s float64) string { return strconv.FormatFloat(s*1e3, 'f', 2, 64) + " ms" }
	fmt.Fprintf(out, "request:   %s\n", rep.Request)
	fmt.Fprintf(out, "latency:   p50 %s  p99 %s  min %s  max %s (%d runs; answer %d bytes)\n", ms(rep.P50), ms(rep.P99), ms(rep.Min), ms(rep.Max), rep.Runs, rep.ResponseBytes)
}

// printPeers prints the peer bytes a run moved, if measured.
func printPeers(out io.Writer, rep queryReport) {
	if rep.PeerSent == nil {
		return
	}
	fmt.Fprintf(out, "peers:     %.0f bytes sent, %.0f received between datanodes a run\n", *rep.PeerSent, *rep.PeerReceived)
	methods := make([]string, 0, len(rep.PeerByMethod))
	for m := range rep.PeerByMethod {
		methods = append(methods, m)
	}
	slices.Sort(methods)
	for _, m := range methods {
		fmt.Fprintf(out, "           %s: %.0f bytes\n", m, rep.PeerByMethod[m])
	}
}

// percentile is the p-th of sorted durations (nearest rank below).
func percentile(sorted []time.Duration, p float64) time.Duration {
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

// variedRequests builds the requests a bench query takes in turn: one, or
// one per value of vary (NAME=V1,V2,...), each with {NAME} in expr or
// path replaced by its value; and describes them.
func variedRequests(base, expr, path, start, end string, step time.Duration, vary string) ([]func(context.Context) (*http.Request, error), string, error) {
	if vary == "" {
		mk, desc, err := queryRequest(base, expr, path, start, end, step)
		return []func(context.Context) (*http.Request, error){mk}, desc, err
	}
	name, list, ok := strings.Cut(vary, "=")
	if !ok || name == "" || list == "" {
		return nil, "", usagef("--vary takes NAME=V1,V2,...")
	}
	ph := "{" + name + "}"
	if !strings.Contains(expr, ph) && !strings.Contains(path, ph) {
		return nil, "", usagef("--vary: %s is in neither --promql nor --path", ph)
	}
	values := strings.Split(list, ",")
	var out []func(context.Context) (*http.Request, error)
	var desc string
	for i, v := range values {
		mk, d, err := queryRequest(base, strings.ReplaceAll(expr, ph, v), strings.ReplaceAll(path, ph, v), start, end, step)
		if err != nil {
			return nil, "", err
		}
		if i == 0 {
			desc = fmt.Sprintf("%s (%s one of %d values in turn)", d, ph, len(values))
		}
		out = append(out, mk)
	}
	return out, desc, nil
}

// queryRequest builds the request a bench query repeats, and describes it.
func queryRequest(base, expr, path, start, end string, step time.Duration) (func(context.Context) (*http.Request, error), string, error) {
	switch {
	case (expr == "") == (path == ""):
		return nil, "", usagef("give one of --promql and --path")
	case path != "":
		if start != "" || end != "" || step != 0 {
			return nil, "", usagef("--start, --end and --step go with --promql")
		}
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		return func(ctx context.Context) (*http.Request, error) {
			return http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		}, "GET " + path, nil
	}
	q := url.Values{"query": {expr}}
	api := "/api/v1/query"
	switch {
	case start != "" || step != 0:
		if start == "" || end == "" || step <= 0 {
			return nil, "", usagef("a range query needs --start, --end and a positive --step")
		}
		api = "/api/v1/query_range"
		q.Set("start", start)
		q.Set("end", end)
		q.Set("step", strconv.FormatFloat(step.Seconds(), 'f', -1, 64))
	case end != "":
		q.Set("time", end)
	}
	body := q.Encode()
	return func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+api, strings.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		return req, err
	}, "POST " + api + "?" + body, nil
}

// peerKey is one series of strata_peer_grpc_bytes_total.
type peerKey struct{ direction, method string }

type peerCounts map[peerKey]float64

// scrapePeers sums strata_peer_grpc_bytes_total over the datanodes'
// /metrics URLs, by direction and method.
func scrapePeers(ctx context.Context, c *http.Client, urls []string) (peerCounts, error) {
	out := peerCounts{}
	for _, u := range urls {
		m, err := scrapeMetrics(ctx, c, u)
		if err != nil {
			return nil, err
		}
		for k, v := range peerBytesByKey(m) {
			out[k] += v
		}
	}
	return out, nil
}

// peerBytesByKey picks strata_peer_grpc_bytes_total out of scraped samples.
func peerBytesByKey(m map[string]float64) peerCounts {
	out := peerCounts{}
	for k, v := range m {
		labels, ok := strings.CutPrefix(k, "strata_peer_grpc_bytes_total{")
		if !ok {
			continue
		}
		var key peerKey
		for _, l := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
			name, val, _ := strings.Cut(l, "=")
			val = strings.Trim(val, `"`)
			switch name {
			case "direction":
				key.direction = val
			case "method":
				key.method = val
			}
		}
		out[key] += v
	}
	return out
}

func (p peerCounts) sub(o peerCounts) peerCounts {
	out := peerCounts{}
	for k, v := range p {
		out[k] = v - o[k]
	}
	return out
}

func (p peerCounts) direction(d string) float64 {
	total := 0.0
	for k, v := range p {
		if k.direction == d {
			total += v
		}
	}
	return total
}
