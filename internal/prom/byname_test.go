package prom_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/server/servertest"
)

// byNameFixture is a node holding TSBS's cpu table (five of its fields,
// three hosts, a sample every 10 s for 3 hours, half flushed to SSTs),
// its HTTP client, and Prometheus' engine over the same data, as the API
// configures it, to compare with.
type byNameFixture struct {
	c      client
	q      *prom.Queryable
	engine *promql.Engine
	t0     time.Time
}

var tsbsFields = []string{"usage_user", "usage_system", "usage_idle", "usage_nice", "usage_iowait"}

func newByNameFixture(t *testing.T) *byNameFixture {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	base := "http://" + n.HTTPAddr()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	write := func(from, to int) {
		var b strings.Builder
		for i := from; i < to; i++ {
			for h := range 3 {
				fmt.Fprintf(&b, "cpu,hostname=host_%d", h)
				for k, f := range tsbsFields {
					sep := ","
					if k == 0 {
						sep = " "
					}
					// Short decimals that differ by host, field and time.
					fmt.Fprintf(&b, "%s%s=%d.%d", sep, f, (i*7+h*13+k*31)%100, (i*3+k)%10)
				}
				fmt.Fprintf(&b, " %d\n", t0.Unix()+int64(i)*10)
			}
		}
		resp, err := http.Post(base+"/write?db=x&precision=s", "text/plain", strings.NewReader(b.String()))
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("write: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	write(0, 540)
	if err := n.Engine().Flush(context.Background(), "cpu"); err != nil {
		t.Fatal(err)
	}
	write(540, 1080) // the rest stays in memtables
	return &byNameFixture{
		c: client{t, base},
		q: &prom.Queryable{Engine: n.Engine()},
		engine: promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute,
			LookbackDelta: 5 * time.Minute, EnableAtModifier: true, EnableNegativeOffset: true}),
		t0: t0,
	}
}

// at is a fixture time as the API takes it.
func (f *byNameFixture) at(d time.Duration) string { return strconv.FormatInt(f.t0.Add(d).Unix(), 10) }

// api asks the API: a range query from 1 h to 3 h at step, or an instant
// query at 2 h if step is 0. It returns the result rendered (renderAPI)
// or the error.
func (f *byNameFixture) api(query string, step time.Duration) (string, string) {
	f.c.t.Helper()
	path, q := "/api/v1/query", url.Values{"query": {query}, "time": {f.at(2 * time.Hour)}}
	if step > 0 {
		path, q = "/api/v1/query_range", url.Values{"query": {query}, "start": {f.at(time.Hour)}, "end": {f.at(3 * time.Hour)},
			"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}
	}
	code, r := f.c.get(path, q)
	if r.Status != "success" {
		if code != http.StatusUnprocessableEntity {
			f.c.t.Fatalf("%s: %d %+v", query, code, r)
		}
		return "", r.Error
	}
	return renderAPI(f.c.t, r.Data), ""
}

// ref evaluates query on the unmodified engine over Strata's Queryable,
// as api asks; name, if set, is put on every result series.
func (f *byNameFixture) ref(query string, step time.Duration, name string) (string, string) {
	t := f.c.t
	t.Helper()
	ctx := context.Background()
	var qry promql.Query
	var err error
	if step > 0 {
		qry, err = f.engine.NewRangeQuery(ctx, f.q, nil, query, f.t0.Add(time.Hour), f.t0.Add(3*time.Hour), step)
	} else {
		qry, err = f.engine.NewInstantQuery(ctx, f.q, nil, query, f.t0.Add(2*time.Hour))
	}
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer qry.Close()
	res := qry.Exec(ctx)
	if res.Err != nil {
		return "", res.Err.Error()
	}
	var lines []string
	add := func(ls labels.Labels, pts []string) {
		if name != "" {
			ls = labels.NewBuilder(ls).Set("__name__", name).Labels()
		}
		lines = append(lines, ls.String()+" "+strings.Join(pts, " "))
	}
	switch v := res.Value.(type) {
	case promql.Matrix:
		for _, s := range v {
			var pts []string
			for _, p := range s.Floats {
				pts = append(pts, point(p.T, p.F))
			}
			add(s.Metric, pts)
		}
	case promql.Vector:
		for _, s := range v {
			add(s.Metric, []string{point(s.T, s.F)})
		}
	default:
		t.Fatalf("%s: a %T", query, res.Value)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n"), ""
}

// point is a sample exactly: ms and the value's bits.
func point(t int64, v float64) string { return fmt.Sprintf("%d:%x", t, math.Float64bits(v)) }

// renderAPI renders an API result as ref does.
func renderAPI(t *testing.T, data json.RawMessage) string {
	t.Helper()
	var d struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
			Value  []any             `json:"value"`
		} `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, s := range d.Result {
		vals := s.Values
		if s.Value != nil {
			vals = [][2]any{{s.Value[0], s.Value[1]}}
		}
		var pts []string
		for _, p := range vals {
			v, err := strconv.ParseFloat(p[1].(string), 64)
			if err != nil {
				t.Fatal(err)
			}
			pts = append(pts, point(int64(math.Round(p[0].(float64)*1000)), v))
		}
		lines = append(lines, labels.FromMap(s.Metric).String()+" "+strings.Join(pts, " "))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// An aggregation by __name__ over a range function that drops it, over a
// selector of several names, answers one series per name and grouping
// labels (VictoriaMetrics' answer), where Prometheus fails: TSBS's
// single-groupby and double-groupby queries for VictoriaMetrics. Each
// answer is, to the bit, the unmodified engine's answer to the query asked
// for each name alone, with the name put back; over the engine and
// without it (a step of at least the range), range and instant queries.
func TestAggregationByNameAnswersEachName(t *testing.T) {
	f := newByNameFixture(t)
	allFive := "cpu_(" + strings.Join(tsbsFields, "|") + ")"
	for _, tc := range []struct {
		query   string
		perName string // the query of one name (%s)
		names   []string
	}{
		// single-groupby-5-1-1
		{`max(max_over_time({__name__=~"` + allFive + `", hostname=~"host_1"}[1h])) by (__name__)`,
			`max(max_over_time(%s{hostname=~"host_1"}[1h]))`, tsbsFields},
		// double-groupby-2
		{`avg(avg_over_time({__name__=~"cpu_(usage_user|usage_system)"}[1h])) by (__name__, hostname)`,
			`avg(avg_over_time(%s[1h])) by (hostname)`, tsbsFields[:2]},
		{`sum by (hostname, __name__) (rate({__name__=~"cpu_usage_(user|idle)", hostname!="host_2"}[10m]))`,
			`sum by (hostname) (rate(%s{hostname!="host_2"}[10m]))`, []string{"usage_user", "usage_idle"}},
		{`quantile by (__name__) (0.9, quantile_over_time(0.5, {__name__=~"cpu_usage_.*"}[30m] offset 5m))`,
			`quantile (0.9, quantile_over_time(0.5, %s[30m] offset 5m))`, tsbsFields},
		{`count(min_over_time({__name__!="cpu_usage_nice", __name__=~"cpu_.+"}[1h])) by (__name__)`,
			`count(min_over_time(%s[1h]))`, []string{"usage_user", "usage_system", "usage_idle", "usage_iowait"}},
	} {
		for _, step := range []time.Duration{time.Hour, 2 * time.Hour, 10 * time.Minute, 0} {
			got, gotErr := f.api(tc.query, step)
			if gotErr != "" {
				t.Fatalf("%s at step %v: %s", tc.query, step, gotErr)
			}
			var want []string
			for _, n := range tc.names {
				w, err := f.ref(fmt.Sprintf(tc.perName, "cpu_"+n), step, "cpu_"+n)
				if err != "" {
					t.Fatalf("%s: %s", tc.perName, err)
				}
				if w != "" {
					want = append(want, strings.Split(w, "\n")...)
				}
			}
			slices.Sort(want)
			if got != strings.Join(want, "\n") || len(want) == 0 {
				t.Fatalf("%s at step %v:\n%s\nwant\n%s", tc.query, step, got, strings.Join(want, "\n"))
			}
		}
	}
	// Prometheus fails the TSBS forms: two names of one host collide once
	// the function has dropped them.
	_, err := f.ref(`max(max_over_time({__name__=~"`+allFive+`", hostname=~"host_1"}[1h])) by (__name__)`, time.Hour, "")
	if !strings.Contains(err, "same labelset") {
		t.Fatalf("the engine: %q", err)
	}
}

// Every other expression, by __name__ or not, is answered as Prometheus
// answers it, errors included: one name, a selector that keeps the names,
// other groupings, functions that keep the name, an aggregation inside
// another expression.
func TestAggregationByNameOtherwiseAsPrometheus(t *testing.T) {
	f := newByNameFixture(t)
	two := `{__name__=~"cpu_usage_(user|system)"}`
	for _, q := range []string{
		`sum(rate(cpu_usage_user[5m])) by (__name__)`,
		`sum(rate({__name__="cpu_usage_user"}[5m])) by (__name__, hostname)`,
		`sum(rate({__name__=~"cpu_usage_user"}[5m])) by (__name__)`, // a regex of one name
		`count by (__name__) ({__name__=~"cpu_.+"})`,
		`count by (__name__, hostname) (` + two + `)`,
		`max by (hostname) (max_over_time(` + two + `[1h]))`,
		`max (max_over_time(` + two + `[1h]))`,
		`sum without (hostname) (max_over_time(` + two + `[1h]))`,
		`max by (__name__) (last_over_time(` + two + `[1h]))`,
		`topk by (__name__) (1, max_over_time(` + two + `[1h]))`,
		`max by (__name__) (max_over_time(` + two + `[1h])) + 1`,
		`max by (__name__) (abs(` + two + `))`,
		`max by (__name__) (max_over_time(abs(` + two + `)[1h:10m]))`,
		`max by (__name__) (max_over_time(cpu_usage_user[1h]) or max_over_time(cpu_usage_system[1h]))`,
		`max_over_time(` + two + `[1h])`,
	} {
		for _, step := range []time.Duration{time.Hour, 10 * time.Minute, 0} {
			got, gotErr := f.api(q, step)
			want, wantErr := f.ref(q, step, "")
			if got != want || gotErr != wantErr {
				t.Fatalf("%s at step %v:\n%s %s\nwant\n%s %s", q, step, got, gotErr, want, wantErr)
			}
		}
	}
}
