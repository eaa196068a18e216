package rwload

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"
)

// Probe is how long a server takes to answer the two questions a
// dashboard over a run's data asks first: which metric names there are,
// and how many series each has.
type Probe struct {
	// LabelValues are the times of /api/v1/label/__name__/values over the
	// run's time range, in the order taken; Names how many names the last
	// answer held (at least the run's names, or Probe failed).
	LabelValues []time.Duration
	Names       int
	// CountByName are the times of count by (__name__) of the run's
	// series ({__name__=~"<prefix>_.*", job="avalanche"}) at the last
	// scrape; Groups how many names the last answer held (the run's
	// names, or Probe failed).
	CountByName []time.Duration
	Groups      int
}

// ProbeOptions say where to ask and how often.
type ProbeOptions struct {
	// URL is the query API's base address (…/api/v1/… is appended).
	URL       string
	Client    *http.Client
	Authorize func(*http.Request)
	// LabelValues and CountByName are how many times each is asked.
	LabelValues, CountByName int
}

// RunProbe asks the server, after a run (and Verify), for the metric
// names of the run's time range and for the series count of each name,
// timing every answer and checking that each holds every name the run
// sent: a fast answer that left names out would prove nothing.
func RunProbe(ctx context.Context, g *Generator, o ProbeOptions) (Probe, error) {
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	first, last := g.timestamp(0), g.timestamp(g.shape.Scrapes-1)
	ts := func(ms int64) string { return fmt.Sprintf("%d.%03d", ms/1000, ms%1000) }
	var p Probe
	rng := url.Values{"start": {ts(first)}, "end": {ts(last + 1)}}
	for range o.LabelValues {
		var names []string
		took, err := o.get(ctx, "/api/v1/label/__name__/values", rng, &names)
		if err != nil {
			return p, err
		}
		p.LabelValues, p.Names = append(p.LabelValues, took), len(names)
		if missing := g.missingNames(names); missing != "" {
			return p, fmt.Errorf("rwload: /api/v1/label/__name__/values: %d names, %s missing", len(names), missing)
		}
	}
	sel := fmt.Sprintf(`count by (__name__) ({__name__=~"%s_.*", job="avalanche"})`, g.shape.Prefix)
	q := url.Values{"query": {sel}, "time": {ts(last)}, "nocache": {"1"}}
	for range o.CountByName {
		var vec struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		}
		took, err := o.get(ctx, "/api/v1/query", q, &vec)
		if err != nil {
			return p, err
		}
		names := make([]string, len(vec.Result))
		for i, r := range vec.Result {
			names[i] = r.Metric["__name__"]
		}
		p.CountByName, p.Groups = append(p.CountByName, took), len(names)
		if missing := g.missingNames(names); missing != "" || len(names) != len(g.names) {
			return p, fmt.Errorf("rwload: count by (__name__): %d names of %d, %q missing", len(names), len(g.names), missing)
		}
	}
	return p, nil
}

// missingNames returns the first of the run's names not in got, or "".
func (g *Generator) missingNames(got []string) string {
	slices.Sort(got)
	for _, n := range g.names {
		if _, ok := slices.BinarySearch(got, n); !ok {
			return n
		}
	}
	return ""
}

// get asks path (GET, as Prometheus serves label values) with form and decodes the answer's data into data,
// returning the time from the request to the last byte of the answer.
func (o ProbeOptions) get(ctx context.Context, path string, form url.Values, data any) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.URL+path+"?"+form.Encode(), nil)
	if err != nil {
		return 0, fmt.Errorf("rwload: %w", err)
	}
	if o.Authorize != nil {
		o.Authorize(req)
	}
	began := time.Now()
	resp, err := o.Client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("rwload: %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	took := time.Since(began)
	if err != nil {
		return 0, fmt.Errorf("rwload: %s: %w", path, err)
	}
	var r struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil || resp.StatusCode != http.StatusOK || r.Status != "success" {
		return 0, fmt.Errorf("rwload: %s: %s: %.500s", path, resp.Status, body)
	}
	if err := json.Unmarshal(r.Data, data); err != nil {
		return 0, fmt.Errorf("rwload: %s: %w", path, err)
	}
	return took, nil
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of ds: the element at
// rank q·len(ds), 0 if ds is empty. ds is left in its order (its first
// is the first request's: benchrw reports it).
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Sorted(slices.Values(ds)) // the caller's stay in the order taken
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}
