package compact

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
// -benchtime 1x: one op is one whole compaction. STRATA_BENCH_PAGE_KB
// sets the page size (default sst.DefaultPageBytes).
func BenchmarkCompaction(b *testing.B) {
	mb := 128
	if v := os.Getenv("STRATA_BENCH_COMPACT_MB"); v != "" {
		mb, _ = strconv.Atoi(v)
	}
	benchutil.SetPageBytes(b)
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
						pts := make([]row.Point, hosts)
						for h := range pts {
							fs := make([]row.Field, len(tsbs.Fields))
							for i, n := range tsbs.Fields {
								fs[i] = row.Field{Name: n, Value: row.FloatValue(tsbs.Value(k, i))}
							}
							pts[h] = row.Point{Tags: tags[h], TS: int64(f)*span + int64(done/hosts)*tsbs.Interval, Fields: fs}
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
				u0, t0 := cpuStat()
				m0, s0 := procCPU("minio"), selfCPU()
				began := time.Now()
				var stages []string
				res, err := NewJob(r, in, Options{OnStage: func(_ context.Context, s Stage) {
					stages = append(stages, fmt.Sprintf("%s at %v", s, time.Since(began).Round(time.Millisecond)))
				}}).Run(ctx)
				u1, t1 := cpuStat()
				m1, s1 := procCPU("minio"), selfCPU()
				b.Logf("%s; done at %v", strings.Join(stages, ", "), time.Since(began).Round(time.Millisecond))
				// Where the CPU went: all cores (busy-%), this process, and a
				// MinIO server on the same machine.
				b.ReportMetric(100*float64(u1-u0)/float64(t1-t0), "machine-busy-%")
				b.ReportMetric((s1 - s0).Seconds(), "cpu-s")
				b.ReportMetric(float64(m1-m0)/100, "minio-cpu-s")
				b.StopTimer()
				stopProfile()
				if err != nil {
					b.Fatal(err)
				}
				heap.Report(b)
				b.ReportMetric(float64(res.BytesIn)/(1<<20), "input-MiB")
				b.ReportMetric(float64(len(res.Outputs)), "outputs")
				b.ReportMetric(float64(res.BytesOut)/(1<<20), "output-MiB")
				if err := r.Close(ctx, region.CloseOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			b.ReportMetric(float64(bytesIn)*float64(b.N)/(1<<20)/b.Elapsed().Seconds(), "input-MB/s")
		})
	}
}

func cpuStat() (busy, total int64) {
	data, _ := os.ReadFile("/proc/stat")
	f := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])[1:]
	for i, v := range f {
		n, _ := strconv.ParseInt(v, 10, 64)
		total += n
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return
}

func procCPU(name string) (ticks int64) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		st := string(data)
		i := strings.Index(st, "(")
		j := strings.LastIndex(st, ")")
		if i < 0 || j < 0 || st[i+1:j] != name {
			continue
		}
		f := strings.Fields(st[j+2:])
		u, _ := strconv.ParseInt(f[11], 10, 64)
		k, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + k
	}
	return
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru) // failing that, 0
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
