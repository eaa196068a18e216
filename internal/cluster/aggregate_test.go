package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/rollup"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/testseed"
)

// aggregateCluster is twins holding the same points of m (field v, 24
// hosts in 4 racks, tags host and rack, 3 hours about every 10 s): NaNs
// of two payloads, infinities, zeros of both signs and stale markers
// among the values; hosts missing for a stretch of each hour, and four
// only from the second hour on; a minute where every host holds zeros of
// either sign only, one where every host holds NaNs of either payload
// only (a min or max of either has ties) and one of +0 only (none); the
// last hour in memtables.
func aggregateCluster(t *testing.T) (dns []*server.Server, sa *servertest.Node, age *atomic.Int32, base time.Time) {
	t.Helper()
	rng := rand.New(rand.NewSource(int64(testseed.Seed(t))))
	dns, sa, age, write := twins(t, rng)
	base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	otherNaN := math.Float64frombits(0x7ff8000000000abc)
	special := []float64{math.NaN(), otherNaN, math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), math.Float64frombits(value.StaleNaN), 1e308}
	for hour := range 3 {
		var points []row.Point
		for h := range 24 {
			if h >= 20 && hour == 0 {
				continue
			}
			gap := rng.Intn(360)
			for i := range 360 {
				if h >= 12 && i >= gap && i < gap+60 {
					continue // 10 minutes missing
				}
				ts := base.Add(time.Duration(hour)*time.Hour + time.Duration(i)*10*time.Second + time.Duration(rng.Intn(3000))*time.Millisecond)
				v := float64(rng.Intn(1000)) / 10
				if rng.Intn(20) == 0 {
					v = special[rng.Intn(len(special))]
				}
				if hour == 1 {
					switch i / 6 { // the minute
					case 30:
						v = []float64{0, math.Copysign(0, -1)}[rng.Intn(2)]
					case 40:
						v = []float64{math.NaN(), otherNaN}[rng.Intn(2)]
					case 50:
						v = 0
					}
				}
				points = append(points, row.Point{Tags: []row.Tag{{Name: "host", Value: fmt.Sprint("h", h)}, {Name: "rack", Value: fmt.Sprint("r", h%4)}},
					TS: ts.UnixNano(), Fields: []row.Field{{Name: "v", Value: row.FloatValue(v)}}})
			}
		}
		write(points, hour < 2)
	}
	return dns, sa, age, base
}

// min, max, count and group of rollups, computed by the API without the
// engine, with or without a grouping, give through every datanode the
// standalone's answer to the bit, whether the regions' owners aggregate
// their series (current), send them rolled up (older than aggregates) or
// send samples (older than rollups); the owners' partials move fewer
// bytes than their rolled-up series; where a partial's value depends on
// the order of the series (ties), the series are read again and
// aggregated by the receiver.
func TestPartialAggregatesAreTheStandalones(t *testing.T) {
	dns, sa, age, base := aggregateCluster(t)
	ctx := context.Background()
	p := parser.NewParser(parser.Options{})
	bytes := map[int32]float64{}
	queries, reaggregated := 0, 0
	for _, op := range []string{"min", "max", "count", "group"} {
		for _, by := range []string{"", " by (rack)", " by (host, rack)"} {
			for _, f := range []string{"max_over_time", "min_over_time", "avg_over_time"} {
				for _, r := range []time.Duration{time.Minute, 10 * time.Minute, time.Hour} {
					for _, k := range []time.Duration{1, 2} {
						expr := fmt.Sprintf("%s%s (%s(m_v[%dm]))", op, by, f, int(r.Minutes()))
						start, end, step := base.Add(r), base.Add(3*time.Hour), k*r
						eval := func(e *datanode.Engine, who string) string {
							t.Helper()
							parsed, err := p.ParseExpr(expr)
							if err != nil {
								t.Fatal(err)
							}
							m, ok, err := prom.EvalDirect(ctx, &prom.Queryable{Engine: e, Rollups: true}, parsed, start, end, step)
							if err != nil || !ok {
								t.Fatalf("%s step %s on %s: %v (evaluated without the engine: %v)", expr, step, who, err, ok)
							}
							return render(t, m)
						}
						want := eval(sa.Engine(), "the standalone")
						before := rollup.Reaggregations()
						for _, a := range []int32{current, beforeAggregates, beforeRollups} {
							age.Store(a)
							for i, dn := range dns {
								received := peerReceived(t, dn)
								if got := eval(dn.Engine(), fmt.Sprint("dn", i+1)); got != want {
									t.Fatalf("%s step %s through dn%d (owners' age %d):\n%s\nthe standalone's\n%s", expr, step, i+1, a, got, want)
								}
								bytes[a] += peerReceived(t, dn) - received
							}
						}
						if n := rollup.Reaggregations() - before; n > 0 {
							if op != "min" && op != "max" {
								t.Fatalf("%s step %s: read again for ties", expr, step)
							}
							reaggregated++
						}
						age.Store(current)
						queries++
					}
				}
			}
		}
	}
	t.Logf("%d queries, %d read again for ties; ScanColumns bytes received: %.0f from owners aggregating, %.0f rolling up, %.0f sending samples",
		queries, reaggregated, bytes[current], bytes[beforeAggregates], bytes[beforeRollups])
	if reaggregated == 0 || reaggregated == queries/2 {
		t.Fatalf("%d of %d queries read again for ties", reaggregated, queries)
	}
	// Fewer, though groups by host and rack are single series, and
	// queries with ties are read twice.
	if bytes[current] >= bytes[beforeAggregates] || bytes[beforeAggregates] >= bytes[beforeRollups] {
		t.Fatalf("bytes received: %v", bytes)
	}

	// The columns dn1's column scan hands out, asked for partials: its
	// own region's samples, the other owners' groups (as old as they are).
	tb, err := dns[0].Engine().Table("m")
	if err != nil {
		t.Fatal(err)
	}
	local := dns[0].Engine().Hosted()[0].Region
	req := scan.Request{Start: region.AllTime, End: region.AllTimeEnd, Fields: []string{"v"},
		Rollup:    &scan.Rollup{Func: "max_over_time", Range: 600_000, Start: base.UnixMilli() - 599_999, End: base.Add(3 * time.Hour).UnixMilli(), Step: 600_000},
		Aggregate: &scan.Aggregate{Op: "max", By: []string{"rack"}}}
	for _, a := range []int32{current, beforeAggregates, beforeRollups} {
		age.Store(a)
		var mu sync.Mutex
		kinds := map[string]int{}
		err := dns[0].Engine().ScanColumns(ctx, "m", req, func(c *scan.Column) error {
			mu.Lock()
			defer mu.Unlock()
			tags, err := row.DecodeSeries(nil, c.Series)
			if err != nil {
				return err
			}
			switch {
			case c.Aggregated:
				kinds["aggregated"]++
				if !c.Rolled || len(tags) != 1 || tags[0].Name != "rack" || c.Samples < len(c.TS) || len(c.TS) > 19 {
					return fmt.Errorf("a group's column: %v, rolled %v, %d samples, %d windows", tags, c.Rolled, c.Samples, len(c.TS))
				}
			case c.Rolled:
				kinds["rolled"]++
			default:
				kinds["samples"]++
				if layout.Route([]byte(c.Series), tb.Regions) != local && a != beforeRollups {
					return fmt.Errorf("samples of %v from another owner", tags)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if kinds["samples"] == 0 || (kinds["aggregated"] > 0) != (a == current) || (kinds["rolled"] > 0) != (a == beforeAggregates) ||
			a == current && kinds["aggregated"] > 2*4 {
			t.Fatalf("owners' age %d: columns %v", a, kinds)
		}
	}
	age.Store(current)

	// The sample limit counts the samples the owners' groups read.
	parsed, err := p.ParseExpr("count(max_over_time(m_v[1h]))")
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{10_000, 1_000_000} {
		for _, a := range []int32{current, beforeAggregates, beforeRollups} {
			age.Store(a)
			_, _, err := prom.EvalDirect(ctx, &prom.Queryable{Engine: dns[0].Engine(), Rollups: true, MaxSamples: limit}, parsed, base.Add(time.Hour), base.Add(3*time.Hour), time.Hour)
			if over := errors.Is(err, prom.ErrTooManySamples); over != (limit == 10_000) || !over && err != nil {
				t.Fatalf("limit %d, owners' age %d: %v", limit, a, err)
			}
		}
	}
	age.Store(current)
}

// Through the HTTP API, the all-host max and count over an hour's
// windows move fewer bytes between datanodes with the owners aggregating
// than with them sending their series rolled up, for the same answer;
// the hourly average by host (not aggregated at the owners: sum and avg
// are not) moves the same.
func TestPartialAggregatesMoveFewerBytes(t *testing.T) {
	dns, _, age, base := aggregateCluster(t)
	for _, tc := range []struct {
		expr string
		less bool
	}{
		{"max(max_over_time(m_v[1m]))", true},
		{"count(max_over_time(m_v[1m]))", true},
		{"avg(avg_over_time(m_v[1h])) by (host)", false},
	} {
		step := "60"
		if !tc.less {
			step = "3600"
		}
		// The last hour: no minute of ties.
		q := url.Values{"query": {tc.expr}, "start": {fmt.Sprint(base.Add(2 * time.Hour).Unix())}, "end": {fmt.Sprint(base.Add(3 * time.Hour).Unix())}, "step": {step}}
		query := func(a int32) (string, float64) {
			age.Store(a)
			defer age.Store(current)
			before := peerReceived(t, dns[0])
			resp, err := http.Get("http://" + dns[0].HTTPAddr() + "/api/v1/query_range?" + q.Encode())
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d %s", tc.expr, resp.StatusCode, body)
			}
			return string(body), peerReceived(t, dns[0]) - before
		}
		pushed, pushedBytes := query(current)
		rolled, rolledBytes := query(beforeAggregates)
		if pushed != rolled {
			t.Fatalf("%s aggregated at the owners:\n%s\nby the receiver:\n%s", tc.expr, pushed, rolled)
		}
		t.Logf("%s: ScanColumns bytes received by dn1: %.0f with the owners aggregating, %.0f without", tc.expr, pushedBytes, rolledBytes)
		if tc.less && pushedBytes*3 > rolledBytes || !tc.less && pushedBytes != rolledBytes {
			t.Fatalf("%s: %.0f bytes with the owners aggregating, %.0f without", tc.expr, pushedBytes, rolledBytes)
		}
	}
}
