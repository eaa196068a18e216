package region

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
)

// promTags is series s of a Prometheus-shaped load (as sst's
// BenchmarkWriteManySeries builds its keys): 10 series a metric name, 18
// labels (__name__, instance, job, label_key_0..14, series_id), about 445
// bytes a key, every label but the name depending on the series.
func promTags(s int) []row.Tag {
	metric, inst := s/10, s%10
	h := fnv.New64a()
	_, _ = fmt.Fprint(h, s) // a hash.Hash never fails a write
	r := h.Sum64()
	tags := make([]row.Tag, 0, 18)
	tags = append(tags,
		row.Tag{Name: "__name__", Value: fmt.Sprintf("metric_name_%06d", metric)},
		row.Tag{Name: "instance", Value: fmt.Sprintf("host-%04d:9100", (metric*7+inst)%5000)},
		row.Tag{Name: "job", Value: "node_exporter_" + strconv.Itoa(int(r%8))})
	for k := range 15 {
		tags = append(tags, row.Tag{Name: "label_key_" + strconv.Itoa(k), Value: fmt.Sprintf("value_%d_%x", k, (r>>(k*3))&0xffff)})
	}
	return append(tags, row.Tag{Name: "series_id", Value: strconv.Itoa(s)})
}

// BenchmarkFlushManySeries flushes a memtable of N Prometheus-shaped series
// (promTags, in a region of free-form labels, as the metrics table is) × 4
// rows of one float field to file:// and reports what the
// flush needs beyond the memtable: flush-peak-MiB, the largest heap seen
// during Flush (sampled every 5 ms, garbage included) less the heap before
// it, and flush-live-MiB, the largest live heap a GC measured then, less the
// same; memtable-MiB is the memtable's own accounting. N is 200,000, or
// STRATA_BENCH_SERIES. The heap the flush holds shows best with a low GOGC
// (say 20): at 100 the collector lets garbage grow with the memtable, and
// a flush may run without one.
func BenchmarkFlushManySeries(b *testing.B) {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("STRATA_BENCH_SERIES")); err == nil {
		n = v
	}
	const rows = 4
	ctx := context.Background()
	s := objstoretest.BenchBackends()[0].Open(b)
	r := open(b, s, Options{Logger: quiet, Labels: true, FlushBytes: 1 << 40, MaxMemtableBytes: 1 << 40})
	defer closeRegion(b, r, false)
	tags := make([][]row.Tag, n)
	for i := range tags {
		tags[i] = promTags(i)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var peak, live, mem float64
	b.ReportAllocs() // of the flushes alone: the writes run with the timer stopped
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		for k := range rows {
			const batch = 5000
			for lo := 0; lo < n; lo += batch {
				ps := make([]row.Point, 0, batch)
				for s := lo; s < min(lo+batch, n); s++ {
					ts := start + int64(i*rows+k)*int64(15*time.Second)
					ps = append(ps, row.Point{Tags: tags[s], TS: ts, Fields: []row.Field{{Name: "value", Value: row.FloatValue(float64(s%1000) * 1.25)}}})
				}
				mustWrite(b, r, ps...)
			}
		}
		mem = max(mem, float64(r.activeBytes())/(1<<20))
		runtime.GC()
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		metrics.Read(sample)
		base := float64(sample[0].Value.Uint64()) / (1 << 20)
		stop, peaks := watchHeap()
		b.StartTimer()
		if err := r.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		close(stop)
		pk := <-peaks
		peak, live = max(peak, float64(pk[0])/(1<<20)-base), max(live, float64(pk[1])/(1<<20)-base)
		b.StartTimer()
	}
	if got := len(r.Manifest().Files); got != b.N {
		b.Fatalf("%d files, want %d", got, b.N)
	}
	b.ReportMetric(mem, "memtable-MiB")
	b.ReportMetric(peak, "flush-peak-MiB")
	b.ReportMetric(live, "flush-live-MiB")
}

// watchHeap samples the heap every 5 ms until stop is closed, then sends the
// largest heap (objects, garbage included) and the largest live heap seen.
// (benchutil.WatchHeap only reports its peaks to a benchmark.)
func watchHeap() (stop chan struct{}, peaks chan [2]uint64) {
	stop, peaks = make(chan struct{}), make(chan [2]uint64, 1)
	go func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
		var pk [2]uint64
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			pk[0], pk[1] = max(pk[0], s[0].Value.Uint64()), max(pk[1], s[1].Value.Uint64())
			select {
			case <-stop:
				peaks <- pk
				return
			case <-t.C:
			}
		}
	}()
	return stop, peaks
}
