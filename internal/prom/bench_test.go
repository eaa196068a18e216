package prom_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/stratadb/strata/internal/benchutil"
	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/tsbs"
)

// BenchmarkPromQL: TSBS cpu-only rows (4000 hosts, 10 fields, 10 s apart)
// for $STRATA_BENCH_HOURS hours (default 1) on file://, flushed (and
// compacted, over more than an hour), then PromQL through Prometheus'
// engine over Strata's Queryable, in process: one host's max over 1 m
// windows for the last hour, 8 hosts' for every hour, every host's hourly
// average, and that again over series held in memory (the engine's own
// share); then some of these and /api/v1/label/hostname/values through the
// node's HTTP API. Reports p50 and p99 per query.
func BenchmarkPromQL(b *testing.B) {
	const hosts = 4000
	hours := 1
	if s := os.Getenv("STRATA_BENCH_HOURS"); s != "" {
		var err error
		if hours, err = strconv.Atoi(s); err != nil || hours < 1 {
			b.Fatalf("STRATA_BENCH_HOURS=%q", s)
		}
	}
	rounds := 360 * hours
	ctx := context.Background()
	store, err := objstore.Open(ctx, "file://"+b.TempDir(), objstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	node := servertest.Start(b, store, servertest.Options{})
	e := node.Engine()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tags := make([][]row.Tag, hosts)
	for h := range tags {
		tags[h] = tsbs.Tags(h)
	}
	for r := range rounds {
		batch := make([]row.Point, hosts)
		for h := range hosts {
			batch[h] = tsbs.Point(tags, r*hosts+h, start.UnixNano())
		}
		if _, err := e.Write(ctx, "cpu", batch, datanode.WriteOptions{CreateTable: true}); err != nil {
			b.Fatal(err)
		}
	}
	if err := e.Flush(ctx, "cpu"); err != nil {
		b.Fatal(err)
	}
	if hours > 1 { // compacted, as the side-by-side benchmark is
		for {
			_, err := e.Compact(ctx, "cpu", true)
			if err == nil {
				break
			}
			if !errors.Is(err, compact.ErrBusy) {
				b.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	q := &prom.Queryable{Engine: e, Rollups: true} // as the API asks for these queries (prom.RollupSafe)
	end := start.Add(time.Duration(hours) * time.Hour)
	for _, bc := range []struct {
		name  string
		expr  string
		step  time.Duration
		start time.Time
		held  bool   // the engine alone: over the series the first Select read, held in memory
		http  bool   // through the node's /api/v1/query_range, the response read whole
		path  string // a GET of this path through the node's HTTP API instead
	}{
		{"1-host-1h", `max(max_over_time(cpu_usage_user{hostname="host_1"}[1m]))`, time.Minute, end.Add(-time.Hour), false, false, ""},
		{"8-hosts", `max(max_over_time(cpu_usage_user{hostname=~"host_1|host_2|host_3|host_4|host_5|host_6|host_7|host_8"}[1m]))`, time.Minute, start, false, false, ""},
		{"all-hosts-avg", `avg by (hostname) (avg_over_time(cpu_usage_user[1h]))`, time.Hour, start.Add(time.Hour), false, false, ""},
		{"all-hosts-avg-engine-only", `avg by (hostname) (avg_over_time(cpu_usage_user[1h]))`, time.Hour, start.Add(time.Hour), true, false, ""},
		{"1-host-1h-http", `max(max_over_time(cpu_usage_user{hostname="host_1"}[1m]))`, time.Minute, end.Add(-time.Hour), false, true, ""},
		{"8-hosts-http", `max(max_over_time(cpu_usage_user{hostname=~"host_1|host_2|host_3|host_4|host_5|host_6|host_7|host_8"}[1m]))`, time.Minute, start, false, true, ""},
		{"all-hosts-avg-http", `avg by (hostname) (avg_over_time(cpu_usage_user[1h]))`, time.Hour, start.Add(time.Hour), false, true, ""},
		{"label-values-http", "", 0, start, false, false, "/api/v1/label/hostname/values?start=" + strconv.FormatInt(start.Unix(), 10) +
			"&end=" + strconv.FormatInt(end.Unix(), 10)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var q storage.Queryable = q
			if bc.held {
				q = &heldQueryable{q: q}
			}
			var lat []time.Duration
			stop := benchutil.StartProfile(b)
			defer stop()
			for b.Loop() {
				t0 := time.Now()
				if bc.path != "" {
					if err := fetchPath(ctx, "http://"+node.HTTPAddr()+bc.path, "host_3999"); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
					continue
				}
				if bc.http {
					if err := fetchRange(ctx, "http://"+node.HTTPAddr(), bc.expr, bc.start, end, bc.step); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
					continue
				}
				var qry promql.Query
				if bc.step == 0 {
					qry, err = engine.NewInstantQuery(ctx, q, nil, bc.expr, bc.start)
				} else {
					qry, err = engine.NewRangeQuery(ctx, q, nil, bc.expr, bc.start, end, bc.step)
				}
				if err != nil {
					b.Fatal(err)
				}
				res := qry.Exec(ctx)
				if res.Err != nil {
					b.Fatal(res.Err)
				}
				qry.Close()
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// heldQueryable answers every Select with the series its first Select
// read, held in memory: what is left of a query is the engine's own work.
type heldQueryable struct {
	q    storage.Queryable
	held []storage.Series
}

func (h *heldQueryable) Querier(mint, maxt int64) (storage.Querier, error) {
	qr, err := h.q.Querier(mint, maxt)
	return &heldQuerier{Querier: qr, h: h}, err
}

type heldQuerier struct {
	storage.Querier
	h *heldQueryable
}

func (q *heldQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	if q.h.held == nil {
		ss := q.Querier.Select(ctx, sortSeries, hints, ms...)
		for ss.Next() {
			q.h.held = append(q.h.held, ss.At())
		}
		if err := ss.Err(); err != nil {
			return storage.ErrSeriesSet(err)
		}
	}
	return &heldSet{series: q.h.held, pos: -1}
}

type heldSet struct {
	series []storage.Series
	pos    int
}

func (s *heldSet) Next() bool                        { s.pos++; return s.pos < len(s.series) }
func (s *heldSet) At() storage.Series                { return s.series[s.pos] }
func (s *heldSet) Err() error                        { return nil }
func (s *heldSet) Warnings() annotations.Annotations { return nil }
