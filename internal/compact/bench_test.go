package compact

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/stratadb/strata/internal/benchutil"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/tsbs"
)

func TestMain(m *testing.M) {
	code := m.Run()
	objstoretest.StopMinIO()
	os.Exit(code)
}

// BenchmarkCompaction compacts TSBS-shaped SSTs (4000 hosts, 10 fields)
// totalling STRATA_BENCH_COMPACT_MB of input (default 128) in 8 files into
// one job's outputs, and reports MB/s of input and the peak heap. Run with
// -benchtime 1x: one op is one whole compaction.
func BenchmarkCompaction(b *testing.B) {
	mb := 128
	if v := os.Getenv("STRATA_BENCH_COMPACT_MB"); v != "" {
		mb, _ = strconv.Atoi(v)
	}
	for _, bk := range objstoretest.BenchBackends() {
		b.Run(bk.Name, func(b *testing.B) {
			ctx := context.Background()
			var bytesIn int64
			b.StopTimer()
			for range b.N {
				s := bk.Open(b)
				r, err := region.Open(ctx, s, rid, region.Options{Create: true, Logger: quiet, FlushBytes: 1 << 40, MaxMemtableBytes: 1 << 40})
				if err != nil {
					b.Fatal(err)
				}
				const hosts = 4000
				tags := make([][]row.Tag, hosts)
				for h := range tags {
					tags[h] = tsbs.Tags(h)
				}
				// ~49 bytes per row in SSTs: rows for mb MiB over 8 files,
				// each file the next stretch of time, so no row is
				// overwritten and every input row is an output row.
				rowsPerFile := mb << 20 / 49 / 8
				span := int64((rowsPerFile+hosts-1)/hosts) * tsbs.Interval
				k := 0
				for f := range 8 {
					for done := 0; done < rowsPerFile; done += hosts {
						pts := make([]region.Point, hosts)
						for h := range pts {
							fs := make([]region.Field, len(tsbs.Fields))
							for i, n := range tsbs.Fields {
								fs[i] = region.Field{Name: n, Value: row.FloatValue(tsbs.Value(k, i))}
							}
							pts[h] = region.Point{Tags: tags[h], TS: int64(f)*span + int64(done/hosts)*tsbs.Interval, Fields: fs}
							k++
						}
						if _, err := r.Write(ctx, pts); err != nil {
							b.Fatal(err)
						}
					}
					if err := r.Flush(ctx); err != nil {
						b.Fatal(err)
					}
				}
				in := SortedFiles(r.Manifest().Files)
				bytesIn = 0
				for _, f := range in {
					bytesIn += f.Size
				}
				runtime.GC() // forget the load phase's memtables
				heap := benchutil.WatchHeap()
				stopProfile := benchutil.StartProfile(b)
				b.StartTimer()
				res, err := NewJob(r, in, Options{}).Run(ctx)
				b.StopTimer()
				stopProfile()
				if err != nil {
					b.Fatal(err)
				}
				heap.Report(b)
				b.ReportMetric(float64(res.BytesIn)/(1<<20), "input-MiB")
				b.ReportMetric(float64(len(res.Outputs)), "outputs")
				b.ReportMetric(float64(res.BytesOut)/(1<<20), "output-MiB")
				r.Close(ctx, region.CloseOptions{})
			}
			b.StartTimer()
			b.ReportMetric(float64(bytesIn)*float64(b.N)/(1<<20)/b.Elapsed().Seconds(), "input-MB/s")
		})
	}
}
