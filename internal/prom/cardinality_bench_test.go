package prom_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/prompb"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/server/servertest"
)

// BenchmarkTSDBStatus: /api/v1/status/tsdb over a standalone node's
// metrics table of STRATA_TSDB_BENCH_SERIES series (default 1,000,000;
// 1,000 metric names, 1,000 instances, 10 jobs, 3 more labels; and in
// "unique-id", a label id with a value of each series' own, the classic
// cardinality explosion, so a million label pairs), every
// series flushed to a file and again in the memtable (the steady state
// of a remote-write source: the counts must merge the two). Reported,
// each the mean of b.N requests: ms/new-series, a request after one new
// series arrived (the region counts it, looked up, into its kept counts),
// with p99-ms/new-series; ms/kept, a request with nothing new; and
// ms/recount, the first request (nothing kept: every key listed, sorted
// and decoded, as after a flush or compaction), measured once.
func BenchmarkTSDBStatus(b *testing.B) {
	b.Run("bounded-labels", func(b *testing.B) { benchTSDBStatus(b, false) })
	b.Run("unique-id", func(b *testing.B) { benchTSDBStatus(b, true) })
}

func benchTSDBStatus(b *testing.B, uniqueID bool) {
	total := 1_000_000
	if s := os.Getenv("STRATA_TSDB_BENCH_SERIES"); s != "" {
		var err error
		if total, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	n := servertest.Start(b, objstoretest.Mem(b), servertest.Options{})
	base := "http://" + n.HTTPAddr()
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	labelsOf := func(i int) []prompb.Label {
		ls := []prompb.Label{
			{Name: "__name__", Value: fmt.Sprintf("metric_%04d", i%1000)},
			{Name: "env", Value: "prod"},
			{Name: "instance", Value: fmt.Sprintf("host-%04d:9100", i/1000)},
			{Name: "job", Value: fmt.Sprintf("job_%d", i/1000%10)},
			{Name: "region", Value: fmt.Sprintf("r%d", i%7)},
			{Name: "zone", Value: fmt.Sprintf("z%d", i%3)},
		}
		if uniqueID {
			ls = slices.Insert(ls, 2, prompb.Label{Name: "id", Value: strconv.Itoa(i)}) // names sorted
		}
		return ls
	}
	write := func(ts int64) {
		const perRequest = 10_000
		for first := 0; first < total; first += perRequest {
			req := &prompb.WriteRequest{}
			for i := first; i < min(first+perRequest, total); i++ {
				req.Timeseries = append(req.Timeseries, prompb.TimeSeries{Labels: labelsOf(i), Samples: []prompb.Sample{{Value: 1, Timestamp: ts}}})
			}
			if resp := send(b, base, req, "application/x-protobuf"); resp.StatusCode != http.StatusNoContent {
				b.Fatalf("write %d..: %d", first, resp.StatusCode)
			}
		}
	}
	began := time.Now()
	write(t0)
	if err := n.Engine().Flush(context.Background(), catalog.MetricsTable); err != nil {
		b.Fatal(err)
	}
	write(t0 + 15_000)
	b.Logf("%d series written twice, flushed once, in %v", total, time.Since(began).Round(time.Second))
	status := func() prom.TSDBStatus {
		resp, err := http.Get(base + "/api/v1/status/tsdb")
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			Status string          `json:"status"`
			Data   prom.TSDBStatus `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" {
			b.Fatalf("status/tsdb: %d %v %+v", resp.StatusCode, err, r)
		}
		return r.Data
	}
	ask := func() time.Duration {
		start := time.Now()
		status()
		return time.Since(start)
	}
	newSeries := 0
	fresh := func() {
		newSeries++
		req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: []prompb.Label{{Name: "__name__", Value: "new"}, {Name: "i", Value: strconv.Itoa(newSeries)}},
			Samples: []prompb.Sample{{Value: 1, Timestamp: t0}}}}}
		if resp := send(b, base, req, "application/x-protobuf"); resp.StatusCode != http.StatusNoContent {
			b.Fatalf("write: %d", resp.StatusCode)
		}
	}
	recount := ask()
	var cold, kept []time.Duration
	for b.Loop() {
		b.StopTimer()
		fresh()
		b.StartTimer()
		cold = append(cold, ask())
		kept = append(kept, ask())
	}
	// A flush turns the memtable into a file of the same series: the
	// counts stay (region.Cardinality), the next request looks up the
	// new series alone.
	var flushed []time.Duration
	for range 3 {
		fresh()
		if err := n.Engine().Flush(context.Background(), catalog.MetricsTable); err != nil {
			b.Fatal(err)
		}
		fresh()
		flushed = append(flushed, ask())
	}
	st := status()
	if want := uint64(total + newSeries); st.HeadStats.NumSeries != want {
		b.Fatalf("numSeries %d, want %d", st.HeadStats.NumSeries, want)
	}
	mean := func(ds []time.Duration) float64 {
		var s time.Duration
		for _, d := range ds {
			s += d
		}
		return float64(s.Microseconds()) / 1000 / float64(len(ds))
	}
	slices.Sort(cold)
	b.ReportMetric(mean(cold), "ms/new-series")
	b.ReportMetric(float64(cold[(len(cold)*99)/100].Milliseconds()), "p99-ms/new-series")
	b.ReportMetric(mean(kept), "ms/kept")
	b.ReportMetric(float64(recount.Milliseconds()), "ms/recount")
	b.ReportMetric(float64(slices.Max(flushed).Microseconds())/1000, "max-ms/after-flush")
	b.ReportMetric(float64(total), "series")
}
