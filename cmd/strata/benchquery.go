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

With --vary NAME=V1,V2,..., each request replaces {NAME} in --promql or
--path by the next value in turn (as TSBS's query generator picks another
host for each query): "--promql 'max(cpu{hostname=~\"{h}\"})' --vary
h=host_1,host_7,host_13".

--warmup untimed requests come first (with --vary, at least one a value);
the first one's body is written to --answer, for comparing servers'
answers, and with --vary each other value's to --answer.1, --answer.2, ... With --peer-metrics (datanodes'
/metrics URLs), the bytes of the gRPC messages those datanodes sent to and
received from each other during the timed runs
(strata_peer_grpc_bytes_total) are printed per query, by method.`,
		Args: exactArgs(0),
		RunE: runBenchQuery,
	}
	f := cmd.Flags()
	f.String("url", "http://localhost:8086", "the server's HTTP address")
	f.String("promql", "", "PromQL expression")
	f.String("start", "", "range query start (Unix seconds or RFC 3339)")
	f.String("end", "", "range query end, or the instant query's time (Unix seconds or RFC 3339)")
	f.Duration("step", 0, "range query step")
	f.String("path", "", "instead of --promql: a path with its query string, fetched with GET")
	f.String("vary", "", "NAME=V1,V2,...: replace {NAME} in --promql or --path by each value in turn, a value a request")
	f.Int("runs", 30, "timed requests")
	f.Int("warmup", 2, "untimed requests before them (at least 1: the answer checked and written)")
	f.String("answer", "", "write the first answer's body to this file")
	f.StringSlice("peer-metrics", nil, "datanodes' /metrics URLs: report strata_peer_grpc_bytes_total moved per query")
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
	base, _ := f.GetString("url")
	expr, _ := f.GetString("promql")
	start, _ := f.GetString("start")
	end, _ := f.GetString("end")
	step, _ := f.GetDuration("step")
	path, _ := f.GetString("path")
	runs, _ := f.GetInt("runs")
	warmup, _ := f.GetInt("warmup")
	answer, _ := f.GetString("answer")
	peers, _ := f.GetStringSlice("peer-metrics")
	timeout, _ := f.GetDuration("timeout")
	asJSON, _ := f.GetBool("json")
	vary, _ := f.GetString("vary")
	if runs <= 0 || warmup <= 0 {
		return usagef("--runs and --warmup must be positive")
	}
	base = strings.TrimRight(base, "/")
	requests, desc, err := variedRequests(base, expr, path, start, end, step, vary)
	if err != nil {
		return err
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
	do := func(n int) ([]byte, error) {
		req, err := requests[n%len(requests)](ctx)
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
			return nil, fmt.Errorf("%s: %s: %.300s", desc, resp.Status, body)
		}
		return body, nil
	}
	rep := queryReport{Request: desc, Runs: runs}
	for i := range max(warmup, len(requests)) {
		body, err := do(i)
		if err != nil {
			return err
		}
		if i >= len(requests) {
			continue
		}
		var st struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(body, &st); err != nil || st.Status != "success" {
			return fmt.Errorf("%s: not a successful answer: %.300s", desc, body)
		}
		if i == 0 {
			rep.ResponseBytes = len(body)
		}
		if answer != "" {
			name := answer
			if i > 0 {
				name += "." + strconv.Itoa(i)
			}
			if err := os.WriteFile(name, body, 0o644); err != nil {
				return err
			}
		}
	}
	before, err := scrapePeers(ctx, client, peers)
	if err != nil {
		return err
	}
	lat := make([]time.Duration, 0, runs)
	for i := range runs {
		t0 := time.Now()
		if _, err := do(i); err != nil {
			return err
		}
		lat = append(lat, time.Since(t0))
	}
	after, err := scrapePeers(ctx, client, peers)
	if err != nil {
		return err
	}
	slices.Sort(lat)
	rep.P50, rep.P99 = percentile(lat, 0.5).Seconds(), percentile(lat, 0.99).Seconds()
	rep.Min, rep.Max = lat[0].Seconds(), lat[len(lat)-1].Seconds()
	if len(peers) > 0 {
		d := after.sub(before)
		sent, recv := d.direction("sent")/float64(runs), d.direction("received")/float64(runs)
		rep.PeerSent, rep.PeerReceived = &sent, &recv
		rep.PeerByMethod = map[string]float64{}
		for k, v := range d {
			if v != 0 {
				rep.PeerByMethod[k.method] += v / float64(runs)
			}
		}
	}
	out := cmd.OutOrStdout()
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	ms := func(s float64) string { return strconv.FormatFloat(s*1e3, 'f', 2, 64) + " ms" }
	fmt.Fprintf(out, "request:   %s\n", rep.Request)
	fmt.Fprintf(out, "latency:   p50 %s  p99 %s  min %s  max %s (%d runs; answer %d bytes)\n", ms(rep.P50), ms(rep.P99), ms(rep.Min), ms(rep.Max), runs, rep.ResponseBytes)
	if rep.PeerSent != nil {
		fmt.Fprintf(out, "peers:     %.0f bytes sent, %.0f received between datanodes a query\n", *rep.PeerSent, *rep.PeerReceived)
		methods := make([]string, 0, len(rep.PeerByMethod))
		for m := range rep.PeerByMethod {
			methods = append(methods, m)
		}
		slices.Sort(methods)
		for _, m := range methods {
			fmt.Fprintf(out, "           %s: %.0f bytes\n", m, rep.PeerByMethod[m])
		}
	}
	return nil
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
