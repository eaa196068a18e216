package region

import (
	"context"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stratadb/strata/internal/benchutil"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/tsbs"
)

func TestMain(m *testing.M) {
	code := m.Run()
	objstoretest.StopMinIO()
	os.Exit(code)
}

const tsbsHosts = 4000

var tsbsFieldNames = tsbs.Fields

func tsbsTags() [][]row.Tag {
	out := make([][]row.Tag, tsbsHosts)
	for h := range out {
		out[h] = tsbs.Tags(h)
	}
	return out
}

// tsbsBatch returns batch i: rows hosts [k, k+n) at the timestamp of round
// i*n/4000, 10 s apart, as TSBS generates them.
func tsbsBatch(tags [][]row.Tag, i, n int) []row.Point {
	ps := make([]row.Point, n)
	vals := make([]row.Field, n*len(tsbsFieldNames))
	for j := range ps {
		k := i*n + j
		fs := vals[j*len(tsbsFieldNames) : (j+1)*len(tsbsFieldNames)]
		for f, name := range tsbsFieldNames {
			fs[f] = row.Field{Name: name, Value: row.FloatValue(tsbs.Value(k, f))}
		}
		ps[j] = row.Point{Tags: tags[k%tsbsHosts], TS: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() + int64(k/tsbsHosts)*int64(10*time.Second), Fields: fs}
	}
	return ps
}

// BenchmarkWrite measures sustained ingest of TSBS-shaped batches of 500
// rows from 8 concurrent writers into one region, including the background
// flushes to Parquet the load causes. Each op is one batch.
func BenchmarkWrite(b *testing.B) {
	for _, bk := range objstoretest.BenchBackends() {
		b.Run(bk.Name, func(b *testing.B) {
			const batchRows, writers = 500, 8
			ctx := context.Background()
			s := bk.Open(b)
			m := NewMetrics(nil)
			r := open(b, s, Options{Logger: quiet, Metrics: m})
			defer closeRegion(b, r, false)
			tags := tsbsTags()
			mustWrite(b, r, tsbsBatch(tags, 0, batchRows)...) // schema
			runtime.GC()
			heap := benchutil.WatchHeap()
			var next atomic.Int64
			b.SetParallelism(max(1, writers/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(next.Add(1))
					if _, err := r.Write(ctx, tsbsBatch(tags, i, batchRows)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			heap.Report(b)
			b.ReportMetric(float64(b.N*batchRows)/b.Elapsed().Seconds(), "rows/s")
			st := r.stream.Stats()
			b.ReportMetric(float64(st.Entries)/float64(max(1, st.Segments)), "rows/segment")
			b.ReportMetric(testutil.ToFloat64(m.StallSeconds)/b.Elapsed().Seconds(), "stalled-fraction")
		})
	}
}

// loadRegion writes rounds × 4000 TSBS rows and flushes them into SSTs.
func loadRegion(b *testing.B, s objstore.Bucket, rounds int) *Region {
	b.Helper()
	r := open(b, s, Options{Logger: quiet, FlushBytes: 1 << 40})
	tags := tsbsTags()
	const batchRows = 4000
	for i := range rounds {
		mustWrite(b, r, tsbsBatch(tags, i, batchRows)...)
		if (i+1)%(rounds/4) == 0 { // four SSTs of overlapping series
			if err := r.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := r.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkScan measures a full scan of 1M rows (4000 series × 250
// timestamps × 10 fields) from four SSTs, k-way merged; and a scan of one
// host over 1/10 of the time range, which prunes by row group statistics.
func BenchmarkScan(b *testing.B) {
	for _, bk := range objstoretest.BenchBackends() {
		b.Run(bk.Name, func(b *testing.B) {
			s := bk.Open(b)
			const rounds = 250
			r := loadRegion(b, s, rounds)
			defer closeRegion(b, r, false)
			b.Run("all", func(b *testing.B) {
				runtime.GC()
				heap := benchutil.WatchHeap()
				var rows int
				for b.Loop() {
					rows = countScan(b, r, scan.Request{Start: AllTime, End: AllTimeEnd})
				}
				heap.Report(b)
				if rows != rounds*tsbsHosts {
					b.Fatalf("scanned %d rows", rows)
				}
				b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			})
			b.Run("host-window", func(b *testing.B) {
				start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
				req := scan.Request{Start: start + 100*int64(10*time.Second), End: start + 125*int64(10*time.Second),
					Tags: []row.Tag{{Name: "hostname", Value: "host_77"}}}
				var rows int
				for b.Loop() {
					rows = countScan(b, r, req)
				}
				if rows != 25 {
					b.Fatalf("scanned %d rows", rows)
				}
			})
		})
	}
}

func countScan(b *testing.B, r *Region, req scan.Request) int {
	sc, err := r.Scan(context.Background(), req)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for sc.Next() {
		n += len(sc.Batch())
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	sc.Close()
	return n
}

// BenchmarkFlush measures flushing a memtable of 200k TSBS rows to one
// Parquet SST and committing it. MB/s is of the SST written.
// STRATA_BENCH_PAGE_KB sets the page size (default sst.DefaultPageBytes).
func BenchmarkFlush(b *testing.B) {
	benchutil.SetPageBytes(b)
	for _, bk := range objstoretest.BenchBackends() {
		b.Run(bk.Name, func(b *testing.B) {
			ctx := context.Background()
			s := bk.Open(b)
			r := open(b, s, Options{Logger: quiet, FlushBytes: 1 << 40, MaxMemtableBytes: 1 << 40})
			defer closeRegion(b, r, false)
			tags := tsbsTags()
			const rows = 200_000
			var sstBytes, memBytes int64
			heap := benchutil.WatchHeap()
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				for j := range rows / 4000 {
					mustWrite(b, r, tsbsBatch(tags, i*rows/4000+j, 4000)...)
				}
				memBytes += r.activeBytes()
				before := totalSize(r)
				b.StartTimer()
				if err := r.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				sstBytes += totalSize(r) - before
			}
			heap.Report(b)
			b.ReportMetric(float64(sstBytes)/(1<<20)/b.Elapsed().Seconds(), "sst-MB/s")
			b.ReportMetric(float64(memBytes)/(1<<20)/b.Elapsed().Seconds(), "memtable-MB/s")
			b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(sstBytes)/float64(b.N*rows), "sst-bytes/row")
		})
	}
}

func totalSize(r *Region) int64 {
	var n int64
	for _, f := range r.Manifest().Files {
		n += f.Size
	}
	return n
}
