package sst

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/tsbs"
)

func TestSeriesIndexOfWrittenFile(t *testing.T) {
	es := testEntries(t, 300)
	_, m := writeWith(t, es, WriteOptions{RowGroupRows: 128, SeriesIndex: true})
	got, err := DecodeSeriesIndex(m.SeriesIndex)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{series(t, "a"), series(t, "b")}
	if !slices.Equal(got.Keys, want) || m.Series != 2 || !slices.Equal(got.Rows, []int64{300, 301}) { // b has a tombstone
		t.Fatalf("series index %q %v (count %d), want %q [300 301]", got.Keys, got.Rows, m.Series, want)
	}
	if _, m := writeWith(t, es, WriteOptions{}); m.SeriesIndex != nil {
		t.Fatal("a series index was built without WriteOptions.SeriesIndex")
	}
}

func TestSeriesIndexRoundTripAndCorruption(t *testing.T) {
	var x SeriesIndex
	for i := range 5000 {
		x.Keys = append(x.Keys, series(t, fmt.Sprintf("host_%05d", i)))
		x.Rows = append(x.Rows, int64(1+i%300))
	}
	data, err := EncodeSeriesIndex(x)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSeriesIndex(data)
	if err != nil || !slices.Equal(got.Keys, x.Keys) || !slices.Equal(got.Rows, x.Rows) {
		t.Fatalf("round trip: %d keys, err %v", len(got.Keys), err)
	}
	raw := 0
	for _, k := range x.Keys {
		raw += len(k)
	}
	t.Logf("%d keys, %d bytes raw, %d encoded", len(x.Keys), raw, len(data))
	// TSBS cpu series (10 tags), 4,320 rows each (12 hours at 10 s).
	var tx SeriesIndex
	raw = 0
	for h := range 4000 {
		k, err := row.EncodeSeries(nil, tsbs.Tags(h))
		if err != nil {
			t.Fatal(err)
		}
		tx.Keys = append(tx.Keys, string(k))
		tx.Rows = append(tx.Rows, 4320)
		raw += len(k)
	}
	slices.Sort(tx.Keys)
	tsbsData, err := EncodeSeriesIndex(tx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("4000 TSBS cpu series: %d bytes raw, %d encoded", raw, len(tsbsData))
	if empty, err := EncodeSeriesIndex(SeriesIndex{}); err != nil {
		t.Fatal(err)
	} else if got, err := DecodeSeriesIndex(empty); err != nil || len(got.Keys) != 0 {
		t.Fatalf("empty index: %q, %v", got.Keys, err)
	}
	for name, bad := range map[string][]byte{
		"short":     data[:5],
		"magic":     append([]byte("XXXX"), data[4:]...),
		"format":    append(append([]byte("SSER"), 9), data[5:]...),
		"bit flip":  flip(data, len(data)-3),
		"truncated": data[:len(data)-4],
	} {
		if _, err := DecodeSeriesIndex(bad); !errors.Is(err, ErrCorruptSeries) {
			t.Errorf("%s: got %v, want ErrCorruptSeries", name, err)
		}
	}
}

// TestSeriesIndexStreamed: an index of many chunks (seriesChunk) is one
// frame that reads back whole, at both compressions, and the raw index
// never grows past a chunk and a key.
func TestSeriesIndexStreamed(t *testing.T) {
	keys := promKeys(t, 3000) // about 1.3 MiB front-coded: several chunks
	for _, c := range []Compression{CompressDefault, CompressFast} {
		s, err := newSeriesIndex(c)
		if err != nil {
			t.Fatal(err)
		}
		raw := 0
		for i, k := range keys {
			for range 1 + i%3 {
				s.add(k)
			}
			raw += len(k)
			if cap(s.raw) > seriesChunk+4096 {
				t.Fatalf("raw index grew to %d bytes", cap(s.raw))
			}
		}
		data, err := s.encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.close(); err != nil { // after encode: nothing to do
			t.Fatal(err)
		}
		x, err := DecodeSeriesIndex(data)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(x.Keys, keys) {
			t.Fatalf("compression %d: %d keys read back, want %d", c, len(x.Keys), len(keys))
		}
		for i, r := range x.Rows {
			if r != int64(1+i%3) {
				t.Fatalf("compression %d: key %d has %d rows, want %d", c, i, r, 1+i%3)
			}
		}
		t.Logf("compression %d: %d keys, %d bytes of keys, %d encoded", c, len(keys), raw, len(data))
	}
}

func flip(b []byte, i int) []byte {
	c := slices.Clone(b)
	c[i] ^= 0x10
	return c
}

// A scan given its series' rows (from the series index) reads the same
// entries as one that finds them in the series column, across row group
// boundaries, tombstones included, and skips the row groups without any.
func TestScanByRuns(t *testing.T) {
	es := testEntries(t, 300)
	data, m := writeWith(t, es, WriteOptions{RowGroupRows: 128, SeriesIndex: true})
	x, err := DecodeSeriesIndex(m.SeriesIndex)
	if err != nil {
		t.Fatal(err)
	}
	r := openBytes(t, data)
	for _, host := range []string{"a", "b"} {
		key := series(t, host)
		match := func(k string) bool { return k == key }
		var runs []Run
		var at int64
		for i, k := range x.Keys {
			if match(k) {
				runs = append(runs, Run{Key: k, Start: at, End: at + x.Rows[i]})
			}
			at += x.Rows[i]
		}
		for _, window := range [][2]int64{{-1 << 62, 1 << 62}, {500, 1500}} {
			f := Filter{Series: match, Start: window[0], End: window[1], Fields: names()}
			want := collect(t, r.Iter(f))
			f.Runs = runs
			it := r.Iter(f)
			got := collect(t, it)
			equalEntries(t, got, want)
			if len(want) == 0 {
				t.Fatalf("host %s %v: nothing read", host, window)
			}
			if pruned := it.(*iter).pruned; pruned == 0 {
				t.Fatalf("host %s %v: no row group skipped", host, window)
			}
		}
	}
}

// BenchmarkReadSeriesIndex reads the series index of a flush of a million
// Prometheus series (18 labels each), as a region does the first time a
// label question or a tag-filtered scan needs a file's postings: the time
// and the memory a read takes (the front-coded keys are about 300 MiB).
func BenchmarkReadSeriesIndex(b *testing.B) {
	keys := promKeys(b, 1_000_000)
	s, err := newSeriesIndex(CompressFast)
	if err != nil {
		b.Fatal(err)
	}
	raw := 0
	for _, k := range keys {
		s.add(k)
		raw += len(k)
	}
	data, err := s.encode()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		if err := ReadSeriesIndex(data, func(key []byte, rows int64) { n++ }); err != nil || n != len(keys) {
			b.Fatal(n, err)
		}
	}
	b.ReportMetric(float64(len(data))/(1<<20), "indexMiB")
	b.ReportMetric(float64(raw)/(1<<20), "keysMiB")
}
