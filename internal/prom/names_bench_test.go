package prom_test

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/prompb"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/server/servertest"
)

// BenchmarkNewMetricNames: what a new metric name costs, from the first
// to the 100,000th. Remote-write requests of 1,000 names never seen
// before (10 series of 15 labels each, one sample) go to a standalone
// node one after another; the time of each 10,000 names' requests is
// logged and the first and last are reported. Run with -benchtime 1x; a name is a label
// value of the one metrics table, so the figures stay flat.
func BenchmarkNewMetricNames(b *testing.B) {
	const names, perRequest, series = 100_000, 1_000, 10
	for b.Loop() {
		n := servertest.Start(b, objstoretest.Mem(b), servertest.Options{})
		base := "http://" + n.HTTPAddr()
		t0 := time.Now().Add(-time.Minute).UnixMilli()
		var per []time.Duration
		var sum time.Duration
		for first := 0; first < names; first += perRequest {
			req := &prompb.WriteRequest{}
			for i := first; i < first+perRequest; i++ {
				for s := range series {
					labels := []prompb.Label{{Name: "__name__", Value: fmt.Sprintf("metric_%06d", i)}}
					for l := range 14 {
						labels = append(labels, prompb.Label{Name: fmt.Sprintf("label_%02d", l), Value: "value_" + strconv.Itoa(s) + "_" + strconv.Itoa(l)})
					}
					req.Timeseries = append(req.Timeseries, prompb.TimeSeries{Labels: labels, Samples: []prompb.Sample{{Value: float64(i), Timestamp: t0}}})
				}
			}
			sent := time.Now()
			resp := send(b, base, req, "application/x-protobuf")
			sum += time.Since(sent)
			if resp.StatusCode != http.StatusNoContent {
				b.Fatalf("names %d..: %d", first, resp.StatusCode)
			}
			if (first+perRequest)%10_000 == 0 {
				per, sum = append(per, sum), 0
			}
		}
		for i, d := range per {
			b.Logf("names %6d to %6d: %v", i*10_000+1, (i+1)*10_000, d.Round(time.Millisecond))
		}
		b.ReportMetric(per[0].Seconds(), "s/first-10k-names")
		b.ReportMetric(per[len(per)-1].Seconds(), "s/last-10k-names")
	}
}
