package sst

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"

	"github.com/parquet-go/parquet-go/format"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/row"
)

// TestReadColumns: a file's runs read column by column give each series'
// rows in range, with their nulls, across row groups; the checks that
// decide whether a file can be read so (numeric field, tombstones, sequence
// range) say what the file holds; a run past the file's end is corruption,
// and emit's error ends the read.
func TestReadColumns(t *testing.T) {
	all := testEntries(t, 50)
	puts := slices.DeleteFunc(slices.Clone(all), func(e row.Entry) bool { return e.Op == row.Delete })
	data, _ := write(t, puts, 7)
	r := openBytes(t, data)
	for _, f := range []string{"f", "i", "u"} {
		if !r.NumericField(f) {
			t.Fatalf("field %s is not numeric", f)
		}
	}
	for _, f := range []string{"s", "b", "nope", ColTS} {
		if r.NumericField(f) {
			t.Fatalf("%s is a numeric field", f)
		}
	}
	if r.Tombstones(math.MinInt64, math.MaxInt64) {
		t.Fatal("a file of puts has tombstones")
	}
	if lo, hi, ok := r.SeqRange(); !ok || lo != 1 || hi != 100 {
		t.Fatalf("sequence range %d-%d %v, want 1-100", lo, hi, ok)
	}
	withDel, _ := write(t, all, 7)
	rd := openBytes(t, withDel)
	if !rd.Tombstones(math.MinInt64, math.MaxInt64) || rd.Tombstones(400, 500) {
		t.Fatal("the tombstone at 250-275 is not where the row groups say")
	}

	runs := []Run{{Key: series(t, "a"), Start: 0, End: 50}, {Key: series(t, "b"), Start: 50, End: 100}}
	const start, end = 15, 305
	got := map[string][]string{}
	err := r.ReadColumns(runs, "i", start, end, func(c *SeriesColumn) error {
		if len(c.Null) != len(c.TS) {
			t.Fatalf("optional column: %d nulls for %d rows", len(c.Null), len(c.TS))
		}
		for k, ts := range c.TS {
			v := row.NumberValue(row.Int, c.Bits[k])
			if c.Null[k] {
				v = row.Value{}
			}
			got[c.Series] = append(got[c.Series], row.FormatSeries(c.Series)+" "+strconv.FormatInt(ts, 10)+" "+v.String())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range puts {
		if e.TS < start || e.TS >= end {
			continue
		}
		want := row.FormatSeries(e.Series) + " " + strconv.FormatInt(e.TS, 10) + " " + e.Fields[1].String()
		if len(got[e.Series]) == 0 || got[e.Series][0] != want {
			t.Fatalf("next row of %s: %q, want %q", row.FormatSeries(e.Series), got[e.Series], want)
		}
		got[e.Series] = got[e.Series][1:]
	}
	for k, rest := range got {
		if len(rest) > 0 {
			t.Fatalf("%s: rows out of range or extra: %q", row.FormatSeries(k), rest)
		}
	}

	err = r.ReadColumns([]Run{{Key: series(t, "b"), Start: 90, End: 120}}, "f", math.MinInt64, math.MaxInt64, func(*SeriesColumn) error { return nil })
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a run past the end: %v", err)
	}
	stop := errors.New("stop")
	if err := r.ReadColumns(runs, "f", math.MinInt64, math.MaxInt64, func(*SeriesColumn) error { return stop }); err != stop {
		t.Fatalf("emit's error: %v", err)
	}
}

// TestDecimalColumns: a float field written as decimals is an uncompressed,
// delta-packed INT64 DECIMAL column in a file of format 2, read back (by
// rows and by columns) exactly as the same file with doubles; its statistics
// bound its mantissas; a value that is no decimal at the scale fails the
// write, naming the field; scales for other kinds are ignored.
func TestDecimalColumns(t *testing.T) {
	es := testEntries(t, 50) // f = i + 0.5: scale 1
	doubles, _ := write(t, es, 7)
	data, _ := writeWith(t, es, WriteOptions{RowGroupRows: 7, Decimals: []int8{1, 0}})
	r, d := openBytes(t, data), openBytes(t, doubles)
	if v, _ := r.file.Lookup(formatKey); v != formatDecimalsValue {
		t.Fatalf("format %q, want %q", v, formatDecimalsValue)
	}
	if v, _ := d.file.Lookup(formatKey); v != formatValue {
		t.Fatalf("a file without decimals has format %q, want %q", v, formatValue)
	}
	md := r.file.Metadata().RowGroups[0].Columns[r.cols["f"]].MetaData
	if md.Type != format.Int64 || md.Codec != format.Uncompressed || !slices.Contains(md.Encoding, format.DeltaBinaryPacked) {
		t.Fatalf("column f: type %v codec %v encodings %v", md.Type, md.Codec, md.Encoding)
	}
	if k, _ := r.FieldKind("f"); k != row.Float {
		t.Fatalf("field f reads as %v", k)
	}
	if k, _ := r.FieldKind("i"); k != row.Int || r.scales[r.cols["i"]] != decimal.None {
		t.Fatalf("field i reads as %v at scale %d: a scale for an int field is ignored", k, r.scales[r.cols["i"]])
	}
	if scale, maxAbs, ok := r.Decimals("f"); !ok || scale != 1 || maxAbs != 495 {
		t.Fatalf("Decimals(f) = %d, %d, %v; want 1, 495 (49.5), true", scale, maxAbs, ok)
	}
	for _, f := range []string{"i", "nope"} {
		if _, _, ok := r.Decimals(f); ok {
			t.Fatalf("Decimals(%s) ok", f)
		}
	}
	if _, _, ok := d.Decimals("f"); ok {
		t.Fatal("Decimals(f) ok for doubles")
	}
	all := Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: names()}
	equalEntries(t, collect(t, r.Iter(all)), collect(t, d.Iter(all)))
	puts := slices.DeleteFunc(slices.Clone(es), func(e row.Entry) bool { return e.Op == row.Delete })
	pr, pd := openBytes(t, must(writeWith(t, puts, WriteOptions{RowGroupRows: 7, Decimals: []int8{1}}))), openBytes(t, must(write(t, puts, 7)))
	runs := []Run{{Key: series(t, "a"), Start: 0, End: 50}, {Key: series(t, "b"), Start: 50, End: 100}}
	read := func(r *Reader) []string {
		var out []string
		err := r.ReadColumns(runs, "f", 15, 305, func(c *SeriesColumn) error {
			if c.Finite != (r == pr) { // decimals are finite; doubles may be NaN
				t.Fatalf("a column of %s says Finite %v", map[bool]string{true: "decimals", false: "doubles"}[r == pr], c.Finite)
			}
			for k, ts := range c.TS {
				out = append(out, fmt.Sprint(c.Series, ts, c.Bits[k]))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got, want := read(pr), read(pd); len(want) == 0 || !slices.Equal(got, want) {
		t.Fatalf("columns of decimals %q\nof doubles %q", got, want)
	}

	var buf bytes.Buffer
	_, err := Write(&buf, testFields, &row.SliceIter{Entries: es}, WriteOptions{Decimals: []int8{0}})
	var nd *NotDecimalField
	if !errors.Is(err, ErrNotDecimal) || !errors.As(err, &nd) || nd.Field != 0 {
		t.Fatalf("0.5 at scale 0: %v", err)
	}
	if _, err := Write(&buf, testFields, &row.SliceIter{Entries: es}, WriteOptions{Decimals: []int8{decimal.MaxScale + 1}}); err == nil {
		t.Fatal("a scale over the maximum was taken")
	}
}

func must(data []byte, _ Meta) []byte { return data }

// TestDeltaIntExtremes: int and uint fields are delta bit-packed, and
// deltas that overflow 64 bits (MinInt64 after MaxInt64, 0 after
// MaxUint64) read back exactly, through the row iterator and through
// ReadColumns' own page decoding, required and optional.
func TestDeltaIntExtremes(t *testing.T) {
	ints := []int64{math.MaxInt64, math.MinInt64, 0, -1, math.MaxInt64, 1, math.MinInt64 + 1, 42}
	uints := []uint64{math.MaxUint64, 0, 1 << 63, math.MaxUint64 - 1, 7, 0, math.MaxUint64, 3}
	key := series(t, "x")
	var es []row.Entry
	for i := range 3000 {
		f := []row.Value{row.FloatValue(1), row.IntValue(ints[i%len(ints)] - int64(i/len(ints))), row.UintValue(uints[i%len(uints)] + uint64(i/len(uints))),
			row.StringValue("s"), row.BoolValue(true)}
		es = append(es, row.Entry{Series: key, TS: int64(i), Seq: uint64(i + 1), Fields: f})
	}
	for _, required := range []bool{false, true} {
		data, _ := writeWith(t, es, WriteOptions{RowGroupRows: 1000, PageBytes: 1024, NoNulls: []bool{required, required, required}})
		r := openBytes(t, data)
		equalEntries(t, collect(t, r.Iter(Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: names()})), es)
		for j, name := range []string{"i", "u"} {
			var got []uint64
			if err := r.ReadColumns([]Run{{Key: key, Start: 0, End: int64(len(es))}}, name, math.MinInt64, math.MaxInt64, func(c *SeriesColumn) error {
				got = append(got, c.Bits...)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for i, e := range es {
				if want := e.Fields[1+j].Bits(); i >= len(got) || got[i] != want {
					t.Fatalf("required %v: %s row %d: got %v, want %d", required, name, i, got[min(i, len(got)-1)], want)
				}
			}
		}
	}
}
