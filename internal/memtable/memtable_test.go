package memtable

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/symtab"
	"github.com/stratadb/strata/internal/testseed"
)

// seriesOf returns the series of key, or nil.
func (m *Memtable) seriesOf(key string) *series {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if o := m.find(key, hashKey(key)); o >= 0 {
		return m.at(o)
	}
	return nil
}

// allSeries returns the series by key.
func (m *Memtable) allSeries() map[string]*series {
	m.mu.RLock()
	defer m.mu.RUnlock()
	kv := m.keyView()
	var keys symtab.KeyArena
	out := map[string]*series{}
	for o := range m.n {
		s := m.at(o)
		out[kv.key(&keys, s)] = s
	}
	return out
}

// heldStrings returns the strings the memtable keeps of its keys.
func (m *Memtable) heldStrings() []string {
	out := slices.Clone(m.raw)
	for i := range m.syms.Len() {
		out = append(out, m.syms.Sym(uint32(i)))
	}
	return out
}

func entries(it row.Iterator) []row.Entry {
	var out []row.Entry
	for it.Next() {
		out = append(out, *it.Entry())
	}
	it.Close()
	return out
}

var all = Filter{Start: math.MinInt64, End: math.MaxInt64}

func TestSortedIterationAndSnapshot(t *testing.T) {
	m := New()
	seq := uint64(0)
	ins := func(seg uint64, series string, ts int64, v int64) {
		seq++
		m.Insert(seg, []row.Entry{{Series: series, TS: ts, Seq: seq, Op: row.Put, Fields: []row.Value{row.IntValue(v), row.IntValue(-v)}}})
	}
	ins(1, "b", 5, 1)
	ins(1, "a", 9, 2)
	ins(2, "a", 3, 3)
	ins(2, "a", 9, 4) // overwrite: newer seq sorts first
	it := m.Iter(all) // snapshot: later inserts are not seen
	ins(3, "a", 1, 5)
	got := entries(it)
	want := []struct {
		s   string
		ts  int64
		seq uint64
	}{{"a", 3, 3}, {"a", 9, 4}, {"a", 9, 2}, {"b", 5, 1}}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i, w := range want {
		if got[i].Series != w.s || got[i].TS != w.ts || got[i].Seq != w.seq {
			t.Fatalf("entry %d: %v, want %+v", i, got[i], w)
		}
	}
	st := m.Stats()
	if st.Entries != 5 || st.Series != 2 || st.MinSeq != 1 || st.MaxSeq != 5 || st.MinTS != 1 || st.MaxTS != 9 || st.LastSegment != 3 || st.Bytes <= 0 {
		t.Fatalf("stats %+v", st)
	}
	// Filters and projection: series a, 2 <= ts < 9, field 1 only.
	got = entries(m.Iter(Filter{Series: func(k string) bool { return k == "a" }, Start: 2, End: 9, Fields: []int{1, 7}}))
	if len(got) != 1 || got[0].TS != 3 || got[0].Field(0).Int() != -3 || !got[0].Field(1).IsNull() {
		t.Fatalf("filtered: %v", got)
	}
	// A tombstone overlapping the range is returned even though it starts
	// before it; frozen memtables sort once and iterate the same.
	m.Insert(4, []row.Entry{{Series: "b", TS: 0, End: 100, Seq: 6, Op: row.Delete}})
	m.Freeze()
	for range 2 {
		got = entries(m.Iter(Filter{Start: 50, End: 60}))
		if len(got) != 1 || got[0].Op != row.Delete || got[0].End != 100 {
			t.Fatalf("tombstone: %v", got)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("insert into a frozen memtable did not panic")
		}
	}()
	ins(5, "a", 1, 1)
}

// TestNullFree: a field is null-free while every put has a value for it;
// a null, or a put too short to reach it, ends that. Tombstones do not.
func TestNullFree(t *testing.T) {
	m := New()
	if got := m.NullFree(2); got[0] || got[1] {
		t.Fatalf("empty memtable: %v", got)
	}
	put := func(seq uint64, fs ...row.Value) {
		m.Insert(1, []row.Entry{{Series: "a", TS: int64(seq), Seq: seq, Op: row.Put, Fields: fs}})
	}
	put(1, row.IntValue(1), row.FloatValue(1), row.IntValue(1))
	m.Insert(1, []row.Entry{{Series: "a", TS: 0, End: 10, Seq: 2, Op: row.Delete}})
	want := func(want ...bool) {
		t.Helper()
		if got := m.NullFree(len(want)); !slices.Equal(got, want) {
			t.Fatalf("NullFree = %v, want %v", got, want)
		}
	}
	want(true, true, true, false) // ordinal 3: no put has it
	put(3, row.IntValue(2), row.Value{}, row.IntValue(2))
	want(true, false, true)
	put(4, row.IntValue(3), row.FloatValue(3)) // too short for ordinal 2
	want(true, false, false)
}

// TestDecimals: each float ordinal's least scale over every put's value,
// tombstones and nulls aside; None once a value is no decimal, or a value
// of another kind is there.
func TestDecimals(t *testing.T) {
	m := New()
	put := func(series string, seq uint64, fs ...row.Value) {
		m.Insert(1, []row.Entry{{Series: series, TS: int64(seq), Seq: seq, Op: row.Put, Fields: fs}})
	}
	want := func(want ...int8) {
		t.Helper()
		if got := m.Decimals(len(want)); !slices.Equal(got, want) {
			t.Fatalf("Decimals = %v, want %v", got, want)
		}
	}
	want(0, 0)
	put("a", 1, row.FloatValue(1), row.FloatValue(2.5), row.FloatValue(3))
	m.Insert(1, []row.Entry{{Series: "a", TS: 0, End: 10, Seq: 2, Op: row.Delete}})
	want(0, 1, 0, 0)
	put("b", 3, row.FloatValue(0.125), row.Value{}, row.IntValue(7))
	want(3, 1, decimal.None)
	put("a", 4, row.FloatValue(1.0/3), row.FloatValue(-99.25))
	want(decimal.None, 2, decimal.None)
}

// A successor allocates a new series' rows at its predecessor's mean rows
// a series and an eighth more, and holds what is inserted as any memtable
// does.
func TestSuccessorExpectsThePredecessorsRows(t *testing.T) {
	m := New()
	seq := uint64(0)
	for ts := range int64(40) {
		for _, s := range []string{"a", "b", "c", "d"} {
			seq++
			m.Insert(1, []row.Entry{{Series: s, TS: ts, Seq: seq, Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}})
		}
	}
	n := m.Successor()
	seq++
	n.Insert(2, []row.Entry{{Series: "z", TS: 1, Seq: seq, Op: row.Put, Fields: []row.Value{row.FloatValue(2)}}})
	if c := cap(n.seriesOf("z").rows); c != 40+40/8+1 {
		t.Errorf("a new series' rows have capacity %d, want 46", c)
	}
	if got := entries(n.Iter(all)); len(got) != 1 || got[0].Series != "z" || got[0].Fields[0].Float() != 2 {
		t.Errorf("successor holds %v", got)
	}
	if h := New().Successor().rowsHint; h != 0 {
		t.Errorf("the successor of an empty memtable expects %d rows a series", h)
	}
}

// Rows of every kind, nulls, varying widths and shapes and tombstones
// come back as inserted: whole, projected, and with ReuseFields read the
// way a merge reads (each entry held while the next is read).
func TestValuesRoundTrip(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	value := func() row.Value {
		switch rng.IntN(7) {
		case 0:
			return row.Value{}
		case 1:
			return row.IntValue(rng.Int64() - rng.Int64())
		case 2:
			return row.UintValue(rng.Uint64())
		case 3:
			return row.BoolValue(rng.IntN(2) == 0)
		case 4:
			return row.StringValue(fmt.Sprint("s", rng.IntN(100)))
		default:
			return row.FloatValue(rng.NormFloat64())
		}
	}
	m := New()
	want := map[[2]int64]row.Entry{} // (series, seq) -> entry
	seq := uint64(0)
	for range 3000 {
		seq++
		s := rng.IntN(20)
		e := row.Entry{Series: fmt.Sprint("k", s), TS: rng.Int64N(1000), Seq: seq, Op: row.Put}
		if rng.IntN(30) == 0 {
			e.Op, e.End = row.Delete, e.TS+rng.Int64N(50)
		} else {
			for range 1 + rng.IntN(6) {
				e.Fields = append(e.Fields, value())
			}
		}
		m.Insert(1, []row.Entry{e})
		want[[2]int64{int64(s), int64(seq)}] = e
	}
	check := func(name string, f Filter, keepPrev bool) {
		it := m.Iter(f)
		defer it.Close()
		var prev, prevCopy row.Entry
		n := 0
		for it.Next() {
			e := *it.Entry()
			var s int64
			if _, err := fmt.Sscanf(e.Series, "k%d", &s); err != nil {
				t.Fatal(err)
			}
			w := want[[2]int64{s, int64(e.Seq)}]
			if e.TS != w.TS || e.Op != w.Op || e.End != w.End {
				t.Fatalf("%s: got %v, want %v", name, e, w)
			}
			for i := range max(len(e.Fields), len(f.Fields)) {
				ord := i
				if f.Fields != nil {
					ord = f.Fields[i]
				}
				if e.Op == row.Put && !e.Field(i).Equal(w.Field(ord)) {
					t.Fatalf("%s: %v field %d (ordinal %d) is %v, want %v", name, e, i, ord, e.Field(i), w.Field(ord))
				}
			}
			if e.Op == row.Put && f.Fields == nil && len(e.Fields) != len(w.Fields) {
				t.Fatalf("%s: %v has %d fields, want %d", name, e, len(e.Fields), len(w.Fields))
			}
			if keepPrev && prev.Fields != nil && !slices.EqualFunc(prev.Fields, prevCopy.Fields, row.Value.Equal) {
				t.Fatalf("%s: the previous entry's fields changed once the next was read", name)
			}
			prev, prevCopy = e, row.Entry{Fields: slices.Clone(e.Fields)}
			n++
		}
		if n != len(want) {
			t.Fatalf("%s: %d entries, want %d", name, n, len(want))
		}
	}
	check("whole", all, false)
	check("projected", Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: []int{4, 0, 9, 2}}, false)
	check("reused", Filter{Start: math.MinInt64, End: math.MaxInt64, ReuseFields: true}, true)
	m.Freeze()
	check("frozen", all, false)
}

// A series keeps a copy of its key, not the string the entry's key was
// cut from (a whole write's keys, or a WAL segment's).
func TestSeriesKeepsACopyOfItsKey(t *testing.T) {
	all := strings.Repeat("k", 1<<20)
	m := New()
	m.Insert(1, []row.Entry{{Series: all[:5], TS: 1, Seq: 1, Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}})
	for _, k := range m.heldStrings() {
		if unsafe.StringData(k) == unsafe.StringData(all) {
			t.Fatal("the memtable keeps the string its entry's key was cut from")
		}
	}
}

// An iteration holds the key of the series it reads, not of the ones it
// read: a flush rebuilds every key of the memtable, and kept them all
// until its last row.
func TestIterationLetsGoOfKeysReadPast(t *testing.T) {
	m := New()
	for i := range 3 {
		key, err := row.EncodeSeries(nil, []row.Tag{{Name: "__name__", Value: "m"}, {Name: "host", Value: fmt.Sprint("h", i)}})
		if err != nil {
			t.Fatal(err)
		}
		m.Insert(1, []row.Entry{{Series: string(key), TS: 1, Seq: uint64(i + 1), Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}})
		m.Insert(1, []row.Entry{{Series: string(key), TS: 2, Seq: uint64(i + 4), Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}})
	}
	it := m.Iter(all).(*iter)
	defer func() { _ = it.Close() }()
	for n := 0; it.Next(); n++ {
		for i := range it.idx {
			if it.caps[i].key != "" {
				t.Fatalf("entry %d, of series %d: series %d's key is still held", n, it.idx, i)
			}
		}
		if it.caps[it.idx].key == "" || it.Entry().Series != it.caps[it.idx].key {
			t.Fatalf("entry %d: the series read has no key", n)
		}
	}
	if it.idx != 3 {
		t.Fatalf("read %d series, want 3", it.idx)
	}
}

// A successor fed the load its predecessor had (a source's series in turn,
// the memtable frozen between two rounds, so some series have a row more
// than others) allocates each series' rows once.
func TestSuccessorSizesSeriesForTheLoad(t *testing.T) {
	const series, rows = 100, 10_050 // 50 series of 101 rows, 50 of 100
	load := func(m *Memtable) {
		for i := range rows {
			m.Insert(1, []row.Entry{{Series: fmt.Sprint("s", i%series), TS: int64(i / series), Seq: uint64(i + 1), Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}})
		}
	}
	first := New()
	load(first)
	next := first.Successor()
	load(next)
	for k, s := range next.allSeries() {
		if cap(s.rows) != next.rowsHint {
			t.Fatalf("series %s: %d rows in a slice of %d, allocated at %d: it grew", k, len(s.rows), cap(s.rows), next.rowsHint)
		}
	}
}

// ShareKeys gives the entries of one key one string (the WAL writes a
// key once for the entries that share it), the caller's bytes, not a
// copy; Insert finds the series of each and keeps copies: the caller's
// bytes change after it, the memtable's keys do not. A series' key is accounted apart from
// its rows, as its refs, symbols and postings; a successor interns its
// symbols anew.
func TestShareKeysAndKeyBytes(t *testing.T) {
	m := New()
	k, _ := row.EncodeSeries(nil, []row.Tag{{Name: "n", Value: strings.Repeat("k", 300)}})
	key := string(k) // one tag: one posting, refs of two bytes
	want := int64(2 + seriesOverhead + postingBytes + len("n") + 300 + 2*symtab.SymOverhead)
	m.Insert(1, []row.Entry{{Series: key, TS: 1, Seq: 1, Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}})
	st := m.Stats()
	if st.KeyBytes != want || st.Bytes != st.KeyBytes+rowSize {
		t.Fatalf("stats %+v, want key bytes %d and a row of %d", st, want, rowSize)
	}
	m.Freeze()
	n := m.Successor()
	buf := []byte(key + "fresh")
	es := make([]row.Entry, 3)
	for i := range es {
		es[i] = row.Entry{TS: 2, Seq: uint64(2 + i), Op: row.Put, Fields: []row.Value{row.FloatValue(float64(i))}}
	}
	ShareKeys(es, [][]byte{buf[:len(key)], buf[len(key):], []byte(key)})
	if unsafe.StringData(es[0].Series) != unsafe.StringData(es[2].Series) || es[0].Series != key || es[1].Series != "fresh" {
		t.Fatal("ShareKeys did not give the entries of one key one string")
	}
	if unsafe.StringData(es[0].Series) != &buf[0] {
		t.Fatal("ShareKeys copied the caller's bytes")
	}
	n.Insert(2, es)
	for i := range buf {
		buf[i] = 'x'
	}
	// "fresh" decodes to no tag; the successor sizes a series for two rows,
	// so it has one reserved.
	if got, want := n.Stats().KeyBytes, want+int64(len("fresh")+seriesOverhead+rawOverhead)+rowSize; got != want {
		t.Fatalf("successor key bytes %d, want %d", got, want)
	}
	if got := entries(n.Iter(all)); len(got) != 3 || got[0].Series != key || got[1].Series != key || got[2].Series != "fresh" {
		t.Fatalf("successor holds %v", got)
	}
}

// The postings narrow a filtered iteration, listing and tag lookup to the
// series they name, and return exactly what testing every key returns.
func TestPostingsNarrowWithoutChangingTheResult(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	m := New()
	key := func(tags ...row.Tag) string {
		k, err := row.EncodeSeries(nil, tags)
		if err != nil {
			t.Fatal(err)
		}
		return string(k)
	}
	seq := uint64(0)
	for i := range 500 {
		tags := []row.Tag{{Name: "host", Value: fmt.Sprint("h", rng.IntN(20))}, {Name: "region", Value: fmt.Sprint("r", rng.IntN(3))}}
		if rng.IntN(3) == 0 {
			tags = append(tags, row.Tag{Name: "dc", Value: fmt.Sprint("d", rng.IntN(2))})
		}
		seq++
		m.Insert(1, []row.Entry{{Series: key(tags...), TS: int64(i), Seq: seq, Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}})
	}
	m.Insert(1, []row.Entry{{Series: "not a key", TS: 1, Seq: seq + 1, Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}})
	for range 200 {
		var tags []row.Tag
		var in []row.TagIn
		if rng.IntN(2) == 0 {
			tags = append(tags, row.Tag{Name: "host", Value: fmt.Sprint("h", rng.IntN(22))})
		}
		if rng.IntN(3) == 0 {
			tags = append(tags, row.Tag{Name: "dc", Value: []string{"", "d0", "d1"}[rng.IntN(3)]})
		}
		if rng.IntN(2) == 0 {
			in = append(in, row.TagIn{Name: "region", Values: []string{"r0", []string{"r2", "", "r9"}[rng.IntN(3)]}})
		}
		match := func(k string) bool {
			for _, tg := range tags {
				if row.SeriesTag(k, tg.Name) != tg.Value {
					return false
				}
			}
			for _, f := range in {
				if !slices.Contains(f.Values, row.SeriesTag(k, f.Name)) {
					return false
				}
			}
			return true
		}
		start := int64(rng.IntN(500))
		f := Filter{Series: match, Tags: tags, In: in, Start: start, End: start + 100}
		brute := f
		brute.Tags, brute.In = nil, nil
		got, want := entries(m.Iter(f)), entries(m.Iter(brute))
		if len(got) != len(want) || (len(want) > 0 && !slices.EqualFunc(got, want, func(a, b row.Entry) bool { return a.Series == b.Series && a.TS == b.TS })) {
			t.Fatalf("tags %v in %v: %d entries with postings, %d testing every key", tags, in, len(got), len(want))
		}
		gs, ws := m.Series(f), m.Series(brute)
		slices.Sort(gs)
		slices.Sort(ws)
		if !slices.Equal(gs, ws) {
			t.Fatalf("tags %v in %v: series %d with postings, %d testing every key", tags, in, len(gs), len(ws))
		}
	}

	// Tag values and names count a series with an entry in the range.
	m.Insert(2, []row.Entry{{Series: key(row.Tag{Name: "late", Value: "v"}, row.Tag{Name: "host", Value: "h99"}), TS: 10_000, Seq: seq + 2, Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}})
	vals := m.TagValues("host", 0, 1000, nil)
	if slices.Contains(vals, "h99") || len(vals) == 0 {
		t.Fatalf("host values in [0, 1000): %v", vals)
	}
	if vals := m.TagValues("host", 10_000, 10_001, nil); !slices.Equal(vals, []string{"h99"}) {
		t.Fatalf("host values in [10000, 10001): %v, want h99", vals)
	}
	all := m.TagValues("host", -1, 1<<40, nil)
	if len(all) != len(vals)+1 || !slices.IsSorted(all) {
		t.Fatalf("host values of all time: %v, want those of [0, 1000) and h99, sorted", all)
	}
	// The sorted values kept for all time follow a new series.
	m.Insert(2, []row.Entry{{Series: key(row.Tag{Name: "host", Value: "h0a"}), TS: 5, Seq: seq + 3, Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}})
	again := m.TagValues("host", -1, 1<<40, nil)
	if len(again) != len(all)+1 || !slices.Contains(again, "h0a") || !slices.IsSorted(again) {
		t.Fatalf("host values after h0a came: %v", again)
	}
	// A range that leaves out some of the memtable's entries, but none of
	// the series with a host: the kept slice itself, call after call.
	m.Insert(2, []row.Entry{{Series: key(row.Tag{Name: "dc", Value: "later"}), TS: 50_000, Seq: seq + 4, Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}})
	kept := m.TagValues("host", -1, 1<<40, nil)
	for range 2 {
		if some := m.TagValues("host", -1, 20_000, nil); unsafe.SliceData(some) != unsafe.SliceData(kept) || len(some) != len(kept) {
			t.Fatalf("host values in [-1, 20000): %v, want the kept %v", some, kept)
		}
	}
	if some, want := m.TagValues("host", 0, 1000, nil), slices.DeleteFunc(slices.Clone(kept), func(v string) bool { return v == "h99" }); !slices.Equal(some, want) {
		t.Fatalf("host values in [0, 1000) after h0a: %v, want %v", some, want)
	}
	names := m.TagNames(0, 1000)
	if !slices.Equal(names, []string{"dc", "host", "region"}) {
		t.Fatalf("tag names in [0, 1000): %v, want dc, host and region", names)
	}
	if names := m.TagNames(9_000, 20_000); !slices.Equal(names, []string{"host", "late"}) {
		t.Fatalf("tag names in [9000, 20000): %v, want host and late", names)
	}
}

// A memtable's values but those of a list (a region's files') are
// those sorted without it, less the list's, whatever the list holds: all
// of them, some, others, none; looked up in the list, or the list in them.
func TestTagValuesExceptAList(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed))
	lookedUp := 0
	for round := range 300 {
		m, fresh := New(), New() // answered without except, and with it
		n := 1 + rng.IntN(300)
		for i := range n {
			k, _ := row.EncodeSeries(nil, []row.Tag{{Name: "t", Value: fmt.Sprintf("v%04d", rng.IntN(2*n))}, {Name: "i", Value: fmt.Sprint(i)}})
			e := []row.Entry{{Series: string(k), TS: int64(i), Seq: uint64(i + 1), Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}}
			m.Insert(1, e)
			fresh.Insert(1, e)
		}
		all := m.TagValues("t", math.MinInt64, math.MaxInt64, nil)
		var except []string // sorted: some of the values, and others
		for i := range (2 + 4*(round%3)) * n {
			if rng.IntN(4) > 0 {
				except = append(except, fmt.Sprintf("v%04d", i))
			}
			if rng.IntN(8) == 0 {
				except = append(except, fmt.Sprintf("v%04d~", i)) // never a value
			}
		}
		if 3*len(except) < len(all)*bits.Len(uint(len(all))) {
			lookedUp++
		}
		without := func(vs []string) []string {
			return slices.DeleteFunc(slices.Clone(vs), func(v string) bool {
				_, ok := slices.BinarySearch(except, v)
				return ok
			})
		}
		if got, want := fresh.TagValues("t", math.MinInt64, math.MaxInt64, except), without(all); !slices.Equal(got, want) {
			t.Fatalf("round %d (seed %d): except %d values: %v, want %v", round, seed, len(except), got, want)
		}
		some := fresh.TagValues("t", 0, int64(n/2), except) // the kept values, filtered
		if want := without(m.TagValues("t", 0, int64(n/2), nil)); !slices.Equal(some, want) {
			t.Fatalf("round %d (seed %d): values in [0, %d): %v, want %v", round, seed, n/2, some, want)
		}
		if again := fresh.TagValues("t", math.MinInt64, math.MaxInt64, except); len(again) > 0 && !sameSlice(again, fresh.TagValues("t", math.MinInt64, math.MaxInt64, except)) {
			t.Fatalf("round %d (seed %d): the answer was not kept", round, seed)
		}
	}
	if lookedUp < 50 || lookedUp > 250 {
		t.Fatalf("seed %d: %d of 300 rounds looked the list's values up: both ways not tried", seed, lookedUp)
	}
}

// BenchmarkTagValuesCold: the first listing of 100,000 metric names after
// series were added: sorted (no files), or but those of the region's
// files, which hold them all (except).
func BenchmarkTagValuesCold(b *testing.B) {
	const names = 100_000
	m := New()
	along := make([]string, names)
	for i := range names {
		along[i] = fmt.Sprintf("avalanche_metric_mmmmm_%05d_%d", (i*7919)%names, i%10)
	}
	for i, v := range along {
		k, _ := row.EncodeSeries(nil, []row.Tag{{Name: "__name__", Value: v}, {Name: "job", Value: "avalanche"}})
		m.Insert(1, []row.Entry{{Series: string(k), TS: 1, Seq: uint64(i + 1), Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}})
	}
	slices.Sort(along)
	for _, c := range []struct {
		name   string
		except []string
	}{{"sort", nil}, {"except", along}} {
		b.Run(c.name, func(b *testing.B) {
			c0, n := cpuTime(), 0
			for b.Loop() {
				n++
				m.sorted = nil // as if a series came
				if got := m.TagValues("__name__", math.MinInt64, math.MaxInt64, c.except); len(got) != names-len(c.except) {
					b.Fatalf("%d names", len(got))
				}
			}
			b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(n), "cpu-ns/op")
		})
	}
}

// TestOrderedTagValues: OrderedTag's values, kept in order as series come
// (a sorted run and a tail sorted into it now and then), list as a sort of
// them would, but those a region's files hold, whatever the order the
// names come in and however the listings fall between the inserts; a
// listing is kept while no new name comes, even as series do.
func TestOrderedTagValues(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed))
	m := New()
	names := map[string]bool{}
	var except []string // the "files'" names: a sorted set, some ours, some not
	const series = 12_000
	for i := range series {
		name := fmt.Sprintf("metric_%05d", rng.IntN(6000)) // repeats: series of one name
		k, _ := row.EncodeSeries(nil, []row.Tag{{Name: OrderedTag, Value: name}, {Name: "i", Value: fmt.Sprint(i)}})
		m.Insert(1, []row.Entry{{Series: string(k), TS: int64(i), Seq: uint64(i + 1), Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}})
		names[name] = true
		if rng.IntN(500) != 0 && i != series-1 {
			continue
		}
		if rng.IntN(2) == 0 {
			except = nil
			for n := range 7000 {
				if rng.IntN(3) == 0 {
					except = append(except, fmt.Sprintf("metric_%05d", n))
				}
			}
		}
		var want []string
		for n := range names {
			if _, ok := slices.BinarySearch(except, n); !ok {
				want = append(want, n)
			}
		}
		slices.Sort(want)
		got := m.TagValues(OrderedTag, math.MinInt64, math.MaxInt64, except)
		if !slices.Equal(got, want) && len(got)+len(want) > 0 {
			t.Fatalf("seed %d, after %d series (%d names): %d values, want %d", seed, i+1, len(names), len(got), len(want))
		}
		// A new series of a name already there keeps the answer.
		k, _ = row.EncodeSeries(nil, []row.Tag{{Name: OrderedTag, Value: name}, {Name: "again", Value: fmt.Sprint(i)}})
		m.Insert(1, []row.Entry{{Series: string(k), TS: int64(i), Seq: uint64(i + 1), Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}})
		if again := m.TagValues(OrderedTag, math.MinInt64, math.MaxInt64, except); len(got) > 0 && !sameSlice(again, got) {
			t.Fatalf("seed %d: a series of a known name changed the answer's slice", seed)
		}
	}
	if len(m.named.run) < minTail || len(names) < 5000 {
		t.Fatalf("seed %d: %d names, run %d: the tail was never sorted in", seed, len(names), len(m.named.run))
	}
}

// Insert finds a series it met earlier in the call by its key's address
// (seriesMemo): keys at one address but of other lengths, and a buffer
// that holds another key in the next call, are other series.
func TestInsertKnowsKeysByAddressWithinACallOnly(t *testing.T) {
	key := func(h string) []byte {
		k, err := row.EncodeSeries(nil, []row.Tag{{Name: "host", Value: h}, {Name: "rack", Value: "r1"}})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	put := func(k string, ts int64, seq uint64) row.Entry {
		return row.Entry{Series: k, TS: ts, Seq: seq, Op: row.Put, Fields: []row.Value{row.FloatValue(float64(ts))}}
	}
	m := New()
	buf := key("a")
	a := unsafe.String(unsafe.SliceData(buf), len(buf))
	short := a[:len(a)-3]                                                                    // the same address, another key (raw: not a canonical encoding)
	m.Insert(1, []row.Entry{put(a, 1, 1), put(short, 1, 2), put(short, 2, 3), put(a, 2, 4)}) // a holds the slot at the end
	copy(buf, key("b"))                                                                      // the same address and length, another key in the next call
	m.Insert(2, []row.Entry{put(a, 3, 5), put(a, 4, 6)})

	want := map[string][]int64{string(key("a")): {1, 2}, string(key("a")[:len(buf)-3]): {1, 2}, string(key("b")): {3, 4}}
	if got := m.Stats().Series; got != len(want) {
		t.Fatalf("%d series, want %d", got, len(want))
	}
	got := map[string][]int64{}
	for _, e := range entries(m.Iter(all)) {
		got[e.Series] = append(got[e.Series], e.TS)
	}
	for k, ts := range want {
		if !slices.Equal(got[k], ts) {
			t.Errorf("series %q: timestamps %v, want %v", k, got[k], ts)
		}
	}
}

// ShareKeys gives a key at the address of an earlier one that one's string
// (addrmemo), and a shorter key at the same address a string of its own.
func TestShareKeysByAddress(t *testing.T) {
	buf := []byte("cpu,host=a")
	other := []byte("cpu,host=a") // equal bytes elsewhere
	keys := [][]byte{buf, buf[:3], other, buf, buf[:3]}
	es := make([]row.Entry, len(keys))
	ShareKeys(es, keys)
	for i, want := range []string{"cpu,host=a", "cpu", "cpu,host=a", "cpu,host=a", "cpu"} {
		if es[i].Series != want {
			t.Errorf("entry %d: %q, want %q", i, es[i].Series, want)
		}
	}
	for _, i := range []int{2, 3} {
		if unsafe.StringData(es[i].Series) != unsafe.StringData(es[0].Series) {
			t.Errorf("entry %d does not share the first entry's string", i)
		}
	}
	if len(es[1].Series) != 3 || len(es[4].Series) != 3 {
		t.Errorf("the shorter key at the same address: %q and %q", es[1].Series, es[4].Series)
	}
}
