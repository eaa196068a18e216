package sst

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/sst/internal/page"
	"github.com/stratadb/strata/internal/testseed"
)

func seeded(t testing.TB) *rand.Rand {
	seed := testseed.Seed(t)
	return rand.New(rand.NewPCG(seed, seed>>7))
}

// TestPageHeaderMatchesParquet: every page header of SSTs (every column,
// compressed or not, with statistics) reads as parquet-go's Thrift decoder
// reads it; a header cut short is corruption.
func TestPageHeaderMatchesParquet(t *testing.T) {
	es := testEntries(t, 3000)
	files := [][]byte{must(write(t, es, 1000)), must(writeWith(t, es, WriteOptions{RowGroupRows: 700, Decimals: []int8{1}, PageBytes: 4096}))}
	headers := 0
	for _, data := range files {
		r := openBytes(t, data)
		for g, rg := range r.file.RowGroups() {
			for c, chunk := range rg.ColumnChunks() {
				index, err := chunk.(*parquet.FileColumnChunk).OffsetIndex()
				if err != nil {
					t.Fatal(err)
				}
				for i := range index.NumPages() {
					b := data[index.Offset(i) : index.Offset(i)+index.CompressedPageSize(i)]
					h, n, err := page.ParseHeader(b)
					if err != nil {
						t.Fatalf("group %d column %d page %d: %v", g, c, i, err)
					}
					var want format.PageHeader
					if err := thrift.Unmarshal(&thrift.CompactProtocol{}, b[:n], &want); err != nil {
						t.Fatalf("group %d column %d page %d: parquet-go: %v", g, c, i, err)
					}
					if got := headerOf(h); got != fmt.Sprint(want.Type, want.UncompressedPageSize, want.CompressedPageSize, want.CRC, pageFields(&want)) {
						t.Fatalf("group %d column %d page %d: read %s, parquet-go %v", g, c, i, got, want)
					}
					if int(h.Compressed) != len(b)-n {
						t.Fatalf("group %d column %d page %d: header of %d bytes says %d more, the index %d", g, c, i, n, h.Compressed, len(b)-n)
					}
					for k := range n {
						if _, _, err := page.ParseHeader(b[:k]); !errors.Is(err, ErrCorrupt) {
							t.Fatalf("a header cut to %d of %d bytes: %v", k, n, err)
						}
					}
					headers++
				}
			}
		}
	}
	t.Logf("%d page headers", headers)
}

func headerOf(h page.Header) string {
	return fmt.Sprint(h.Type, h.Uncompressed, h.Compressed, h.CRC, fmt.Sprint(h.V2, h.NumValues, h.NumNulls, h.NumRows, h.Encoding, h.DefLen, h.RepLen, h.IsCompressed))
}

func pageFields(h *format.PageHeader) string {
	if h.DataPageHeaderV2.Valid {
		v := h.DataPageHeaderV2.V
		return fmt.Sprint(true, v.NumValues, v.NumNulls, v.NumRows, v.Encoding, v.DefinitionLevelsByteLength, v.RepetitionLevelsByteLength,
			!v.IsCompressed.Valid || v.IsCompressed.V)
	}
	v := h.DataPageHeader.V
	return fmt.Sprint(false, v.NumValues, 0, 0, v.Encoding, 0, 0, true)
}

// FuzzParsePageHeader: any bytes read as a header or fail; none panics.
func FuzzParsePageHeader(f *testing.F) {
	data := must(writeWith(f, testEntries(f, 100), WriteOptions{Decimals: []int8{1}}))
	r := openBytes(f, data)
	for _, chunk := range r.file.RowGroups()[0].ColumnChunks() {
		index, err := chunk.(*parquet.FileColumnChunk).OffsetIndex()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data[index.Offset(0) : index.Offset(0)+min(index.CompressedPageSize(0), 64)])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := page.ParseHeader(b)
		if err == nil && (n <= 0 || n > len(b) || h.Compressed < 0) {
			t.Fatalf("header of %d bytes from %d: %+v", n, len(b), h)
		}
	})
}

// TestRawPagesMatchParquet: ReadColumns gives the same columns through
// rawPages as through parquet-go's pages, for random runs and time ranges
// of files of every numeric kind (doubles, ints, decimals, timestamps at
// steady and ragged steps) with many small pages, compressed and not; it
// reads them through rawPages; and a flipped byte in a page fails its
// checksum.
func TestRawPagesMatchParquet(t *testing.T) {
	rng := seeded(t)
	fields := []schema.Field{{Name: "f", Kind: row.Float}, {Name: "d", Kind: row.Float}, {Name: "i", Kind: row.Int}, {Name: "u", Kind: row.Uint}}
	var es []row.Entry
	var runs []Run
	for h := range 40 {
		key := series(t, fmt.Sprintf("h%02d", h))
		ts, n := int64(rng.IntN(1000)), 1+rng.IntN(700)
		runs = append(runs, Run{Key: key, Start: int64(len(es)), End: int64(len(es) + n)})
		for k := range n {
			if h%3 == 0 {
				ts += 10
			} else {
				ts += 1 + rng.Int64N(30)
			}
			es = append(es, row.Entry{Series: key, TS: ts, Seq: uint64(len(es) + 1), Op: row.Put, Fields: []row.Value{
				row.FloatValue(rng.NormFloat64() * 1e6), row.FloatValue(float64(rng.IntN(100_000)-50_000) / 100),
				row.IntValue(rng.Int64()), row.UintValue(uint64(k * h)),
			}})
		}
	}
	data := must(writeFields(t, fields, es, WriteOptions{RowGroupRows: 3000, PageBytes: 2048, Decimals: []int8{decimal.None, 2}, NoNulls: []bool{true, true, true, true}}))
	r := openBytes(t, data)
	var p rawPages
	for _, c := range []string{ColTS, "f", "d", "i", "u"} {
		if !r.openRaw(0, r.cols[c], &p) {
			t.Fatalf("column %s is not read through rawPages", c)
		}
	}
	read := func(runs []Run, field string, start, end int64, raw bool) (string, error) {
		rawPagesOff = !raw
		defer func() { rawPagesOff = false }()
		var out []byte
		err := r.ReadColumns(runs, field, start, end, func(c *SeriesColumn) error {
			out = fmt.Appendln(out, c.Series, c.TS, c.Bits, c.Null == nil, c.Finite)
			return nil
		})
		return string(out), err
	}
	for round := range 200 {
		var sel []Run
		for _, run := range runs {
			if rng.IntN(3) == 0 {
				sel = append(sel, run)
			}
		}
		start := rng.Int64N(8000)
		end := start + rng.Int64N(20000)
		if round%10 == 0 {
			sel, start, end = runs, math.MinInt64, math.MaxInt64
		}
		field := []string{"f", "d", "i", "u"}[rng.IntN(4)]
		want, err := read(sel, field, start, end, false)
		if err != nil {
			t.Fatal(err)
		}
		got, err := read(sel, field, start, end, true)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if got != want {
			t.Fatalf("round %d: field %s [%d, %d): rawPages read\n%s\nparquet-go\n%s", round, field, start, end, got, want)
		}
	}

	// A flipped byte in the last page of column d.
	fc := r.file.RowGroups()[0].ColumnChunks()[r.cols["d"]].(*parquet.FileColumnChunk)
	index, err := fc.OffsetIndex()
	if err != nil {
		t.Fatal(err)
	}
	last := index.NumPages() - 1
	bad := slices.Clone(data)
	bad[index.Offset(last)+index.CompressedPageSize(last)-1] ^= 0x40
	rb := openBytes(t, bad)
	err = rb.ReadColumns(runs, "d", math.MinInt64, math.MaxInt64, func(*SeriesColumn) error { return nil })
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a flipped byte in a page: %v", err)
	}
}
