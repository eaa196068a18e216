package sst

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
)

// promKeys is n series keys shaped like a Prometheus remote-write load: n/10
// metric names of 10 series each, 18 labels (__name__, instance, job,
// label_key_0..14, series_id), about 420 bytes a key, sorted. Past
// __name__, every label of a series depends on the series, as in a load
// whose label values are drawn at random: keys of one metric share little
// more than the name.
func promKeys(tb testing.TB, n int) []string {
	keys := make([]string, 0, n)
	tags := make([]row.Tag, 18)
	var buf []byte
	for s := range n {
		metric, inst := s/10, s%10
		h := fnv.New64a()
		_, _ = fmt.Fprint(h, s) // a hash.Hash never fails a write
		r := h.Sum64()
		tags[0] = row.Tag{Name: "__name__", Value: fmt.Sprintf("metric_name_%06d", metric)}
		tags[1] = row.Tag{Name: "instance", Value: fmt.Sprintf("host-%04d:9100", (metric*7+inst)%5000)}
		tags[2] = row.Tag{Name: "job", Value: "node_exporter_" + strconv.Itoa(int(r%8))}
		for k := range 15 {
			tags[3+k] = row.Tag{Name: "label_key_" + strconv.Itoa(k), Value: fmt.Sprintf("value_%d_%x", k, (r>>(k*3))&0xffff)}
		}
		tags[17] = row.Tag{Name: "series_id", Value: strconv.Itoa(s)}
		var err error
		buf, err = row.EncodeSeries(buf[:0], tags)
		if err != nil {
			tb.Fatal(err)
		}
		keys = append(keys, string(buf))
	}
	slices.Sort(keys)
	return keys
}

// keysIter yields rows rows of each of keys, in stream order, with one
// float field whose Fields slice it reuses (as a flush's memtable
// iterator does with ReuseFields): the input costs only its keys.
type keysIter struct {
	keys   []string
	rows   int
	i, j   int // key, row of key; j == rows before the first Next
	e      row.Entry
	fields [1]row.Value
	seq    uint64
}

func newKeysIter(keys []string, rows int) *keysIter {
	return &keysIter{keys: keys, rows: rows, i: -1, j: rows}
}

func (it *keysIter) Next() bool {
	if it.j++; it.j >= it.rows {
		it.i, it.j = it.i+1, 0
	}
	if it.i >= len(it.keys) {
		return false
	}
	it.seq++
	it.fields[0] = row.FloatValue(float64(it.seq%1000) * 1.25)
	it.e = row.Entry{Series: it.keys[it.i], TS: int64(it.j) * 15e9, Seq: it.seq, Fields: it.fields[:]}
	return true
}

func (it *keysIter) Entry() *row.Entry { return &it.e }
func (it *keysIter) Err() error        { return nil }
func (it *keysIter) Close() error      { return nil }

// heapPeak samples the heap every few milliseconds until stopped: the
// largest heap (objects, live or not yet swept) and the largest live heap
// the GC measured. (benchutil.WatchHeap does the same, but benchutil
// imports this package.)
type heapPeak struct {
	stop chan struct{}
	wg   sync.WaitGroup
	objs uint64 // max /memory/classes/heap/objects:bytes
	live uint64 // max /gc/heap/live:bytes
	// profile, if not nil, gets a heap profile each time the live heap
	// reaches a new high: at the end, the profile of the largest.
	profile *bytes.Buffer
}

func startHeapPeak(profile *bytes.Buffer) *heapPeak {
	p := &heapPeak{stop: make(chan struct{}), profile: profile}
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	sample := func() {
		metrics.Read(samples)
		p.objs = max(p.objs, samples[0].Value.Uint64())
		if l := samples[1].Value.Uint64(); l > p.live {
			p.live = l
			if p.profile != nil {
				p.profile.Reset()
				if err := pprof.Lookup("heap").WriteTo(p.profile, 0); err != nil {
					panic(err)
				}
			}
		}
	}
	sample()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				sample()
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return p
}

func (p *heapPeak) end() (objs, live uint64) {
	close(p.stop)
	p.wg.Wait()
	return p.objs, p.live
}

// heapNow is the heap after a full collection: what the input holds.
func heapNow() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// BenchmarkWriteManySeries writes an SST the way a flush does
// (CompressFast, the series index, one float field without nulls) from
// series×4 rows of Prometheus-shaped keys (promKeys), into io.Discard, and
// reports the heap the write needs beyond its input: peak-MB, the largest
// heap seen (sampled every 2 ms, garbage not yet collected included) less
// the heap before the write, and live-MB, the largest live heap a GC
// measured during the write, less the same. The keys alone are key-MB.
// STRATA_BENCH_SERIES (comma-separated) replaces the default sizes;
// STRATA_BENCH_HEAPPROFILE names a file to write the heap profile of the
// largest live heap to (the last size's), which costs time;
// STRATA_BENCH_GROUP_KEY_KB sets WriteOptions.RowGroupKeyBytes.
func BenchmarkWriteManySeries(b *testing.B) {
	sizes := []int{200_000, 1_000_000}
	if s := os.Getenv("STRATA_BENCH_SERIES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatal(err)
			}
			sizes = append(sizes, n)
		}
	}
	fields := []schema.Field{{Name: "value", Kind: row.Float}}
	const rows = 4
	for _, n := range sizes {
		b.Run(fmt.Sprintf("series=%d", n), func(b *testing.B) {
			keys := promKeys(b, n)
			keyBytes := 0
			for _, k := range keys {
				keyBytes += len(k)
			}
			opts := WriteOptions{Compression: CompressFast, SeriesIndex: true, NoNulls: []bool{true}}
			if kb, err := strconv.Atoi(os.Getenv("STRATA_BENCH_GROUP_KEY_KB")); err == nil {
				opts.RowGroupKeyBytes = kb << 10
			}
			b.ReportAllocs()
			var peak, live, size, index uint64
			for b.Loop() {
				b.StopTimer()
				base := heapNow()
				var prof *bytes.Buffer
				if os.Getenv("STRATA_BENCH_HEAPPROFILE") != "" {
					prof = new(bytes.Buffer)
				}
				hp := startHeapPeak(prof)
				b.StartTimer()
				m, err := Write(io.Discard, fields, newKeysIter(keys, rows), opts)
				b.StopTimer()
				objs, l := hp.end()
				if err != nil {
					b.Fatal(err)
				}
				if m.Rows != int64(n*rows) || m.Series != n {
					b.Fatalf("meta %+v", m)
				}
				peak, live = max(peak, objs-min(objs, base)), max(live, l-min(l, base))
				size, index = uint64(m.Size), uint64(len(m.SeriesIndex))
				if prof != nil {
					if err := os.WriteFile(os.Getenv("STRATA_BENCH_HEAPPROFILE"), prof.Bytes(), 0o644); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(keyBytes)/(1<<20), "key-MB")
			b.ReportMetric(float64(peak)/(1<<20), "peak-MB")
			b.ReportMetric(float64(live)/(1<<20), "live-MB")
			b.ReportMetric(float64(size)/(1<<20), "file-MB")
			b.ReportMetric(float64(index)/(1<<20), "index-MB")
		})
	}
}

// TestRowGroupsCutAtKeyBytes: a row group ends before the first row of a
// series whose key would take its distinct keys past RowGroupKeyBytes (a
// group of one series excepted), and before RowGroupRows rows, whichever
// comes first; the file reads back whole, series index included.
func TestRowGroupsCutAtKeyBytes(t *testing.T) {
	keys := promKeys(t, 2000)                           // about 890 KB of keys
	keys = append(keys, strings.Repeat("\xff", 70<<10)) // one key past the limit
	const rows, limit = 3, 64 << 10
	fields := []schema.Field{{Name: "value", Kind: row.Float}}
	for _, groupRows := range []int64{0, 100} {
		var buf bytes.Buffer
		m, err := Write(&buf, fields, newKeysIter(keys, rows), WriteOptions{RowGroupRows: groupRows, RowGroupKeyBytes: limit, SeriesIndex: true, NoNulls: []bool{true}})
		if err != nil {
			t.Fatal(err)
		}
		r := openBytes(t, buf.Bytes())
		var want []row.Entry
		for it := newKeysIter(keys, rows); it.Next(); {
			e := *it.Entry()
			e.Fields = slices.Clone(e.Fields)
			want = append(want, e)
		}
		got := collect(t, r.Iter(Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: []string{"value"}}))
		equalEntries(t, got, want)
		x, err := DecodeSeriesIndex(m.SeriesIndex)
		if err != nil || !slices.Equal(x.Keys, keys) {
			t.Fatalf("series index: %d keys, %v", len(x.Keys), err)
		}
		// Each group's distinct keys, and where it starts.
		at := 0
		for g, rg := range r.file.Metadata().RowGroups {
			n := int(rg.NumRows)
			if n <= 0 || at+n > len(got) {
				t.Fatalf("group %d: %d rows at %d of %d", g, n, at, len(got))
			}
			distinct, bytes := 0, 0
			for i := at; i < at+n; i++ {
				if i == at || got[i].Series != got[i-1].Series {
					distinct++
					bytes += len(got[i].Series)
				}
			}
			if distinct > 1 && bytes > limit {
				t.Errorf("group %d: %d series of %d bytes, over %d", g, distinct, bytes, limit)
			}
			if groupRows > 0 && n > int(groupRows) {
				t.Errorf("group %d: %d rows, over %d", g, n, groupRows)
			}
			if groupRows == 0 && at > 0 && got[at].Series == got[at-1].Series {
				t.Errorf("group %d starts within series %q", g, got[at].Series[:20])
			}
			if next := at + n; groupRows == 0 && next < len(got) && bytes+len(got[next].Series) <= limit {
				t.Errorf("group %d ends at %d bytes of keys, with room for the next", g, bytes)
			}
			at += n
		}
		if at != len(got) || len(r.file.Metadata().RowGroups) < 2 {
			t.Fatalf("%d rows in %d groups", at, len(r.file.Metadata().RowGroups))
		}
	}
}
