package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratadb/strata/internal/rwload"
)

func newBenchRemoteWrite() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remote-write",
		Short: "Send Prometheus remote write shaped like avalanche, then check the server stored it",
		Long: `Send --names metric names × --series series each (--labels label_key_k
labels, plus instance, job and series_id) for --scrapes scrapes whose
timestamps are --interval apart, over Prometheus remote write 1.0 or 2.0
(snappy protobuf) with --workers shards of at most --batch samples a
request, as fast as the server takes them (or in real time with --pace).
--churn replaces that fraction of the series at every scrape after the
first; --nan-fraction makes that fraction of the samples NaN;
--stale-markers sends a staleness marker for each replaced series.

Prints samples/s, series created/s, request latency percentiles, non-2xx
answers (the first one's body), the server's peak resident memory
(process_resident_memory_bytes on /metrics, sampled during the run) and
its CPU. Then, with --verify, counts the run's series and samples back
through the server's /api/v1/query and fails unless they match what was
sent (NaN samples count; staleness markers do not), and times the
server's answers to /api/v1/label/__name__/values and to count by
(__name__) over the run's series (failing if an answer leaves a name
out). Works against Strata
(http://host:8086/api/v1/write) and VictoriaMetrics
(http://host:8428/api/v1/write).`,
		Args: exactArgs(0),
		RunE: runBenchRemoteWrite,
	}
	f := cmd.Flags()
	f.String("url", "http://localhost:8086/api/v1/write", "the remote-write endpoint (a bare address gets /api/v1/write)")
	f.String("query-url", "", "the Prometheus query API's address (default: --url without /api/v1/write)")
	f.String("metrics-url", "", "the server's Prometheus metrics (default: that address's /metrics)")
	f.String("protocol", "1.0", "remote-write protocol: 1.0 or 2.0")
	f.String("prefix", rwload.DefaultPrefix, "metric names are <prefix>_<id>")
	f.Int("names", 100, "metric names")
	f.Int("series", 100, "series of each metric name (one a target)")
	f.Int("labels", 10, "label_key_k labels of each series")
	f.Int("scrapes", 10, "samples of each series slot")
	f.Duration("interval", 15*time.Second, "data time between scrapes")
	f.String("start", "", "RFC 3339 timestamp of the first scrape (default: now less scrapes × interval; now with --pace)")
	f.Float64("churn", 0, "fraction of the series replaced at each scrape after the first")
	f.Float64("nan-fraction", 0, "fraction of the samples that are NaN")
	f.Bool("stale-markers", false, "send a staleness marker for each series churn replaces")
	f.Int("batch", 2000, "most samples a request (Prometheus' max_samples_per_send)")
	f.Int("workers", 4, "concurrent senders (Prometheus' shards)")
	f.Bool("pace", false, "send scrape s at s × interval after the start, not as fast as possible")
	f.Uint64("seed", 1, "seed of the label and sample values")
	f.Bool("verify", true, "count the series and samples back through the query API and fail on a difference")
	f.Duration("verify-timeout", 2*time.Minute, "how long the check waits for the counts to match")
	f.Int("probe-label-values", 200, "after the check, time this many /api/v1/label/__name__/values requests (0: none; at least 100 for a p99 that is not the slowest one)")
	f.Int("probe-count-by-name", 3, "after the check, time this many count by (__name__) queries over the run's series (0: none)")
	f.Bool("json", false, "print the result as JSON")
	return cmd
}

// rwReport is a remote-write run's result as printed.
type rwReport struct {
	URL              string    `json:"url"`
	Protocol         string    `json:"protocol"`
	Requests         int64     `json:"requests"`
	Samples          int64     `json:"samples"`
	NaNSamples       int64     `json:"nan_samples"`
	StaleMarkers     int64     `json:"stale_markers"`
	Series           int64     `json:"series"`
	Bytes            int64     `json:"bytes"`
	Seconds          float64   `json:"seconds"`
	SamplesPerSecond float64   `json:"samples_per_second"`
	SeriesPerSecond  float64   `json:"series_per_second"`
	LatencyP50       float64   `json:"latency_p50_seconds"`
	LatencyP99       float64   `json:"latency_p99_seconds"`
	LatencyMax       float64   `json:"latency_max_seconds"`
	Non2xx           int64     `json:"non_2xx"`
	FirstError       string    `json:"first_error,omitempty"`
	Written          *int64    `json:"samples_written,omitempty"` // 2.0: as the server confirmed
	Unconfirmed      int64     `json:"unconfirmed_2xx,omitempty"` // 2.0: 2xx without a written count
	PeakRSSBytes     int64     `json:"peak_rss_bytes"`            // 0: unknown
	ClientCPUSeconds float64   `json:"client_cpu_seconds"`
	ServerCPUSeconds *float64  `json:"server_cpu_seconds,omitempty"`
	Verify           *rwVerify `json:"verify,omitempty"`
	Probe            *rwProbe  `json:"probe,omitempty"`
}

// rwProbe is how long the server took to list the metric names and to
// count each name's series, after the check.
type rwProbe struct {
	LabelValuesP50 float64 `json:"label_values_p50_seconds"`
	LabelValuesP99 float64 `json:"label_values_p99_seconds"`
	LabelValuesMax float64 `json:"label_values_max_seconds"`
	// LabelValuesFirst is the first request's time, in the others: the
	// one that finds nothing of the answer kept.
	LabelValuesFirst float64   `json:"label_values_first_seconds"`
	LabelValuesN     int       `json:"label_values_requests"`
	Names            int       `json:"names"`
	CountByNameTimes []float64 `json:"count_by_name_seconds"`
}

type rwVerify struct {
	ExpectedSeries  int64   `json:"expected_series"`
	StoredSeries    int64   `json:"stored_series"`
	ExpectedSamples int64   `json:"expected_samples"`
	StoredSamples   int64   `json:"stored_samples"`
	OK              bool    `json:"ok"`
	Queries         int     `json:"queries"`
	Seconds         float64 `json:"seconds"`
}

func runBenchRemoteWrite(cmd *cobra.Command, args []string) error {
	f := cmd.Flags()
	rawURL, _ := f.GetString("url")
	queryURL, _ := f.GetString("query-url")
	metricsURL, _ := f.GetString("metrics-url")
	protoS, _ := f.GetString("protocol")
	workers, _ := f.GetInt("workers")
	pace, _ := f.GetBool("pace")
	startS, _ := f.GetString("start")
	verify, _ := f.GetBool("verify")
	verifyTimeout, _ := f.GetDuration("verify-timeout")
	probeLV, _ := f.GetInt("probe-label-values")
	probeCount, _ := f.GetInt("probe-count-by-name")
	asJSON, _ := f.GetBool("json")
	var shape rwload.Shape
	shape.Prefix, _ = f.GetString("prefix")
	shape.Names, _ = f.GetInt("names")
	shape.Series, _ = f.GetInt("series")
	shape.Labels, _ = f.GetInt("labels")
	shape.Scrapes, _ = f.GetInt("scrapes")
	shape.Interval, _ = f.GetDuration("interval")
	shape.Churn, _ = f.GetFloat64("churn")
	shape.NaNFraction, _ = f.GetFloat64("nan-fraction")
	shape.StaleMarkers, _ = f.GetBool("stale-markers")
	shape.Batch, _ = f.GetInt("batch")
	shape.Seed, _ = f.GetUint64("seed")

	proto, err := rwload.ParseProtocol(protoS)
	if err != nil {
		return usagef("--protocol: %v", err)
	}
	write, base, err := rwload.Endpoints(rawURL)
	if err != nil {
		return usagef("--url: %v", err)
	}
	if queryURL == "" {
		queryURL = base
	}
	if metricsURL == "" {
		metricsURL = base + "/metrics"
	}
	if workers <= 0 {
		return usagef("--workers must be positive")
	}
	switch {
	case startS != "":
		if shape.Start, err = time.Parse(time.RFC3339Nano, startS); err != nil {
			return usagef("--start: %v", err)
		}
	case pace:
		shape.Start = time.Now()
	default: // recent, so VictoriaMetrics' retention keeps it
		shape.Start = time.Now().Add(-time.Duration(shape.Scrapes) * shape.Interval)
	}
	shape.Start = shape.Start.Truncate(time.Millisecond)
	g, err := rwload.NewGenerator(shape)
	if err != nil {
		return usagef("%v", err)
	}

	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	if c := clientTLS(cmd); c.Client() {
		if tr.TLSClientConfig, err = c.ClientTLS(); err != nil {
			return usagef("%v", err)
		}
	}
	client := &http.Client{Transport: tr}
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	if !asJSON {
		fmt.Fprintf(out, "sending %d names × %d series × %d labels, %d scrapes %s apart from %s (%d series, %d samples) over remote write %s to %s with %d workers...\n",
			shape.Names, shape.Series, shape.Labels, shape.Scrapes, shape.Interval, shape.Start.UTC().Format(time.RFC3339), g.Series(), g.Samples(), proto, write, workers)
	}
	before, berr := scrapeMetrics(ctx, client, metricsURL)
	rss := watchRSS(ctx, client, metricsURL)
	cpu0 := processCPU()
	res, err := rwload.Run(ctx, g, rwload.Options{URL: write, Protocol: proto, Workers: workers, Pace: pace, Client: client, Authorize: authorize})
	clientCPU := processCPU() - cpu0
	after, aerr := scrapeMetrics(ctx, client, metricsURL)
	if aerr == nil {
		rss.observe(int64(after["process_resident_memory_bytes"]))
	}
	peak := rss.stop()
	if err != nil {
		return err
	}
	r := rwReport{URL: write, Protocol: proto.String(), Requests: res.Requests, Samples: res.Samples, NaNSamples: res.NaNs,
		StaleMarkers: res.StaleMarkers, Series: res.Series, Bytes: res.Bytes, Seconds: res.Elapsed.Seconds(),
		SamplesPerSecond: res.SamplesPerSecond(), SeriesPerSecond: res.SeriesPerSecond(),
		LatencyP50: res.P50.Seconds(), LatencyP99: res.P99.Seconds(), LatencyMax: res.Max.Seconds(),
		Non2xx: res.Failed, FirstError: res.FirstError, PeakRSSBytes: peak, ClientCPUSeconds: clientCPU.Seconds()}
	if proto == rwload.V2 {
		r.Written, r.Unconfirmed = &res.Written, res.Unconfirmed
	}
	if s, ok := serverCPU(before, after); berr == nil && aerr == nil && ok {
		r.ServerCPUSeconds = &s
	}
	if verify {
		c, err := rwload.Verify(ctx, g, rwload.VerifyOptions{URL: queryURL, Client: client, Authorize: authorize, Timeout: verifyTimeout})
		if err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		r.Verify = &rwVerify{ExpectedSeries: c.ExpectedSeries, StoredSeries: c.StoredSeries, ExpectedSamples: c.ExpectedSamples,
			StoredSamples: c.StoredSamples, OK: c.OK(), Queries: c.Queries, Seconds: c.Took.Seconds()}
		if c.OK() && (probeLV > 0 || probeCount > 0) {
			p, err := rwload.RunProbe(ctx, g, rwload.ProbeOptions{URL: queryURL, Client: client, Authorize: authorize, LabelValues: probeLV, CountByName: probeCount})
			if err != nil {
				return fmt.Errorf("probe: %w", err)
			}
			r.Probe = &rwProbe{LabelValuesP50: rwload.Quantile(p.LabelValues, 0.5).Seconds(), LabelValuesP99: rwload.Quantile(p.LabelValues, 0.99).Seconds(),
				LabelValuesMax: rwload.Quantile(p.LabelValues, 1).Seconds(), LabelValuesN: len(p.LabelValues), Names: p.Names}
			if len(p.LabelValues) > 0 {
				r.Probe.LabelValuesFirst = p.LabelValues[0].Seconds()
			}
			for _, d := range p.CountByName {
				r.Probe.CountByNameTimes = append(r.Probe.CountByNameTimes, d.Seconds())
			}
		}
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		r.print(out, shape.Batch, workers)
	}
	switch {
	case r.Non2xx > 0:
		return fmt.Errorf("%d of %d requests failed; the first: %s", r.Non2xx, r.Requests, r.FirstError)
	case r.Verify != nil && !r.Verify.OK:
		return fmt.Errorf("verify: the server stored %d of %d series and %d of %d samples", r.Verify.StoredSeries, r.Verify.ExpectedSeries, r.Verify.StoredSamples, r.Verify.ExpectedSamples)
	}
	return nil
}

func (r rwReport) print(out io.Writer, batch, workers int) {
	fmt.Fprintf(out, "sent:        %d samples (%d NaN) and %d staleness markers of %d series in %d requests (%.1f MiB snappy) in %s\n",
		r.Samples, r.NaNSamples, r.StaleMarkers, r.Series, r.Requests, float64(r.Bytes)/(1<<20), time.Duration(r.Seconds*float64(time.Second)).Round(time.Millisecond))
	fmt.Fprintf(out, "throughput:  %.0f samples/s, %.0f series created/s\n", r.SamplesPerSecond, r.SeriesPerSecond)
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)).Round(time.Microsecond) }
	fmt.Fprintf(out, "latency:     p50 %s  p99 %s  max %s (requests of up to %d samples, %d workers)\n", sec(r.LatencyP50), sec(r.LatencyP99), sec(r.LatencyMax), batch, workers)
	if r.Non2xx > 0 {
		fmt.Fprintf(out, "errors:      %d non-2xx responses; the first: %s\n", r.Non2xx, r.FirstError)
	} else {
		fmt.Fprintln(out, "errors:      none")
	}
	if r.Written != nil {
		fmt.Fprintf(out, "written:     the server confirmed %d samples", *r.Written)
		if r.Unconfirmed > 0 {
			fmt.Fprintf(out, "; %d 2xx answers had no written count (a remote write 1.x receiver: it may have stored nothing of them)", r.Unconfirmed)
		}
		fmt.Fprintln(out)
	}
	printRSS(out, r.PeakRSSBytes)
	cpu := fmt.Sprintf("client %.2f s", r.ClientCPUSeconds)
	if r.ServerCPUSeconds != nil {
		cpu += fmt.Sprintf(", server %.2f s", *r.ServerCPUSeconds)
	} else {
		cpu += ", server unknown (no process_cpu_seconds_total on /metrics)"
	}
	fmt.Fprintf(out, "CPU:         %s during the run\n", cpu)
	if v := r.Verify; v != nil {
		verdict := "ok"
		if !v.OK {
			verdict = "MISMATCH"
		}
		if !v.OK && r.NaNSamples > 0 && v.StoredSeries == v.ExpectedSeries && v.ExpectedSamples-v.StoredSamples == r.NaNSamples {
			verdict += " (short by exactly the NaN samples sent: VictoriaMetrics drops NaN at ingestion)"
		}
		fmt.Fprintf(out, "verify:      series %d expected, %d stored; samples %d expected, %d stored: %s (%d queries, %.1f s)\n",
			v.ExpectedSeries, v.StoredSeries, v.ExpectedSamples, v.StoredSamples, verdict, v.Queries, v.Seconds)
	}
	if p := r.Probe; p != nil {
		if p.LabelValuesN > 0 {
			fmt.Fprintf(out, "names:       /api/v1/label/__name__/values (%d names) p50 %s  p99 %s  max %s over %d requests (the first %s)\n",
				p.Names, sec(p.LabelValuesP50), sec(p.LabelValuesP99), sec(p.LabelValuesMax), p.LabelValuesN, sec(p.LabelValuesFirst))
		}
		if len(p.CountByNameTimes) > 0 {
			ts := make([]string, len(p.CountByNameTimes))
			for i, s := range p.CountByNameTimes {
				ts[i] = sec(s).String()
			}
			fmt.Fprintf(out, "count by:    count by (__name__) over the run's series: %s\n", strings.Join(ts, ", "))
		}
	}
}
