package rules_test

import (
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/prompb"

	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/rules"
	"github.com/stratadb/strata/internal/testseed"
)

const recordingRules = `groups:
  - name: rec
    interval: 1s
    rules:
      - record: job:rw_requests:rate30s
        expr: sum by (job) (rate(rw_requests_total[30s]))
      - record: rw_temp:avg_scaled
        expr: avg(rw_temp) * 2 + 1
        labels:
          source: rule
`

// sample is one point of an answer: [unix seconds, "value"].
type sample [2]any

func (s sample) ms() int64 {
	f, _ := s[0].(float64)
	return int64(f*1000 + 0.5)
}

func (s sample) value() string { v, _ := s[1].(string); return v }

type queryResult struct {
	ResultType string `json:"resultType"`
	Result     []struct {
		Metric map[string]string `json:"metric"`
		Value  sample            `json:"value"`
		Values []sample          `json:"values"`
	} `json:"result"`
}

// TestRecordingRulesRecordWhatPromQLAnswers: random series written through
// remote write, two recording rules evaluated every second; every sample a
// rule recorded is, to the bit, what /api/v1/query answers for the rule's
// expression at that sample's time, with the rule's name and labels.
func TestRecordingRulesRecordWhatPromQLAnswers(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 0))
	dir := rulesDir(t)
	file := filepath.Join(dir, "rec.yml")
	n := start(t, t.TempDir(), objstoretest.Mem(t), rules.Options{Files: []string{filepath.Join(dir, "*.yml")}, Interval: time.Minute})

	// Every sample is written before the rules are loaded, from ten
	// minutes ago to three minutes ahead, so that an evaluation and the
	// query that checks it read the same data.
	now := time.Now()
	var ss []series
	for _, job := range []string{"a", "b"} {
		for inst := range 3 {
			s := series{labels: map[string]string{"__name__": "rw_requests_total", "job": job, "instance": strconv.Itoa(inst)}}
			v := 0.0
			for ts := now.Add(-10 * time.Minute); ts.Before(now.Add(3 * time.Minute)); ts = ts.Add(5 * time.Second) {
				v += float64(rng.IntN(100))
				if rng.IntN(50) == 0 {
					v = 0 // a counter reset
				}
				s.samples = append(s.samples, prompb.Sample{Timestamp: ms(ts), Value: v})
			}
			ss = append(ss, s)
		}
	}
	for room := range 4 {
		s := series{labels: map[string]string{"__name__": "rw_temp", "room": strconv.Itoa(room)}}
		for ts := now.Add(-10 * time.Minute); ts.Before(now.Add(3 * time.Minute)); ts = ts.Add(7 * time.Second) {
			s.samples = append(s.samples, prompb.Sample{Timestamp: ms(ts), Value: 15 + rng.Float64()*10})
		}
		ss = append(ss, s)
	}
	n.remoteWrite(ss...)
	writeFile(t, file, recordingRules)
	if code, body := n.reload(); code != http.StatusOK {
		t.Fatalf("reload: %d %s", code, body)
	}

	checks := []struct {
		record, expr string
		series       int               // the rule's series
		labels       map[string]string // labels every one of them has
	}{
		{"job:rw_requests:rate30s", "sum by (job) (rate(rw_requests_total[30s]))", 2, nil},
		{"rw_temp:avg_scaled", "avg(rw_temp) * 2 + 1", 1, map[string]string{"source": "rule"}},
	}
	const steps = 5
	for _, c := range checks {
		var recorded queryResult
		clustertest.Until(t, 90*time.Second, c.record+" recorded at "+strconv.Itoa(steps)+" steps", func() (bool, string) {
			n.get("/api/v1/query", url.Values{"query": {c.record + "[5m]"}, "time": {promTime(ms(time.Now()))}}, &recorded)
			if len(recorded.Result) != c.series {
				return false, "series: " + strconv.Itoa(len(recorded.Result))
			}
			for _, r := range recorded.Result {
				if len(r.Values) < steps {
					return false, "samples: " + strconv.Itoa(len(r.Values))
				}
			}
			return true, ""
		})
		checked := 0
		for _, r := range recorded.Result {
			if r.Metric["__name__"] != c.record {
				t.Errorf("%s: recorded series %v", c.record, r.Metric)
			}
			for k, v := range c.labels {
				if r.Metric[k] != v {
					t.Errorf("%s: series %v lacks the rule's label %s=%q", c.record, r.Metric, k, v)
				}
			}
			for _, s := range r.Values {
				var want queryResult
				n.get("/api/v1/query", url.Values{"query": {c.expr}, "time": {promTime(s.ms())}}, &want)
				found := false
				for _, w := range want.Result {
					if w.Metric["job"] == r.Metric["job"] {
						found = true
						if w.Value.value() != s.value() {
							t.Errorf("%s %v at %d ms: recorded %s, %s answers %s", c.record, r.Metric, s.ms(), s.value(), c.expr, w.Value.value())
						}
					}
				}
				if !found {
					t.Errorf("%s %v at %d ms: %s answers no such series: %+v", c.record, r.Metric, s.ms(), c.expr, want.Result)
				}
				checked++
			}
		}
		t.Logf("%s: %d samples checked", c.record, checked)
	}

	// The rules' state, and Prometheus' rule metrics on /metrics.
	got := n.rules(nil)
	if len(got.Groups) != 1 || got.Groups[0].Name != "rec" || got.Groups[0].File != file || got.Groups[0].Interval != 1 || len(got.Groups[0].Rules) != 2 {
		t.Fatalf("rules: %+v", got)
	}
	for i, r := range got.Groups[0].Rules {
		if r.Type != "recording" || r.Health != "ok" || r.LastError != "" || r.Name != checks[i].record || r.Query != checks[i].expr || r.LastEvaluation.IsZero() {
			t.Errorf("rule %d: %+v", i, r)
		}
	}
	if got := n.rules(url.Values{"type": {"alert"}}); len(got.Groups) != 0 {
		t.Errorf("type=alert: %+v", got)
	}
	for _, q := range []url.Values{{"rule_name[]": {"rw_temp:avg_scaled"}}, {"match[]": {`{source="rule"}`}}} {
		if got := n.rules(q); len(got.Groups) != 1 || len(got.Groups[0].Rules) != 1 || got.Groups[0].Rules[0].Name != "rw_temp:avg_scaled" {
			t.Errorf("rules %v: %+v", q, got)
		}
	}
	resp, err := http.Get(n.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, re := range []string{
		`prometheus_rule_evaluations_total\{rule_group=".*rec\.yml;rec"\} [1-9]`,
		`prometheus_rule_evaluation_failures_total\{rule_group=".*rec\.yml;rec"\} 0`,
		`prometheus_rule_group_last_evaluation_timestamp_seconds\{rule_group=".*rec\.yml;rec"\} 1`,
		`prometheus_rule_evaluation_duration_seconds_count [1-9]`,
	} {
		if !regexp.MustCompile(re).Match(body) {
			t.Errorf("/metrics has no line matching %s", re)
		}
	}
}
