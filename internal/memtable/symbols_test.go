package memtable

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/testseed"
)

// randomKeys returns n distinct keys: mostly canonical (row.EncodeSeries
// of tags from a small vocabulary, so symbols repeat, some of them long
// enough for two-byte lengths), and keys the symbols would not rebuild:
// garbage, truncated keys, and canonical keys with a length written as a
// longer uvarint (the same tags, another key), plus keys with tags out of
// order or an empty value, which decode and rebuild as they are.
func randomKeys(rng *rand.Rand, n int) []string {
	word := func() string {
		if rng.IntN(10) == 0 {
			return strings.Repeat(string(rune('a'+rng.IntN(3))), 120+rng.IntN(20)) // lengths of one and two bytes
		}
		return fmt.Sprint([]string{"a", "b", "host", "h", "", "x"}[rng.IntN(6)], rng.IntN(8))
	}
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		var tags []row.Tag
		for range rng.IntN(5) {
			tags = append(tags, row.Tag{Name: word(), Value: word()})
		}
		slices.SortFunc(tags, func(a, b row.Tag) int { return strings.Compare(a.Name, b.Name) })
		tags = slices.CompactFunc(tags, func(a, b row.Tag) bool { return a.Name == b.Name })
		k, err := row.EncodeSeries(nil, tags)
		if err != nil {
			panic(err)
		}
		switch rng.IntN(8) {
		case 0: // garbage
			k = make([]byte, rng.IntN(6))
			for i := range k {
				k[i] = byte(rng.IntN(256))
			}
		case 1: // truncated
			if len(k) > 0 {
				k = k[:rng.IntN(len(k))]
			}
		case 2: // a length as a longer uvarint (0x80|n, 0): both keys
			if len(k) > 0 && k[0] < 0x80 && !seen[string(k)] {
				seen[string(k)] = true
				out = append(out, string(k))
				k = append([]byte{k[0] | 0x80, 0}, k[1:]...)
			}
		case 3: // tags out of order, and an empty value
			k = append(append([]byte{1, 'z', 0}, k...), 1, 'a', 1, 'v')
		}
		if !seen[string(k)] {
			seen[string(k)] = true
			out = append(out, string(k))
		}
	}
	return out
}

// checkKeys inserts entries of random keys (some through ShareKeys, some
// as a WAL replay would, their keys cut from one string) and checks that
// each key is one series, found again, listed, and iterated in bytewise
// key order with its entries.
func checkKeys(t *testing.T, rng *rand.Rand, m *Memtable, keys []string, seq *uint64) {
	t.Helper()
	want := map[string][]uint64{} // key -> seqs
	for range 20 {
		batch := make([]row.Entry, 1+rng.IntN(200))
		bkeys := make([][]byte, len(batch))
		for i := range batch {
			k := keys[rng.IntN(len(keys))]
			*seq++
			batch[i] = row.Entry{Series: k, TS: rng.Int64N(100), Seq: *seq, Op: row.Put, Fields: []row.Value{row.IntValue(int64(*seq))}}
			bkeys[i] = []byte(k)
			want[k] = append(want[k], *seq)
		}
		switch rng.IntN(3) {
		case 0:
			ShareKeys(batch, bkeys)
		case 1: // cut from one string
			all := strings.Join(func() []string {
				var ks []string
				for _, e := range batch {
					ks = append(ks, e.Series)
				}
				return ks
			}(), "")
			for i := range batch {
				n := len(batch[i].Series)
				batch[i].Series, all = all[:n], all[n:]
			}
		}
		m.Insert(1, batch)
	}
	if st := m.Stats(); st.Series != len(want) {
		t.Fatalf("%d series, want %d", st.Series, len(want))
	}
	for k := range want {
		if m.seriesOf(k) == nil {
			t.Fatalf("key %q not found", k)
		}
	}
	for _, k := range keys {
		if _, ok := want[k]; !ok && m.seriesOf(k) != nil {
			t.Fatalf("key %q found, never inserted", k)
		}
	}
	sorted := slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	})
	for _, f := range []Filter{all, {Start: math.MinInt64, End: math.MaxInt64, Series: func(string) bool { return true }}} {
		var order []string
		got := map[string][]uint64{}
		for _, e := range entries(m.Iter(f)) {
			if len(order) == 0 || order[len(order)-1] != e.Series {
				order = append(order, e.Series)
			}
			got[e.Series] = append(got[e.Series], e.Seq)
			if e.Fields[0].Int() != int64(e.Seq) {
				t.Fatalf("%q: entry of seq %d has %v", e.Series, e.Seq, e.Fields[0])
			}
		}
		if !slices.Equal(order, sorted) {
			t.Fatalf("series iterated in the order %q, want %q (bytewise)", order, sorted)
		}
		for k, seqs := range want {
			g := got[k]
			slices.Sort(g)
			if !slices.Equal(g, seqs) {
				t.Fatalf("%q: seqs %v, want %v", k, g, seqs)
			}
		}
	}
	listed := m.Series(all)
	slices.Sort(listed)
	if !slices.Equal(listed, sorted) {
		t.Fatalf("Series lists %q, want %q", listed, sorted)
	}
}

// Random keys, canonical and not, are each one series, found, listed and
// iterated in bytewise order; with a hash that collides all the time too.
func TestRandomKeys(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	for _, tiny := range []bool{false, true} {
		if tiny {
			h := hashKey
			hashKey = func(k string) uint64 { return uint64(len(k)) >> 6 } // keys of like lengths collide
			t.Cleanup(func() { hashKey = h })
		}
		for range 20 {
			var seq uint64
			checkKeys(t, rng, New(), randomKeys(rng, 1+rng.IntN(300)), &seq)
		}
	}
}

// A successor takes the keys its predecessor had as its own: found,
// iterated and listed alike, and it holds none of the predecessor's
// memory.
func TestSuccessorHasThePredecessorsKeys(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	keys := randomKeys(rng, 200)
	var seq uint64
	m := New()
	checkKeys(t, rng, m, keys, &seq)
	m.Freeze()
	n := m.Successor()
	checkKeys(t, rng, n, append(keys, randomKeys(rng, 50)...), &seq)
	mine := map[*byte]bool{}
	for _, k := range m.heldStrings() {
		if len(k) > 0 {
			mine[unsafe.StringData(k)] = true
		}
	}
	for _, k := range n.heldStrings() {
		if len(k) > 0 && mine[unsafe.StringData(k)] {
			t.Fatalf("the successor holds the predecessor's %q", k)
		}
	}
	if got := len(entries(m.Iter(all))); int64(got) != m.Stats().Entries {
		t.Fatalf("the predecessor iterates %d entries, has %d", got, m.Stats().Entries)
	}
}

// A memtable holds less than 2^32 sequences from its first: Fits says
// which it can take, a row keeps its sequence whole up to the bound, and
// Insert refuses one past it rather than wrap.
func TestSeqDeltaLimit(t *testing.T) {
	m := New()
	if !m.Fits(math.MaxUint64) || !m.Fits(0) {
		t.Fatal("an empty memtable does not fit every sequence")
	}
	const first = 1 << 40
	put := func(seq uint64) {
		m.Insert(1, []row.Entry{{Series: "k", TS: int64(seq % 7), Seq: seq, Op: row.Put, Fields: []row.Value{row.IntValue(1)}}})
	}
	put(first)
	for seq, want := range map[uint64]bool{first - 1: false, first: true, first + math.MaxUint32: true, first + math.MaxUint32 + 1: false, math.MaxUint64: false} {
		if m.Fits(seq) != want {
			t.Errorf("Fits(first%+d) = %v", int64(seq-first), !want)
		}
	}
	put(first + math.MaxUint32)
	got := entries(m.Iter(all))
	if len(got) != 2 || got[0].Seq+got[1].Seq != 2*first+math.MaxUint32 || max(got[0].Seq, got[1].Seq) != first+math.MaxUint32 {
		t.Fatalf("entries %v", got)
	}
	if st := m.Stats(); st.MinSeq != first || st.MaxSeq != first+math.MaxUint32 {
		t.Fatalf("stats %+v", st)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a sequence past the bound was inserted")
		}
		if n := m.Stats().Entries; n != 2 {
			t.Fatalf("%d entries after the refusal", n)
		}
	}()
	put(first + math.MaxUint32 + 1)
}

// Scans, listings and look-ups read keys and rows while inserts add
// series and symbols (run with -race).
func TestScanWhileInserting(t *testing.T) {
	m := New()
	key := func(i int) string {
		k, _ := row.EncodeSeries(nil, []row.Tag{{Name: "__name__", Value: fmt.Sprint("m", i%50)}, {Name: "id", Value: fmt.Sprint(i)}})
		return string(k)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		seq := uint64(0)
		for b := range 200 {
			batch := make([]row.Entry, 50)
			keys := make([][]byte, len(batch))
			for i := range batch {
				seq++
				keys[i] = []byte(key(b*20 + i))
				batch[i] = row.Entry{TS: int64(b), Seq: seq, Op: row.Put, Fields: []row.Value{row.FloatValue(1)}}
			}
			ShareKeys(batch, keys)
			m.Insert(1, batch)
		}
	}()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		last := ""
		for _, e := range entries(m.Iter(Filter{Start: math.MinInt64, End: math.MaxInt64, Tags: []row.Tag{{Name: "__name__", Value: "m7"}},
			Series: func(k string) bool { return row.SeriesTag(k, "__name__") == "m7" }})) {
			if e.Series < last || row.SeriesTag(e.Series, "__name__") != "m7" {
				t.Fatalf("%q after %q", e.Series, last)
			}
			last = e.Series
		}
		n := 0
		for _, e := range entries(m.Iter(all)) {
			if _, err := row.DecodeSeries(nil, e.Series); err != nil {
				t.Fatalf("key %q: %v", e.Series, err)
			}
			n++
		}
		m.Series(all)
		m.TagValues("__name__", math.MinInt64, math.MaxInt64, nil)
		m.TagNames(0, 10)
	}
	if n := len(entries(m.Iter(all))); n != 200*50 {
		t.Fatalf("%d entries", n)
	}
}
