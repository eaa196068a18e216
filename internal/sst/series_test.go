package sst

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

func TestSeriesIndexOfWrittenFile(t *testing.T) {
	es := testEntries(t, 300)
	_, m := writeWith(t, es, WriteOptions{RowGroupRows: 128, SeriesIndex: true})
	got, err := DecodeSeriesIndex(m.SeriesIndex)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{series(t, "a"), series(t, "b")}
	if !slices.Equal(got, want) || m.Series != 2 {
		t.Fatalf("series index %q (count %d), want %q", got, m.Series, want)
	}
	if _, m := writeWith(t, es, WriteOptions{}); m.SeriesIndex != nil {
		t.Fatal("a series index was built without WriteOptions.SeriesIndex")
	}
}

func TestSeriesIndexRoundTripAndCorruption(t *testing.T) {
	var keys []string
	for i := range 5000 {
		keys = append(keys, series(t, fmt.Sprintf("host_%05d", i)))
	}
	data, err := EncodeSeriesIndex(keys)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSeriesIndex(data)
	if err != nil || !slices.Equal(got, keys) {
		t.Fatalf("round trip: %d keys, err %v", len(got), err)
	}
	raw := 0
	for _, k := range keys {
		raw += len(k)
	}
	t.Logf("%d keys, %d bytes raw, %d encoded", len(keys), raw, len(data))
	if empty, err := EncodeSeriesIndex(nil); err != nil {
		t.Fatal(err)
	} else if got, err := DecodeSeriesIndex(empty); err != nil || len(got) != 0 {
		t.Fatalf("empty index: %q, %v", got, err)
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

func flip(b []byte, i int) []byte {
	c := slices.Clone(b)
	c[i] ^= 0x10
	return c
}
