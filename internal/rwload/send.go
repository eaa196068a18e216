package rwload

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options say where and how a run sends.
type Options struct {
	// URL is the remote-write endpoint (…/api/v1/write).
	URL      string
	Protocol Protocol
	// Workers is the number of shards sending at once.
	Workers int
	// Pace sends scrape s no sooner than s×Interval after the start, as a
	// Prometheus would; otherwise as fast as the server takes it.
	Pace   bool
	Client *http.Client
	// Authorize, if set, adds credentials to each request.
	Authorize func(*http.Request)
}

// Result is what a run sent and how the server answered.
type Result struct {
	Requests int64
	// Samples counts samples, NaN included and staleness markers not;
	// NaNs the NaN samples; StaleMarkers the markers; Series the series
	// the samples started; Bytes the compressed bodies.
	Samples, NaNs, StaleMarkers, Series, Bytes int64
	// Failed counts non-2xx responses; FirstError is the first's status
	// and body.
	Failed     int64
	FirstError string
	// Over 2.0, Written sums the samples the server said it wrote
	// (X-Prometheus-Remote-Write-Samples-Written) and Unconfirmed counts
	// the 2xx answers without that header: a 1.x receiver, which may have
	// read the 2.0 body as an empty 1.0 request.
	Written, Unconfirmed int64

	Elapsed time.Duration
	// Latency percentiles of the requests (2xx or not).
	P50, P99, Max time.Duration
}

// SamplesPerSecond is the rate of samples and staleness markers sent.
func (r Result) SamplesPerSecond() float64 {
	return float64(r.Samples+r.StaleMarkers) / r.Elapsed.Seconds()
}

// SeriesPerSecond is the rate of series created.
func (r Result) SeriesPerSecond() float64 { return float64(r.Series) / r.Elapsed.Seconds() }

// Endpoints completes a remote-write URL: a bare address gets the path
// /api/v1/write, and base is the address the query API and /metrics
// answer on (the URL without /api/v1/write).
func Endpoints(writeURL string) (write, base string, err error) {
	u, err := url.Parse(writeURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "", "", fmt.Errorf("rwload: %q is not an http(s) URL", writeURL)
	}
	path := strings.TrimRight(u.Path, "/")
	if path == "" {
		path = "/api/v1/write"
	}
	u.Path = path
	write = u.String()
	u.Path, u.RawQuery = strings.TrimSuffix(path, "/api/v1/write"), ""
	return write, strings.TrimRight(u.String(), "/"), nil
}

// shard is one sender's tally.
type shard struct {
	res    Result // FirstError: this shard's first, at failAt
	failAt time.Time
	lat    []time.Duration
	err    error
}

// Run sends the generator's scrapes; it stops at the first transport
// error (non-2xx answers are counted, not retried, and the run goes on).
func Run(ctx context.Context, g *Generator, o Options) (Result, error) {
	if o.Workers <= 0 {
		return Result{}, fmt.Errorf("rwload: workers must be positive")
	}
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	shards := make([]shard, o.Workers)
	queues := make([]chan job, o.Workers)
	var wg sync.WaitGroup
	for w := range shards {
		queues[w] = make(chan job, 2)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sh, enc := &shards[w], newEncoder(g, o.Protocol)
			for j := range queues[w] {
				if sh.err != nil {
					continue // drain; the producer stops on the cancel
				}
				sh.err = enc.encode(j, func(r request) error { return sh.send(ctx, o, r) })
				if sh.err != nil {
					cancel()
				}
			}
		}()
	}
	began := time.Now()
produce:
	for s := range g.shape.Scrapes {
		if o.Pace && s > 0 {
			t := time.NewTimer(time.Until(began.Add(time.Duration(s) * g.shape.Interval)))
			select {
			case <-ctx.Done():
				t.Stop()
				break produce
			case <-t.C:
			}
		}
		for k, j := range g.jobs(s) {
			select {
			case queues[k%len(queues)] <- j:
			case <-ctx.Done():
				break produce
			}
		}
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	res := Result{Elapsed: time.Since(began)}
	var lat []time.Duration
	var firstAt time.Time
	for _, sh := range shards {
		if sh.err != nil {
			return res, sh.err
		}
		res.Requests += sh.res.Requests
		res.Samples += sh.res.Samples
		res.NaNs += sh.res.NaNs
		res.StaleMarkers += sh.res.StaleMarkers
		res.Series += sh.res.Series
		res.Bytes += sh.res.Bytes
		res.Failed += sh.res.Failed
		res.Written += sh.res.Written
		res.Unconfirmed += sh.res.Unconfirmed
		if sh.res.FirstError != "" && (firstAt.IsZero() || sh.failAt.Before(firstAt)) {
			res.FirstError, firstAt = sh.res.FirstError, sh.failAt
		}
		lat = append(lat, sh.lat...)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.P50, res.P99, res.Max = Quantile(lat, 0.5), Quantile(lat, 0.99), Quantile(lat, 1)
	return res, nil
}

// send posts one request and tallies it.
func (sh *shard) send(ctx context.Context, o Options, r request) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.URL, bytes.NewReader(r.body))
	if err != nil {
		return fmt.Errorf("rwload: %w", err)
	}
	h := req.Header
	h.Set("Content-Type", o.Protocol.ContentType())
	h.Set("Content-Encoding", "snappy")
	h.Set("X-Prometheus-Remote-Write-Version", o.Protocol.Version())
	h.Set("User-Agent", "strata-bench-remote-write")
	if o.Authorize != nil {
		o.Authorize(req)
	}
	t0 := time.Now()
	resp, err := o.Client.Do(req)
	if err != nil {
		return fmt.Errorf("rwload: send: %w", err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sh.lat = append(sh.lat, time.Since(t0))
	sh.res.Requests++
	sh.res.Bytes += int64(len(r.body))
	sh.res.Samples += int64(r.samples)
	sh.res.NaNs += int64(r.nans)
	sh.res.StaleMarkers += int64(r.stale)
	sh.res.Series += int64(r.series)
	switch {
	case resp.StatusCode/100 == 2 && o.Protocol == V2:
		if n, err := strconv.ParseInt(resp.Header.Get("X-Prometheus-Remote-Write-Samples-Written"), 10, 64); err == nil {
			sh.res.Written += n
		} else {
			sh.res.Unconfirmed++
		}
	case resp.StatusCode/100 != 2:
		sh.res.Failed++
		if sh.res.FirstError == "" {
			sh.res.FirstError, sh.failAt = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(msg))), t0
		}
	}
	return nil
}
