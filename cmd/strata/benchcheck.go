package main

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

	"github.com/stratadb/strata/internal/tsbs"
)

// ingestCheck counts what `strata bench ingest` wrote back through the
// server's PromQL API, which Strata and VictoriaMetrics both serve: the
// series (a table's field per host) and the samples (a row's fields) in
// the run's time range. A side-by-side prints a ratio only after each
// server holds everything it was sent.
type ingestCheck struct {
	table       string
	hosts, rows int
	start       time.Time

	series, samples float64 // stored
	queries         int
}

// last is the run's last row's time.
func (c *ingestCheck) last() time.Time {
	return c.start.Add(time.Duration((c.rows-1)/c.hosts) * 10 * time.Second)
}

func (c *ingestCheck) want() (series, samples float64) {
	return float64(min(c.hosts, c.rows) * len(tsbs.Fields)), float64(c.rows * len(tsbs.Fields))
}

// exprs are the two counts' PromQL for one field (its metric), over a
// window holding every row. One metric a query: a range function over
// several drops their names, and their series collide.
func (c *ingestCheck) exprs(field string) (series, samples string) {
	sel := fmt.Sprintf(`%s_%s[%ds]`, c.table, field, int(c.last().Sub(c.start)/time.Second)+1)
	return "count(last_over_time(" + sel + "))", "sum(count_over_time(" + sel + "))"
}

func (c ingestCheck) String() string {
	ws, wn := c.want()
	return fmt.Sprintf("series %.0f expected, %.0f stored; samples %.0f expected, %.0f stored: ok (%d queries)", ws, c.series, wn, c.samples, c.queries)
}

// run asks until the counts match or timeout passes (then fails naming
// both counts).
func (c *ingestCheck) run(ctx context.Context, client *http.Client, base string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ws, wn := c.want()
	at := strconv.FormatFloat(float64(c.last().UnixMilli())/1000, 'f', 3, 64)
	// VictoriaMetrics makes rows searchable a while after it took them,
	// and caches a query's answer over old times: a count asked too early
	// stays short. Ask it to flush (other servers answer 404, ignored) and
	// query with nocache=1.
	if req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/internal/force_flush", nil); err == nil {
		authorize(req)
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	for {
		var err error
		c.series, c.samples = 0, 0
		for _, f := range tsbs.Fields {
			se, sa := c.exprs(f)
			var n, m float64
			c.queries += 2
			if n, err = scalarQuery(ctx, client, base, se, at); err == nil {
				m, err = scalarQuery(ctx, client, base, sa, at)
			}
			if err != nil {
				break
			}
			c.series, c.samples = c.series+n, c.samples+m
		}
		if err == nil && c.series == ws && c.samples == wn {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("verify: %w", err)
			}
			return fmt.Errorf("verify: the server stored %.0f of %.0f series and %.0f of %.0f samples (checked for %v; a peer's retention or limits drop rows: see its own counters)", c.series, ws, c.samples, wn, timeout)
		case <-time.After(time.Second): // a server's indexing has no signal to wait on
		}
	}
}

// scalarQuery evaluates expr at time at and returns its one value (0 if
// the vector is empty: nothing stored).
func scalarQuery(ctx context.Context, client *http.Client, base, expr, at string) (float64, error) {
	form := url.Values{"query": {expr}, "time": {at}, "nocache": {"1"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/query", strings.NewReader(form.Encode()))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	authorize(req)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil || resp.StatusCode != http.StatusOK || r.Status != "success" {
		return 0, fmt.Errorf("%s: %s: %.300s", expr, resp.Status, body)
	}
	switch len(r.Data.Result) {
	case 0:
		return 0, nil
	case 1:
		s, _ := r.Data.Result[0].Value[1].(string)
		return strconv.ParseFloat(s, 64)
	}
	return 0, fmt.Errorf("%s: %d series, want one", expr, len(r.Data.Result))
}
