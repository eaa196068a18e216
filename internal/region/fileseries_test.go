package region

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/sst"
	"github.com/stratadb/strata/internal/testseed"
)

// A file's series kept as symbols rebuild every key byte for byte: keys
// row.EncodeSeries wrote, keys that do not decode, and keys that decode
// but not canonically (a tag with an empty value, an overlong length);
// the postings list a key's tags (of one that does not decode, those
// before the fault); and the index survives its object's encoding.
func TestFileSeriesRebuildsEveryKey(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	var x sst.SeriesIndex
	for i := range 2000 {
		tags := []row.Tag{{Name: "__name__", Value: fmt.Sprint("metric_", rng.IntN(50))}, {Name: "job", Value: "node"}, {Name: "id", Value: fmt.Sprint(i)}}
		if rng.IntN(4) == 0 {
			tags = append(tags, row.Tag{Name: "zone", Value: fmt.Sprint("z", rng.IntN(3))})
		}
		k, err := row.EncodeSeries(nil, tags)
		if err != nil {
			t.Fatal(err)
		}
		x.Keys = append(x.Keys, string(k))
	}
	x.Keys = append(x.Keys,
		"\x03job\x04node\x7f",            // a tag, then a length past the end
		"\x03job\x00",                    // an empty value: decodes, EncodeSeries never writes it
		"\x83\x00job\x04node",            // an overlong length: decodes, re-encodes shorter
		"",                               // no tag at all
		string([]byte{0xff, 0xff, 0xff}), // nothing decodes
	)
	slices.Sort(x.Keys)
	x.Keys = slices.Compact(x.Keys)
	for range x.Keys {
		x.Rows = append(x.Rows, 1+rng.Int64N(5))
	}
	data, err := sst.EncodeSeriesIndex(x)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := decodeFileSeries("f", data)
	if err != nil {
		t.Fatal(err)
	}
	var keys keyArena
	var got []string
	var asStrings int64 // the keys as strings, and postings by string (as kept before)
	for i := range fs.n {
		got = append(got, keys.key(fs, i))
		asStrings += 2*int64(len(x.Keys[i])) + 48
	}
	for i, k := range got { // after every key is built: none was overwritten
		if k != x.Keys[i] {
			t.Fatalf("key %d rebuilt as %q, want %q", i, k, x.Keys[i])
		}
		if fs.starts[i+1]-fs.starts[i] != x.Rows[i] {
			t.Fatalf("key %d: rows %d, want %d", i, fs.starts[i+1]-fs.starts[i], x.Rows[i])
		}
	}
	if fs.size.Load() >= asStrings {
		t.Errorf("%d series take %d bytes as symbols, %d as strings", fs.n, fs.size.Load(), asStrings)
	}

	// Postings against SeriesTag over every key.
	for _, f := range []row.Tag{{Name: "job", Value: "node"}, {Name: "__name__", Value: "metric_7"}, {Name: "zone", Value: "z1"}, {Name: "nope", Value: "x"}} {
		var want []string
		for _, k := range x.Keys {
			if row.SeriesTag(k, f.Name) == f.Value {
				want = append(want, k)
			}
		}
		var have []string
		fs.each([]row.Tag{f}, nil, func(i int) {
			if k := keys.key(fs, i); row.SeriesTag(k, f.Name) == f.Value {
				have = append(have, k)
			}
		})
		if !slices.Equal(have, want) {
			t.Fatalf("%v: %d series through the postings, %d through every key", f, len(have), len(want))
		}
	}

	// The same series from the keys themselves (a file without an index).
	same := newFileSeries("f", x)
	for i := range same.n {
		if k := keys.key(same, i); k != x.Keys[i] {
			t.Fatalf("key %d from strings rebuilt as %q", i, k)
		}
	}
}

// BenchmarkFileSeries decodes the series index of a file of 100,000 series
// shaped like Prometheus remote write (18 labels: a metric name of ten
// series, a target, and label_key_k labels of 1 to 1,000 values) and looks
// up a metric name, and reports the heap it keeps a series (and what it
// counts) against the key's own bytes.
func BenchmarkFileSeries(b *testing.B) {
	const n = 100_000
	var x sst.SeriesIndex
	cards := []int{1, 2, 3, 5, 10, 20, 50, 100, 1000, 2, 3, 5, 10, 20, 50}
	keyBytes := 0
	for i := range n {
		tags := []row.Tag{{Name: "__name__", Value: fmt.Sprintf("avalanche_metric_mmmmm_%d", i/10)}, {Name: "instance", Value: "host-1:9100"}, {Name: "job", Value: "avalanche"}, {Name: "series_id", Value: fmt.Sprint(i % 10)}}
		for k, c := range cards {
			tags = append(tags, row.Tag{Name: fmt.Sprint("label_key_", k), Value: fmt.Sprint("value_", (i*7919+k*104729)%c)})
		}
		k, _ := row.EncodeSeries(nil, tags)
		x.Keys = append(x.Keys, string(k))
		x.Rows = append(x.Rows, 10)
		keyBytes += len(k)
	}
	slices.Sort(x.Keys)
	data, err := sst.EncodeSeriesIndex(x)
	if err != nil {
		b.Fatal(err)
	}
	x = sst.SeriesIndex{}
	b.ResetTimer()
	var kept, size int64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		fs, err := decodeFileSeries("f", data)
		if err != nil {
			b.Fatal(err)
		}
		fs.lookup("__name__", "x") // the postings a query by name builds
		runtime.GC()
		runtime.ReadMemStats(&after)
		kept, size = int64(after.HeapAlloc)-int64(before.HeapAlloc), fs.size.Load()
		runtime.KeepAlive(fs)
	}
	b.ReportMetric(float64(kept)/n, "heap-B/series")
	b.ReportMetric(float64(size)/n, "counted-B/series")
	b.ReportMetric(float64(keyBytes)/n, "key-B/series")
}

// A file's postings, built on first use, are counted in its region's cache
// and can push the oldest file out; a file that has left the cache is not
// counted again.
func TestFileSeriesPostingsCountInTheCache(t *testing.T) {
	var x sst.SeriesIndex
	for i := range 1000 {
		k, _ := row.EncodeSeries(nil, []row.Tag{{Name: "__name__", Value: fmt.Sprintf("m%04d", i)}, {Name: "job", Value: "j"}})
		x.Keys = append(x.Keys, string(k))
		x.Rows = append(x.Rows, 1)
	}
	var gauge int64
	a, b := newFileSeries("a", x), newFileSeries("b", x)
	c := &seriesCache{gauge: func(d int64) { gauge += d }}
	c.limit = a.size.Load() + b.size.Load() + 1000
	c.put("a", a)
	c.put("b", b)
	before := c.bytes
	if before != gauge || before != a.size.Load()+b.size.Load() {
		t.Fatalf("cache counts %d (gauge %d) for files of %d and %d", before, gauge, a.size.Load(), b.size.Load())
	}
	if got := b.lookup("__name__", "m0007"); len(got) != 1 || got[0] != 7 {
		t.Fatalf("m0007: %v", got)
	}
	if _, ok := c.get("a"); ok {
		t.Fatalf("b's postings (%d bytes) did not push a out of a cache of %d", b.size.Load()-(before-a.size.Load()), c.limit)
	}
	if c.bytes != b.size.Load() || gauge != c.bytes {
		t.Fatalf("cache counts %d (gauge %d), b is %d", c.bytes, gauge, b.size.Load())
	}
	a.lookup("__name__", "m0001") // a has left: its growth is its own
	if c.bytes != b.size.Load() || gauge != c.bytes {
		t.Fatalf("a's postings counted after it left: %d", c.bytes)
	}
}

func TestMergeSorted(t *testing.T) {
	runs := [][]string{{"b", "d", "f"}, nil, {"a", "b", "c"}, {"f", "g"}, {"d"}}
	before := slices.Clone(runs)
	got := MergeSorted(runs)
	if want := []string{"a", "b", "c", "d", "f", "g"}; !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
	if !sameRuns(runs, before) {
		t.Fatalf("the runs were changed: %v, were %v", runs, before)
	}
	if got := MergeSorted(nil); len(got) != 0 {
		t.Fatalf("%v from no runs", got)
	}
}

// MergeSorted gives the sorted set of everything its runs hold, for
// runs that mostly hold the same values, as a region's files do.
func TestMergeSortedMatchesSortingEverything(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seed(t), 0))
	for range 200 {
		var runs [][]string
		var all []string
		for range rng.IntN(6) {
			var run []string
			for v := range 40 {
				if rng.IntN(4) > 0 {
					run = append(run, fmt.Sprintf("v%03d", v*(1+rng.IntN(2))))
				}
			}
			run = slices.Compact(slices.Sorted(slices.Values(run)))
			runs = append(runs, run)
			all = append(all, run...)
		}
		want := slices.Compact(slices.Sorted(slices.Values(all)))
		if got := MergeSorted(runs); !slices.Equal(got, want) {
			t.Fatalf("%v, want %v", got, want)
		}
	}
	// A long run and a few values, some it holds (a memtable's new names
	// among a region's): merged into it, in either order.
	for range 200 {
		var long, few []string
		for v := range 1000 {
			switch rng.IntN(100) {
			case 0:
				few = append(few, fmt.Sprintf("v%04d", v))
			case 1:
				few = append(few, fmt.Sprintf("v%04d", v))
				long = append(long, fmt.Sprintf("v%04d", v))
			default:
				long = append(long, fmt.Sprintf("v%04d", v))
			}
		}
		want := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(long), few...))))
		for _, runs := range [][][]string{{long, few}, {few, long}} {
			if got := MergeSorted(runs); !slices.Equal(got, want) {
				t.Fatalf("%d and %d values: %d merged, want %d", len(runs[0]), len(runs[1]), len(got), len(want))
			}
		}
	}
}

// BenchmarkMergeSorted: /api/v1/label/__name__/values over a region of 12
// files and a memtable, each naming the same 100,000 metrics (each its
// own copy, as files' are), and (differ) the same with the last file
// holding a name the others lack; and (one-new) the files' answer and a
// memtable's one new name.
func BenchmarkMergeSorted(b *testing.B) {
	names := make([]string, 100_000)
	for i := range names {
		names[i] = fmt.Sprintf("avalanche_metric_mmmmm_%05d", i)
	}
	runs := make([][]string, 13)
	for i := range runs {
		runs[i] = make([]string, len(names))
		for j, n := range names {
			runs[i][j] = strings.Clone(n)
		}
	}
	for _, differ := range []bool{false, true} {
		if differ {
			runs[12] = append(runs[12], "zz_new_metric")
		}
		b.Run(fmt.Sprintf("differ=%v", differ), func(b *testing.B) {
			for b.Loop() {
				if got := MergeSorted(runs); len(got) < len(names) {
					b.Fatal(len(got))
				}
			}
		})
	}
	// The files' merged answer and the memtable's new name (what a
	// listing merges after a series of a new metric came).
	b.Run("one-new", func(b *testing.B) {
		two := [][]string{runs[0], {"avalanche_metric_mmmmm_50000_new"}}
		for b.Loop() {
			if got := MergeSorted(two); len(got) != len(names)+1 {
				b.Fatal(len(got))
			}
		}
	})
}

// newFileSeries keeps the series of x (with row counts if it has one for
// each key), as a region keeps a decoded series index.
func newFileSeries(id string, x sst.SeriesIndex) *fileSeries {
	b := newFileSeriesBuilder(id, len(x.Rows) == len(x.Keys))
	for i, k := range x.Keys {
		var rows int64
		if len(x.Rows) == len(x.Keys) {
			rows = x.Rows[i]
		}
		b.add(unsafe.Slice(unsafe.StringData(k), len(k)), rows)
	}
	return b.done()
}
