package rwload

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// VerifyOptions say where and how long Verify asks.
type VerifyOptions struct {
	// URL is the query API's base address (…/api/v1/query is appended).
	URL       string
	Client    *http.Client
	Authorize func(*http.Request)
	// Timeout bounds the polling (default 2 min); Settle ends it early
	// once the stored counts stop changing for that long (default 10 s).
	Timeout, Settle time.Duration
	// ChunkSeries and ChunkSamples bound the series and samples one
	// query counts (defaults 20,000 and 5M, within both Strata's and
	// VictoriaMetrics' default query limits).
	ChunkSeries, ChunkSamples int64
}

// Check is what the server stored against what it was sent.
type Check struct {
	ExpectedSeries, StoredSeries   int64
	ExpectedSamples, StoredSamples int64
	// Queries is the number of queries of the last count; Polls the
	// counts taken; Took the time it all took.
	Queries, Polls int
	Took           time.Duration
}

// OK reports whether every series and sample was stored, and no more.
func (c Check) OK() bool {
	return c.StoredSeries == c.ExpectedSeries && c.StoredSamples == c.ExpectedSamples
}

// Verify counts the run's series and samples through the server's
// Prometheus query API and compares them with what the generator sent.
// For each metric name n it asks
//
//	count(count_over_time(n[<run>]))  series
//	sum(count_over_time(n[<run>]))    samples
//
// evaluated at the last scrape's timestamp with a window reaching just
// past the first's. One selector a name, because count_over_time drops
// __name__ and a regex over several names would give series that differ
// only in their name the same labels (an error in Prometheus' engine);
// the terms of many names are summed in one query ("(… or vector(0)) +
// …"), chunked to stay within the servers' default limits on query
// length and samples. Staleness markers are not samples (range
// selectors skip them); NaN samples are.
//
// It asks VictoriaMetrics to flush first (/internal/force_flush; other
// servers answer 404, ignored) and queries with nocache=1, which also
// keeps VictoriaMetrics from moving an evaluation time within
// -search.latencyOffset of now back. It polls until the counts match or
// stop changing. The server must hold no other series of the run's
// metric names in the run's time range.
func Verify(ctx context.Context, g *Generator, o VerifyOptions) (Check, error) {
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Settle <= 0 {
		o.Settle = 10 * time.Second
	}
	if o.ChunkSeries <= 0 {
		o.ChunkSeries = 20_000
	}
	if o.ChunkSamples <= 0 {
		o.ChunkSamples = 5_000_000
	}
	began := time.Now()
	if req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.URL+"/internal/force_flush", nil); err == nil {
		if o.Authorize != nil {
			o.Authorize(req)
		}
		if resp, err := o.Client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	last := g.timestamp(g.shape.Scrapes - 1)
	window := last - g.timestamp(0) + 1 // (last-window, last] holds the first scrape
	at := fmt.Sprintf("%d.%03d", last/1000, last%1000)
	series, samples := g.countQueries(window, o.ChunkSeries, o.ChunkSamples, maxQueryLen)
	c := Check{ExpectedSeries: g.Series(), ExpectedSamples: g.Samples()}
	var prev Check
	changed := time.Now()
	for {
		c.StoredSeries, c.StoredSamples, c.Queries = 0, 0, 0
		for i := range series {
			n, err := o.query(ctx, series[i], at)
			if err != nil {
				return c, err
			}
			c.StoredSeries += n
			if n, err = o.query(ctx, samples[i], at); err != nil {
				return c, err
			}
			c.StoredSamples += n
			c.Queries += 2
		}
		c.Polls++
		c.Took = time.Since(began)
		if c.OK() {
			return c, nil
		}
		if c.StoredSeries != prev.StoredSeries || c.StoredSamples != prev.StoredSamples {
			prev, changed = c, time.Now()
		}
		if time.Since(changed) >= o.Settle || time.Since(began) >= o.Timeout {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return c, ctx.Err()
		case <-time.After(time.Second): // the server gives no signal that data became visible
		}
	}
}

// maxQueryLen bounds a query's length: VictoriaMetrics refuses queries
// over 16 KiB by default (-search.maxQueryLen).
const maxQueryLen = 12 << 10

// countQueries returns the series and the samples queries of each chunk
// of metric names: as many names as keep the chunk within maxSeries
// series and maxSamples samples, and its longer (samples) query within
// maxLen bytes; at least one name a chunk.
func (g *Generator) countQueries(window, maxSeries, maxSamples int64, maxLen int) (series, samples []string) {
	names := int64(g.shape.Names)
	perName := (g.Series() + names - 1) / names
	samplesPerName := int64(g.shape.Series) * int64(g.shape.Scrapes)
	term := func(agg, name string) string {
		return fmt.Sprintf("(%s(count_over_time(%s[%dms])) or vector(0))", agg, name, window)
	}
	var ser, sam []string
	var n, length int
	flush := func() {
		if n > 0 {
			series, samples = append(series, strings.Join(ser, " + ")), append(samples, strings.Join(sam, " + "))
			ser, sam, n, length = ser[:0], sam[:0], 0, 0
		}
	}
	for _, name := range g.names {
		t := term("sum", name)
		if n > 0 && (int64(n+1)*perName > maxSeries || int64(n+1)*samplesPerName > maxSamples || length+len(" + ")+len(t) > maxLen) {
			flush()
		}
		if n > 0 {
			length += len(" + ")
		}
		ser, sam = append(ser, term("count", name)), append(sam, t)
		length += len(t)
		n++
	}
	flush()
	return series, samples
}

// query evaluates an instant query whose result is one number (or none:
// 0).
func (o VerifyOptions) query(ctx context.Context, q, at string) (int64, error) {
	form := url.Values{"query": {q}, "time": {at}, "nocache": {"1"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.URL+"/api/v1/query", strings.NewReader(form.Encode()))
	if err != nil {
		return 0, fmt.Errorf("rwload: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if o.Authorize != nil {
		o.Authorize(req)
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("rwload: query: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, fmt.Errorf("rwload: query: %w", err)
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil || resp.StatusCode != http.StatusOK || r.Status != "success" {
		return 0, fmt.Errorf("rwload: query %s: %s: %.500s", q, resp.Status, body)
	}
	if r.Data.ResultType != "vector" || len(r.Data.Result) > 1 {
		return 0, fmt.Errorf("rwload: query %s: want at most one sample, got %.500s", q, body)
	}
	if len(r.Data.Result) == 0 {
		return 0, nil
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("rwload: query %s: value %q: %w", q, s, err)
	}
	return int64(v), nil
}
