package sst

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/row"
)

// randomEntries: n sorted entries over four series, with stretches of
// fields that are always, sometimes or never null (if nulls; otherwise
// never), and a few tombstones.
func randomEntries(t testing.TB, rng *rand.Rand, n int, nulls bool) []row.Entry {
	var es []row.Entry
	seq := uint64(1)
	per := n / 4
	for h := range 4 {
		key := series(t, fmt.Sprint("h", h))
		nullP := 0.0
		for i := 0; i < per; i++ {
			if i%300 == 0 && nulls {
				nullP = []float64{0, 0.5, 1}[rng.IntN(3)]
			}
			e := row.Entry{Series: key, TS: int64(10 * i), Seq: seq}
			seq++
			if rng.IntN(200) == 0 {
				e.Op, e.End = row.Delete, e.TS+int64(rng.IntN(50))
				es = append(es, e)
				continue
			}
			e.Fields = []row.Value{row.FloatValue(rng.NormFloat64()), row.IntValue(rng.Int64() - math.MaxInt64/2), row.UintValue(rng.Uint64()),
				row.StringValue(fmt.Sprint("v", rng.IntN(5))), row.BoolValue(rng.IntN(2) == 0)}
			for j := range e.Fields {
				if rng.Float64() < nullP {
					e.Fields[j] = row.Value{}
				}
			}
			es = append(es, e)
		}
	}
	return es
}

// TestNumericColumnsAcrossPages reads numeric columns (read from pages'
// values directly) where pages end inside a chunk of rows and chunks end
// inside pages, with nulls in runs (or, in required columns, none),
// through every read path: whole scans, reused fields, series-filtered
// seeks, and pages another writer might dictionary-encode; with floats as
// doubles and as decimals (WriteOptions.Decimals).
func TestNumericColumnsAcrossPages(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for _, tc := range []struct{ dict, required, decimals bool }{{false, false, false}, {true, false, false}, {false, true, false}, {true, true, false},
		{false, false, true}, {false, true, true}} {
		dict := tc.dict
		t.Run(fmt.Sprintf("dictionary=%v/required=%v/decimals=%v", dict, tc.required, tc.decimals), func(t *testing.T) {
			if dict {
				old := fieldNode
				fieldNode = func(k row.Kind, required bool) parquet.Node {
					if k == row.Float || k == row.Int || k == row.Uint {
						n := parquet.Encoded(leafFor(k), &parquet.RLEDictionary)
						if required {
							return n
						}
						return parquet.Optional(n)
					}
					return old(k, required)
				}
				t.Cleanup(func() { fieldNode = old })
			}
			es := randomEntries(t, rng, 8000, !tc.required)
			opts := WriteOptions{PageBytes: []int{256, 512, 1024}[rng.IntN(3)], RowGroupRows: int64([]int{700, 2500, 8000}[rng.IntN(3)])}
			if dict && opts.PageBytes == 1024 && opts.RowGroupRows == 700 {
				// Dictionary indexes are small: 700 rows of them fit in
				// two pages of 1 KiB, and the test wants several.
				opts.PageBytes = 512
			}
			if tc.required {
				opts.NoNulls = []bool{true, true, true, true, true}
			}
			scale := int8(rng.IntN(decimal.MaxScale + 1))
			if tc.decimals {
				// Decimals at scale, of every size the limit allows there.
				digits := int64(1)
				for range 15 - int(scale) {
					digits *= 10
				}
				for i := range es {
					if es[i].Op == row.Put && es[i].Fields[0].Kind() == row.Float {
						m := rng.Int64N(2*digits) - digits
						if rng.IntN(2) == 0 {
							m = rng.Int64N(2000) - 1000
						}
						es[i].Fields[0] = row.FloatValue(decimal.Float(m, scale))
					}
				}
				opts.Decimals = []int8{scale}
			}
			// Pages are cut between writes of writeChunk rows; cut them at
			// row counts that the reader's 1024-row chunks do not share.
			oldChunk := writeChunk
			writeChunk = 29 + rng.IntN(270)
			t.Cleanup(func() { writeChunk = oldChunk })
			t.Logf("page bytes %d, row group rows %d, write chunk %d", opts.PageBytes, opts.RowGroupRows, writeChunk)
			data, _ := writeWith(t, es, opts)
			r := openBytes(t, data)
			// The layout under test: several pages per column chunk, and
			// (with dict) numeric pages that are not plain values.
			for _, c := range []string{"f", "i", "u", ColTS, ColSeq, ColDeleteEnd} {
				if !r.numeric[r.cols[c]] {
					t.Fatalf("column %s is not read as numeric", c)
				}
			}
			for _, c := range names() {
				if r.optional[r.cols[c]] == tc.required {
					t.Fatalf("column %s: optional %v", c, r.optional[r.cols[c]])
				}
			}
			if got := r.scales[r.cols["f"]]; tc.decimals && got != scale || !tc.decimals && got != decimal.None {
				t.Fatalf("column f has scale %d", got)
			}
			most := 0
			for _, g := range r.file.RowGroups() {
				oi, err := g.ColumnChunks()[r.cols["f"]].OffsetIndex()
				if err != nil {
					t.Fatal(err)
				}
				most = max(most, oi.NumPages())
			}
			if most < 3 {
				t.Fatalf("column f has at most %d pages in a row group: want several", most)
			}
			md := r.file.Metadata().RowGroups[0].Columns[r.cols["f"]].MetaData
			if got := slices.Contains(md.Encoding, format.RLEDictionary); got != dict {
				t.Fatalf("column f encodings %v", md.Encoding)
			}
			equalEntries(t, collect(t, r.Iter(Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: names()})), es)
			equalEntries(t, collect(t, r.Iter(Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: names(), ReuseFields: true})), es)
			// Numeric fields only (and one the file lacks): read a row at
			// a time.
			var numeric []row.Entry
			for _, e := range es {
				if e.Op == row.Put {
					e.Fields = []row.Value{e.Fields[1], {}, e.Fields[0], e.Fields[2]}
				}
				numeric = append(numeric, e)
			}
			for _, reuse := range []bool{false, true} {
				f := Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: []string{"i", "missing", "f", "u"}, ReuseFields: reuse}
				equalEntries(t, collect(t, r.Iter(f)), numeric)
			}
			// Series filters seek every column to each selected run.
			for range 4 {
				h := fmt.Sprint("h", rng.IntN(4))
				key := series(t, h)
				lo := int64(rng.IntN(15000))
				hi := lo + int64(rng.IntN(10000))
				f := Filter{Series: func(k string) bool { return k == key }, Start: lo, End: hi, Fields: []string{"u", "f", "b", "i"}}
				var want []row.Entry
				for _, e := range es {
					if e.Series != key {
						continue
					}
					if e.Op == row.Delete && (e.End < lo || e.TS >= hi) || e.Op == row.Put && (e.TS < lo || e.TS >= hi) {
						continue
					}
					if e.Op == row.Put {
						e.Fields = []row.Value{e.Fields[2], e.Fields[0], e.Fields[4], e.Fields[1]}
					}
					want = append(want, e)
				}
				t.Logf("series %s, [%d, %d): %d entries", h, lo, hi, len(want))
				equalEntries(t, collect(t, r.Iter(f)), want)
			}
		})
	}
}
