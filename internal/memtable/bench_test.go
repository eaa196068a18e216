package memtable

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/tsbs"
)

// BenchmarkInsertDecimals inserts TSBS-shaped puts (4,000 series, 10
// float fields of one or two decimals) in batches of 10,000 and then asks
// for the fields' decimal scales, as a flush does: what a memtable costs a
// write and its flush. Reports ns per row.
func BenchmarkInsertDecimals(b *testing.B) {
	const hosts, rows = 4000, 200_000
	keys := make([]string, hosts)
	for h := range keys {
		keys[h] = fmt.Sprintf("cpu,hostname=host_%d", h)
	}
	batches := make([][]row.Entry, 0, rows/10_000)
	for k := 0; k < rows; k += 10_000 {
		batch := make([]row.Entry, 10_000)
		for i := range batch {
			n := k + i
			fs := make([]row.Value, 10)
			for f := range fs {
				fs[f] = row.FloatValue(float64((n*7+f*13)%10000) / 100)
			}
			batch[i] = row.Entry{Series: keys[n%hosts], TS: int64(n / hosts), Seq: uint64(n + 1), Op: row.Put, Fields: fs}
		}
		batches = append(batches, batch)
	}
	for b.Loop() {
		m := New()
		for i, batch := range batches {
			m.Insert(uint64(i), batch)
		}
		if d := m.Decimals(10); d[0] != 2 {
			b.Fatalf("scales %v", d)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
}

// promShape is a Prometheus-shaped load, as internal/rwload sends it:
// names metric names × 10 targets, each series with 18 labels (__name__,
// instance, job, label_key_0..14, series_id), one float field, one sample
// a series a scrape. STRATA_MEMBENCH_NAMES and STRATA_MEMBENCH_SCRAPES
// override the size (default 100,000 names: a million series, and 10
// scrapes).
type promShape struct {
	names, targets, scrapes int
	tags                    [][]row.Tag // each target's tags, __name__ first (to be set)
}

func newPromShape(b *testing.B) *promShape {
	p := &promShape{names: envInt(b, "STRATA_MEMBENCH_NAMES", 100_000), targets: 10, scrapes: envInt(b, "STRATA_MEMBENCH_SCRAPES", 10)}
	cards := []int{2, 3, 5, 10, 20, 50, 100, 1000}
	for j := range p.targets {
		tags := []row.Tag{{Name: "__name__"}, {Name: "instance", Value: fmt.Sprintf("10.0.%d.%d:9100", j>>8&255, j&255)}, {Name: "job", Value: "avalanche"}}
		for k := range 15 {
			v := (j*7919 + k*104729) % cards[k%len(cards)]
			tags = append(tags, row.Tag{Name: fmt.Sprint("label_key_", k), Value: fmt.Sprint("value_", v)})
		}
		tags = append(tags, row.Tag{Name: "series_id", Value: fmt.Sprint(j)})
		p.tags = append(p.tags, tags)
	}
	return p
}

func envInt(b *testing.B, name string, def int) int {
	if s := os.Getenv(name); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q", name, s)
		}
		return n
	}
	return def
}

func (p *promShape) series() int { return p.names * p.targets }

func (p *promShape) metric(i int) string { return fmt.Sprintf("avalanche_metric_mmmmm_%05d", i) }

// load inserts scrapes [from, to) the way a region's write does
// (ShareKeys, then Insert) in batches of 10,000 samples, and returns the
// time the memtable took, and the process's CPU time meanwhile (less
// swayed by a busy machine; the collector's included).
func (p *promShape) load(m *Memtable, from, to int, seq *uint64) (took, cpu time.Duration) {
	const batch = 10_000
	kbuf := make([]byte, 0, batch*512)
	keys := make([][]byte, 0, batch)
	entries := make([]row.Entry, 0, batch)
	fields := make([]row.Value, batch)
	tags := make([]row.Tag, 0, 18)
	for s := from; s < to; s++ {
		for lo := 0; lo < p.series(); lo += batch {
			kbuf, keys, entries = kbuf[:0], keys[:0], entries[:0]
			for n := lo; n < min(lo+batch, p.series()); n++ {
				name, target := n/p.targets, n%p.targets
				tags = append(tags[:0], p.tags[target]...)
				tags[0].Value = p.metric(name)
				start := len(kbuf)
				kbuf, _ = row.EncodeSeries(kbuf, tags)
				keys = append(keys, kbuf[start:len(kbuf):len(kbuf)])
				*seq++
				i := len(entries)
				fields[i] = row.FloatValue(float64(n%1000) + float64(s)/4)
				entries = append(entries, row.Entry{TS: int64(s) * 15_000, Seq: *seq, Op: row.Put, Fields: fields[i : i+1 : i+1]})
			}
			t0, c0 := time.Now(), cpuTime()
			ShareKeys(entries, keys)
			m.Insert(uint64(s), entries)
			took += time.Since(t0)
			cpu += cpuTime() - c0
		}
	}
	return took, cpu
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// BenchmarkPromInsert loads the Prometheus shape into a memtable and
// reports the time a sample takes (ShareKeys and Insert, the write path's
// share), the live heap a series and a sample take (measured after one
// scrape and after all of them, after a GC), and what Stats says they
// take: the figures the flush policy works with. It does so for a new
// memtable (heap…, stat…) and, in total, for its successor (succHeapMB,
// succStatMB), which a region's memtables mostly are: a successor
// allocates a series' rows at once (Successor), so its heap a sample
// shows in the total, not from one scrape to the next.
func BenchmarkPromInsert(b *testing.B) {
	p := newPromShape(b)
	for b.Loop() {
		var seq uint64
		m := New()
		took, cpu := p.measure(b, m, "heap", "stat", true, &seq)
		m.Freeze()
		n := m.Successor()
		m = nil
		p.measure(b, n, "succHeap", "succStat", false, &seq)
		b.ReportMetric(float64(took.Nanoseconds())/float64(p.series()*p.scrapes), "ns/insert")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(p.series()*p.scrapes), "cpu-ns/insert")
		runtime.KeepAlive(n)
	}
}

// measure loads m and reports its heap and Stats bytes in total and, if
// split, a series and a sample, the metrics' names prefixed by heap and
// stat.
func (p *promShape) measure(b *testing.B, m *Memtable, heap, stat string, split bool, seq *uint64) (took, cpu time.Duration) {
	base := liveHeap()
	took, cpu = p.load(m, 0, 1, seq)
	heap1, st1 := liveHeap()-base, m.Stats()
	t, c := p.load(m, 1, p.scrapes, seq)
	took, cpu = took+t, cpu+c
	heapN, stN := liveHeap()-base, m.Stats()
	series, more := float64(p.series()), float64(p.series()*(p.scrapes-1))
	perSample := float64(heapN-heap1) / more
	statSample := float64(stN.Bytes-st1.Bytes) / more
	if split {
		b.ReportMetric(float64(heap1)/series-perSample, heap+"B/series")
		b.ReportMetric(perSample, heap+"B/sample")
		b.ReportMetric(float64(st1.Bytes)/series-statSample, stat+"B/series")
		b.ReportMetric(statSample, stat+"B/sample")
	}
	b.ReportMetric(float64(heapN)/1e6, heap+"MB")
	b.ReportMetric(float64(stN.Bytes)/1e6, stat+"MB")
	return took, cpu
}

// BenchmarkPromSelect times an iteration of one metric name's series (a
// selector on __name__, as a query's) in the loaded memtable, and
// BenchmarkPromFlushIter a full iteration in key order of the frozen
// memtable, as a flush reads it.
func BenchmarkPromSelect(b *testing.B) {
	p := newPromShape(b)
	m := New()
	var seq uint64
	p.load(m, 0, p.scrapes, &seq)
	n, c0 := 0, cpuTime()
	for b.Loop() {
		name := p.metric(n * 7919 % p.names)
		n++
		f := Filter{Tags: []row.Tag{{Name: "__name__", Value: name}}, Start: math.MinInt64, End: math.MaxInt64,
			Series: func(k string) bool { return row.SeriesTag(k, "__name__") == name }}
		it := m.Iter(f)
		got := 0
		for it.Next() {
			got++
		}
		it.Close()
		if got != p.targets*p.scrapes {
			b.Fatalf("%s: %d entries", name, got)
		}
	}
	b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(n), "cpu-ns/op")
}

func BenchmarkPromFlushIter(b *testing.B) {
	p := newPromShape(b)
	m := New()
	var seq uint64
	p.load(m, 0, p.scrapes, &seq)
	m.Freeze()
	c0, n := cpuTime(), 0
	for b.Loop() {
		n++
		it := m.Iter(Filter{Start: math.MinInt64, End: math.MaxInt64, ReuseFields: true})
		got, last := 0, ""
		for it.Next() {
			e := it.Entry()
			if e.Series != last {
				if e.Series < last {
					b.Fatal("keys out of order")
				}
				last = e.Series
			}
			got++
		}
		it.Close()
		if got != p.series()*p.scrapes {
			b.Fatalf("%d entries", got)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*got), "ns/entry")
		b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(n*got), "cpu-ns/entry")
	}
}

// BenchmarkInsertTSBS inserts TSBS cpu-only rows as a region's write gives
// them: keys encoded (row.EncodeSeries), each request's 10,000 rows over
// hosts hosts with the rows of a series sharing one string
// (ShareKeys), fresh strings for each request. Reports ns per row.
func BenchmarkInsertTSBS(b *testing.B) {
	for _, hosts := range []int{400, 4000} {
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			const rows, batch = 200_000, 10_000
			tags := make([][]row.Tag, hosts)
			for h := range tags {
				tags[h] = tsbs.Tags(h)
			}
			var batches [][]row.Entry
			for k := 0; k < rows; k += batch {
				entries := make([]row.Entry, batch)
				keys := make([][]byte, batch)
				enc := make([][]byte, hosts) // this request's key of each host
				for i := range entries {
					p := tsbs.Point(tags, k+i, 0)
					h := (k + i) % hosts
					if enc[h] == nil {
						var err error
						if enc[h], err = row.EncodeSeries(nil, p.Tags); err != nil {
							b.Fatal(err)
						}
					}
					keys[i] = enc[h]
					fs := make([]row.Value, len(p.Fields))
					for j, f := range p.Fields {
						fs[j] = f.Value
					}
					entries[i] = row.Entry{TS: p.TS, Seq: uint64(k + i + 1), Op: row.Put, Fields: fs}
				}
				ShareKeys(entries, keys)
				batches = append(batches, entries)
			}
			for b.Loop() {
				m := New()
				for i, e := range batches {
					m.Insert(uint64(i), e)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
		})
	}
}
