package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratadb/strata/internal/auth"
)

func newCardinality() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cardinality",
		Short: "Series counts by metric name, label and label pair",
		Long: `Print a datanode's cardinality statistics, from its Prometheus HTTP API's
/api/v1/status/tsdb (see docs/http-api.md): the series in all, then the top
--limit metric names by series, label names by distinct values and by the
bytes of their values, and label pairs by series. Counts are exact, of
flushed files and memtables together, of every table or of --table only
(__metrics for what remote write stored); --label adds the top values of
that label by series.

--start and --end (RFC 3339 times, integers in nanoseconds since the epoch,
"now", or a duration before now such as -1h) or --date (YYYY-MM-DD, a UTC
day) count only the series with rows then; default: all data. The node is
--url (http://host:port) or --http (host:port, TLS with --tls-ca-file).`,
		Args: exactArgs(0),
		RunE: runCardinality,
	}
	outputFlag(cmd)
	f := cmd.Flags()
	f.String("table", "", "count this table only (default: all)")
	f.String("label", "", "also list this label's values by series")
	f.Int("limit", 10, "entries per list (at most 10000)")
	f.String("start", "", "count series with rows from then (default: the beginning)")
	f.String("end", "", "count series with rows until then (default: the end of time)")
	f.String("date", "", "count series with rows on this UTC day (YYYY-MM-DD)")
	f.String("http", "localhost:8086", "the datanode's HTTP address")
	f.String("url", "", "the datanode's HTTP API URL (instead of --http), such as http://localhost:8086")
	f.String("auth-token-file", "", "file holding the auth token to send (default: $STRATA_AUTH_TOKEN)")
	f.Duration("timeout", 30*time.Second, "bound on the whole command (0: none)")
	tenantFlag(f)
	return cmd
}

// tsdbStatus is /api/v1/status/tsdb's answer (internal/prom.TSDBStatus).
type tsdbStatus struct {
	HeadStats struct {
		NumSeries     uint64 `json:"numSeries"`
		NumLabelPairs int    `json:"numLabelPairs"`
		MinTime       int64  `json:"minTime"`
		MaxTime       int64  `json:"maxTime"`
	} `json:"headStats"`
	SeriesCountByMetricName      []tsdbStat `json:"seriesCountByMetricName"`
	LabelValueCountByLabelName   []tsdbStat `json:"labelValueCountByLabelName"`
	MemoryInBytesByLabelName     []tsdbStat `json:"memoryInBytesByLabelName"`
	SeriesCountByLabelValuePair  []tsdbStat `json:"seriesCountByLabelValuePair"`
	SeriesCountByFocusLabelValue []tsdbStat `json:"seriesCountByFocusLabelValue"`
}

type tsdbStat struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}

func runCardinality(cmd *cobra.Command, _ []string) error {
	f := cmd.Flags()
	format, _ := f.GetString("output")
	if format != "table" && format != "csv" && format != "json" {
		return usagef("unknown output format %q (want table, csv or json)", format)
	}
	q := url.Values{}
	limit, _ := f.GetInt("limit")
	q.Set("limit", strconv.Itoa(limit))
	for _, p := range [][2]string{{"table", "table"}, {"label", "focusLabel"}, {"date", "date"}} {
		if v, _ := f.GetString(p[0]); v != "" {
			q.Set(p[1], v)
		}
	}
	now := time.Now()
	for _, flag := range []string{"start", "end"} {
		if v, _ := f.GetString(flag); v != "" {
			ns, err := parseWhen(v, now)
			if err != nil {
				return usagef("--%s: %v", flag, err)
			}
			q.Set(flag, strconv.FormatFloat(float64(ns)/1e9, 'f', 3, 64))
		}
	}
	base, _ := f.GetString("url")
	timeout, _ := f.GetDuration("timeout")
	client, scheme, err := httpClient(cmd, timeout)
	if err != nil {
		return err
	}
	if base == "" {
		addr, _ := f.GetString("http")
		base = scheme + "://" + addr
	}
	tokenFile, _ := f.GetString("auth-token-file")
	tok, err := auth.Load(tokenFile)
	if err != nil {
		return usagef("%v", err)
	}
	req, err := http.NewRequestWithContext(cmd.Context(), "GET", strings.TrimSuffix(base, "/")+"/api/v1/status/tsdb?"+q.Encode(), nil)
	if err != nil {
		return usagef("--url %q: %v", base, err)
	}
	tok.Authorize(req)
	if err := setTenant(cmd, req); err != nil {
		return err
	}
	var d tsdbStatus
	body, err := promCall(client, req, base, "cardinality", &d)
	if err != nil {
		return err
	}
	if format == "json" {
		_, err := cmd.OutOrStdout().Write(append(body, '\n'))
		return err
	}
	lists := []struct {
		title, name, value string
		stats              []tsdbStat
	}{
		{"series by metric name", "metric", "series", d.SeriesCountByMetricName},
		{"values by label name", "label", "values", d.LabelValueCountByLabelName},
		{"bytes of values by label name", "label", "bytes", d.MemoryInBytesByLabelName},
		{"series by label pair", "pair", "series", d.SeriesCountByLabelValuePair},
	}
	if label, _ := f.GetString("label"); label != "" {
		lists = append(lists, struct {
			title, name, value string
			stats              []tsdbStat
		}{"series by value of " + label, "value", "series", d.SeriesCountByFocusLabelValue})
	}
	w := cmd.OutOrStdout()
	if format == "csv" {
		rows := [][]string{{"total", "series", strconv.FormatUint(d.HeadStats.NumSeries, 10)}, {"total", "label pairs", strconv.Itoa(d.HeadStats.NumLabelPairs)}}
		for _, l := range lists {
			for _, s := range l.stats {
				rows = append(rows, []string{l.title, s.Name, strconv.FormatUint(s.Value, 10)})
			}
		}
		return output(w, format, []string{"list", "name", "value"}, rows)
	}
	fmt.Fprintf(w, "series: %d\nlabel pairs: %d\n", d.HeadStats.NumSeries, d.HeadStats.NumLabelPairs)
	if d.HeadStats.NumSeries > 0 {
		fmt.Fprintf(w, "rows from %s to %s\n", time.UnixMilli(d.HeadStats.MinTime).UTC().Format(time.RFC3339), time.UnixMilli(d.HeadStats.MaxTime).UTC().Format(time.RFC3339))
	}
	for _, l := range lists {
		fmt.Fprintf(w, "\n%s:\n", l.title)
		rows := make([][]string, len(l.stats))
		for i, s := range l.stats {
			rows[i] = []string{s.Name, strconv.FormatUint(s.Value, 10)}
		}
		if err := output(w, format, []string{strings.ToUpper(l.name), strings.ToUpper(l.value)}, rows); err != nil {
			return err
		}
	}
	return nil
}
