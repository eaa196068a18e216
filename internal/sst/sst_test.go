package sst

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/tsbs"
)

var testFields = []schema.Field{
	{Name: "f", Kind: row.Float}, {Name: "i", Kind: row.Int}, {Name: "u", Kind: row.Uint},
	{Name: "s", Kind: row.String}, {Name: "b", Kind: row.Bool},
}

func series(t testing.TB, host string) string {
	k, err := row.EncodeSeries(nil, []row.Tag{{Name: "host", Value: host}})
	if err != nil {
		t.Fatal(err)
	}
	return string(k)
}

// testEntries: n puts over two series, ts = 10*i, a tombstone, nulls and
// extreme values of every kind.
func testEntries(t testing.TB, n int) []row.Entry {
	var es []row.Entry
	seq := uint64(1)
	for _, h := range []string{"a", "b"} {
		key := series(t, h)
		for i := 0; i < n; i++ {
			f := []row.Value{row.FloatValue(float64(i) + 0.5), row.IntValue(int64(-i)), row.UintValue(math.MaxUint64 - uint64(i)),
				row.StringValue("v" + h), row.BoolValue(i%2 == 0)}
			if i%7 == 3 {
				f[1] = row.Value{} // null
			}
			es = append(es, row.Entry{Series: key, TS: int64(10 * i), Seq: seq, Op: row.Put, Fields: f})
			seq++
			if h == "b" && i == n/2 {
				es = append(es, row.Entry{Series: key, TS: int64(10 * i), End: int64(10*i + 25), Seq: seq + 1_000_000, Op: row.Delete})
			}
		}
	}
	slices.SortStableFunc(es, func(a, b row.Entry) int {
		if row.Less(&a, &b) {
			return -1
		}
		if row.Less(&b, &a) {
			return 1
		}
		return 0
	})
	return es
}

func write(t testing.TB, es []row.Entry, groupRows int64) ([]byte, Meta) {
	return writeWith(t, es, WriteOptions{RowGroupRows: groupRows})
}

func writeWith(t testing.TB, es []row.Entry, opts WriteOptions) ([]byte, Meta) {
	return writeFields(t, testFields, es, opts)
}

func writeFields(t testing.TB, fields []schema.Field, es []row.Entry, opts WriteOptions) ([]byte, Meta) {
	var buf bytes.Buffer
	m, err := Write(&buf, fields, &row.SliceIter{Entries: es}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), m
}

// openBytes stores data as an SST in a new in-memory store and opens it.
func openBytes(t testing.TB, data []byte) *Reader {
	t.Helper()
	ctx := context.Background()
	s := objstoretest.Mem(t)
	if err := s.Put(ctx, "x.parquet", data); err != nil {
		t.Fatal(err)
	}
	r, err := Open(ctx, s, "x.parquet", int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// collect reads it to the end, copying each entry as it comes (so it also
// serves iterators that reuse their Fields).
func collect(t testing.TB, it row.Iterator) []row.Entry {
	t.Helper()
	var out []row.Entry
	for it.Next() {
		e := *it.Entry()
		e.Fields = slices.Clone(e.Fields)
		out = append(out, e)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	it.Close()
	return out
}

func equalEntries(t *testing.T, got, want []row.Entry) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Series != w.Series || g.TS != w.TS || g.Seq != w.Seq || g.Op != w.Op || (w.Op == row.Delete && g.End != w.End) {
			t.Fatalf("entry %d: got %v, want %v", i, g, w)
		}
		for j := range max(len(g.Fields), len(w.Fields)) {
			if !g.Field(j).Equal(w.Field(j)) {
				t.Fatalf("entry %d field %d: got %v, want %v", i, j, g.Field(j), w.Field(j))
			}
		}
	}
}

func names() []string {
	var n []string
	for _, f := range testFields {
		n = append(n, f.Name)
	}
	return n
}

func TestRoundTripEveryKind(t *testing.T) {
	for i, ranged := range []bool{false, true} {
		ctx := context.Background()
		es := testEntries(t, 3000)
		// Both compression levels, and both read paths.
		data, meta := writeWith(t, es, WriteOptions{RowGroupRows: 1000, Compression: []Compression{CompressDefault, CompressFast}[i]})
		if meta.Rows != int64(len(es)) || meta.Tombstones != 1 || meta.MinTS != 0 || meta.MaxTS != 10*2999 || meta.Size != int64(len(data)) {
			t.Fatalf("meta %+v", meta)
		}
		s := objstoretest.Mem(t)
		if err := s.Put(ctx, "x.parquet", data); err != nil {
			t.Fatal(err)
		}
		if ranged {
			old := WholeFileLimit
			WholeFileLimit = 1024
			t.Cleanup(func() { WholeFileLimit = old })
		}
		r, err := Open(ctx, s, "x.parquet", int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		if r.RowGroups() != 7 || r.Rows() != int64(len(es)) {
			t.Fatalf("ranged=%v: %d row groups, %d rows", ranged, r.RowGroups(), r.Rows())
		}
		for _, f := range testFields {
			if k, ok := r.FieldKind(f.Name); !ok || k != f.Kind {
				t.Fatalf("field %s: kind %v, want %v", f.Name, k, f.Kind)
			}
		}
		got := collect(t, r.Iter(Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: names()}))
		equalEntries(t, got, es)
		// Reused Fields: the same entries, copied as they come.
		equalEntries(t, collect(t, r.Iter(Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: names(), ReuseFields: true})), es)
		// One request per row group, when ranged; the same entries.
		counted := faultstore.New(s)
		var gets atomic.Int64
		counted.Hook = func(faultstore.Call) { gets.Add(1) }
		r, err = Open(ctx, counted, "x.parquet", int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		opened := gets.Load()
		if ranged && opened != 1 {
			t.Fatalf("a ranged open made %d requests, want 1 (the file's tail)", opened)
		}
		got = collect(t, r.Iter(Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: names(), GroupBytes: 1 << 20}))
		equalEntries(t, got, es)
		if n := gets.Load() - opened; ranged && n != int64(r.RowGroups()) {
			t.Fatalf("GroupBytes: %d row groups read with %d requests", r.RowGroups(), n)
		}
	}
}

func TestFilterAndRowGroupPruning(t *testing.T) {
	es := testEntries(t, 1000) // a: rows 0..999, b: 1000..2000 (incl. tombstone)
	data, _ := write(t, es, 100)
	r := openBytes(t, data)
	// Time range [2000, 3000) of series a, fields s and f, and a field the
	// file does not have.
	keyA := series(t, "a")
	it := r.Iter(Filter{Series: func(k string) bool { return k == keyA }, Start: 2000, End: 3000, Fields: []string{"s", "missing", "f"}})
	got := collect(t, it)
	if len(got) != 100 {
		t.Fatalf("got %d rows, want 100", len(got))
	}
	for i, e := range got {
		if e.Series != keyA || e.TS != int64(2000+10*i) || e.Field(0).Str() != "va" || !e.Field(1).IsNull() || e.Field(2).Float() != float64(200+i)+0.5 {
			t.Fatalf("row %d: %v", i, e)
		}
	}
	// 20 groups of ~100 rows; a's [2000,3000) spans groups 2-3 and b's
	// the same time range sits in groups 12-13 (the tombstone shifts b by
	// one row). Everything else is pruned by statistics.
	if pruned := it.(*iter).pruned; pruned < 15 {
		t.Fatalf("only %d of %d row groups pruned", pruned, r.RowGroups())
	}
	// A series filter alone prunes row groups by their series dictionary:
	// the first ten groups hold only series a.
	keyB := series(t, "b")
	it = r.Iter(Filter{Series: func(k string) bool { return k == keyB }, Start: math.MinInt64, End: math.MaxInt64, Fields: []string{"f"}})
	if got := collect(t, it); len(got) != 1001 {
		t.Fatalf("series b: %d rows", len(got))
	}
	if pruned := it.(*iter).pruned; pruned != 9 && pruned != 10 {
		t.Fatalf("series dictionary pruned %d groups, want the 9-10 that hold only a", pruned)
	}
	// A tombstone starting before the range but ending inside it is
	// returned.
	got = collect(t, r.Iter(Filter{Start: 5010, End: 5020, Fields: names()}))
	var tombs int
	for _, e := range got {
		if e.Op == row.Delete {
			tombs++
			if e.TS != 5000 || e.End != 5025 {
				t.Fatalf("tombstone %v", e)
			}
		}
	}
	if tombs != 1 || len(got) != 3 { // a@5010, b@5010, tombstone
		t.Fatalf("got %v", got)
	}
}

func TestEmptyAndCorrupt(t *testing.T) {
	ctx := context.Background()
	if _, err := Write(&bytes.Buffer{}, testFields, &row.SliceIter{}, WriteOptions{}); !errors.Is(err, ErrEmpty) {
		t.Fatalf("empty write: %v", err)
	}
	data, _ := write(t, testEntries(t, 10), 0)
	s := objstoretest.Mem(t)
	if err := s.Put(ctx, "ok", data); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, s, "ok", int64(len(data))+1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("size mismatch: %v", err)
	}
	bad := slices.Clone(data)
	copy(bad[len(bad)-8:], "garbage!")
	if err := s.Put(ctx, "bad", bad); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, s, "bad", int64(len(bad))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt footer: %v", err)
	}
	if _, err := Open(ctx, s, "missing", 10); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
}

func BenchmarkWrite(b *testing.B) {
	es := testEntries(b, 50_000)
	b.ResetTimer()
	var size int64
	for b.Loop() {
		_, m := write(b, es, 0)
		size = m.Size
	}
	b.ReportMetric(float64(len(es))*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.SetBytes(size)
}

// BenchmarkWriteTSBS encodes 200,000 TSBS cpu rows (4,000 hosts, 10 float
// fields) with one encoder: the per-row cost of the write path.
func BenchmarkWriteTSBS(b *testing.B) {
	fields := make([]schema.Field, len(tsbs.Fields))
	for i, n := range tsbs.Fields {
		fields[i] = schema.Field{Name: n, Kind: row.Float}
	}
	const hosts, perHost = 4000, 50
	es := make([]row.Entry, 0, hosts*perHost)
	vals := make([]row.Value, hosts*perHost*len(fields))
	for h := range hosts {
		key, err := row.EncodeSeries(nil, tsbs.Tags(h))
		if err != nil {
			b.Fatal(err)
		}
		for t := range perHost {
			k := len(es)
			fs := vals[k*len(fields) : (k+1)*len(fields)]
			for i := range fs {
				fs[i] = row.FloatValue(tsbs.Value(k, i))
			}
			es = append(es, row.Entry{Series: string(key), TS: int64(t) * tsbs.Interval, Seq: uint64(k + 1), Fields: fs})
		}
	}
	slices.SortFunc(es, func(a, b row.Entry) int {
		if row.Less(&a, &b) {
			return -1
		}
		return 1
	})
	var size int64
	for b.Loop() {
		m, err := Write(io.Discard, fields, &row.SliceIter{Entries: es}, WriteOptions{})
		if err != nil {
			b.Fatal(err)
		}
		size = m.Size
	}
	b.ReportMetric(float64(len(es))*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(size)/float64(len(es)), "bytes/row")
}

// TestNullFreeFieldsAreRequired: a file's statistics tell which fields have
// a value in every put (tombstones hold none), a writer told so writes
// those columns required, tombstones survive in them, and a put that
// breaks the promise fails the write, naming the field.
func TestNullFreeFieldsAreRequired(t *testing.T) {
	es := testEntries(t, 3000) // field i has nulls; one tombstone, in series b
	nullFree := map[string]bool{"f": true, "i": false, "u": true, "s": true, "b": true}
	check := func(t *testing.T, r *Reader, required map[string]bool) {
		t.Helper()
		for name, want := range nullFree {
			if got := r.NullFree(name); got != want {
				t.Errorf("NullFree(%s) = %v, want %v", name, got, want)
			}
			if got := !r.optional[r.cols[name]]; got != required[name] {
				t.Errorf("column %s required %v, want %v", name, got, required[name])
			}
		}
		for _, name := range []string{"missing", ColTS, ColDeleteEnd} {
			if r.NullFree(name) {
				t.Errorf("NullFree(%s) = true for a column that is not a field", name)
			}
		}
	}
	t.Run("optional", func(t *testing.T) {
		// Row groups of 1000: the tombstone's group counts one null in
		// every field, the others none but in i.
		data, _ := write(t, es, 1000)
		check(t, openBytes(t, data), map[string]bool{})
	})
	t.Run("required", func(t *testing.T) {
		data, meta := writeWith(t, es, WriteOptions{RowGroupRows: 1000, NoNulls: []bool{true, false, true, true, true}})
		if meta.Tombstones != 1 {
			t.Fatalf("meta %+v", meta)
		}
		r := openBytes(t, data)
		check(t, r, map[string]bool{"f": true, "u": true, "s": true, "b": true})
		equalEntries(t, collect(t, r.Iter(Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: names()})), es)
		equalEntries(t, collect(t, r.Iter(Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: names(), ReuseFields: true})), es)
		// A file written from it keeps the promise: what a compaction does.
		out, _ := writeWith(t, collect(t, r.Iter(Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: names()})),
			WriteOptions{NoNulls: []bool{r.NullFree("f"), r.NullFree("i"), r.NullFree("u"), r.NullFree("s"), r.NullFree("b")}})
		check(t, openBytes(t, out), map[string]bool{"f": true, "u": true, "s": true, "b": true})
	})
	t.Run("broken promise", func(t *testing.T) {
		_, err := Write(&bytes.Buffer{}, testFields, &row.SliceIter{Entries: es}, WriteOptions{RowGroupRows: 1000, NoNulls: []bool{true, true}})
		if !errors.Is(err, ErrUnexpectedNull) || !strings.Contains(err.Error(), `field "i"`) {
			t.Fatalf("a null in a field written without nulls: %v", err)
		}
	})
}

// TestMetadataLargerThanTheTail: a ranged open reads the file's tail at
// once; a footer larger than that tail is read from the store as well.
func TestMetadataLargerThanTheTail(t *testing.T) {
	old := WholeFileLimit
	WholeFileLimit = 1024
	t.Cleanup(func() { WholeFileLimit = old })
	es := testEntries(t, 4000)
	data, _ := write(t, es, 8) // 1000 row groups: a footer of several hundred KiB
	r := openBytes(t, data)
	footer := int64(binary.LittleEndian.Uint32(data[len(data)-8:]))
	if tail := tailBytes(int64(len(data))); footer <= tail {
		t.Fatalf("footer of %d bytes fits the %d-byte tail: the test needs a larger one", footer, tail)
	}
	equalEntries(t, collect(t, r.Iter(Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: names()})), es)
}
