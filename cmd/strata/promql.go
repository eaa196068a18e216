package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratadb/strata/internal/auth"
)

// runPromQL evaluates --promql through a datanode's Prometheus HTTP API:
// an instant query at --end (default now), or a range query when --start
// is given, every --step.
func runPromQL(cmd *cobra.Command, expr string) error {
	f := cmd.Flags()
	addr, _ := f.GetString("http")
	format, _ := f.GetString("output")
	timeout, _ := f.GetDuration("timeout")
	stepS, _ := f.GetString("step")
	now := time.Now()
	seconds := func(flag string) (string, error) {
		v, _ := f.GetString(flag)
		if v == "" {
			return "", nil
		}
		ns, err := parseWhen(v, now)
		if err != nil {
			return "", usagef("--%s: %v", flag, err)
		}
		return strconv.FormatFloat(float64(ns)/1e9, 'f', 3, 64), nil
	}
	start, err := seconds("start")
	if err != nil {
		return err
	}
	end, err := seconds("end")
	if err != nil {
		return err
	}
	q := url.Values{"query": {expr}}
	path := "/api/v1/query"
	if start != "" {
		if end == "" {
			end = strconv.FormatFloat(float64(now.UnixNano())/1e9, 'f', 3, 64)
		}
		step, err := time.ParseDuration(stepS)
		if err != nil || step <= 0 {
			return usagef("--step %q: want a positive duration such as 1m", stepS)
		}
		path = "/api/v1/query_range"
		q.Set("start", start)
		q.Set("end", end)
		q.Set("step", strconv.FormatFloat(step.Seconds(), 'f', -1, 64))
	} else if end != "" {
		q.Set("time", end)
	}
	tokenFile, _ := f.GetString("auth-token-file")
	tok, err := auth.Load(tokenFile)
	if err != nil {
		return usagef("%v", err)
	}
	client, scheme, err := httpClient(cmd, timeout)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(cmd.Context(), "POST", scheme+"://"+addr+path, strings.NewReader(q.Encode()))
	if err != nil {
		return usagef("--http %q: %v", addr, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	tok.Authorize(req)
	if err := setTenant(cmd, req); err != nil {
		return err
	}
	var r struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	body, err := promCall(client, req, addr, "query", &r)
	if err != nil {
		return err
	}
	if format == "json" {
		_, err := cmd.OutOrStdout().Write(append(body, '\n'))
		return err
	}
	var rows [][]string
	switch r.ResultType {
	case "scalar", "string":
		var p [2]any
		if err := json.Unmarshal(r.Result, &p); err != nil {
			return err
		}
		rows = append(rows, []string{"", promTime(p[0]), fmt.Sprint(p[1])})
	case "vector", "matrix":
		var series []struct {
			Metric map[string]string `json:"metric"`
			Value  *[2]any           `json:"value"`
			Values [][2]any          `json:"values"`
		}
		if err := json.Unmarshal(r.Result, &series); err != nil {
			return err
		}
		for _, s := range series {
			name := labelString(s.Metric)
			if s.Value != nil {
				s.Values = append(s.Values, *s.Value)
			}
			for _, p := range s.Values {
				rows = append(rows, []string{name, promTime(p[0]), fmt.Sprint(p[1])})
			}
		}
	}
	return output(cmd.OutOrStdout(), format, []string{"series", "time", "value"}, rows)
}

func promTime(v any) string {
	f, _ := v.(float64)
	return time.UnixMilli(int64(f * 1000)).UTC().Format(time.RFC3339Nano)
}

// labelString renders a label set as name{k="v",...}.
func labelString(m map[string]string) string {
	var keys []string
	for k := range m {
		if k != "__name__" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(m["__name__"])
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	b.WriteByte('}')
	return b.String()
}

// promCall sends req (authorized already) to a node's Prometheus HTTP API
// at addr and decodes the answer's data into data, returning the whole
// body; an answer that is not a success is what's error (an HTTP error
// without Prometheus' envelope: its status and body).
func promCall(client *http.Client, req *http.Request, addr, what string, data any) ([]byte, error) {
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: HTTP %d: %s", addr, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", what, r.Error)
	}
	if err := json.Unmarshal(r.Data, data); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", addr, what, err)
	}
	return body, nil
}
