package memtable

import (
	"math/bits"
	"slices"
	"strings"
	"unsafe"

	"github.com/stratadb/strata/internal/postings"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/symtab"
)

// Filter selects what an iterator returns.
type Filter struct {
	// Series, if set, selects series by key. The key is rebuilt from its
	// symbols for the call, in memory the next call reuses: Series must
	// not keep it (a copy it may).
	Series func(key string) bool
	// Tags and In, if set, are the filters Series applies (as a scan
	// request states them): the memtable's postings narrow the series
	// Series is asked about to those that can pass them.
	Tags []row.Tag
	In   []row.TagIn
	// Start and End bound put timestamps: Start <= ts < End. Tombstones are
	// returned when their range overlaps.
	Start, End int64
	// Fields maps output positions to field ordinals (nil: all fields, by
	// ordinal).
	Fields []int
	// ReuseFields lets the iterator reuse the memory of the Fields it
	// returned: an entry's Fields stay valid until the second Next after
	// it (two buffers take turns, so a merge may hold one entry while its
	// input moves to the next). For readers that copy what they keep
	// (a flush's SST writer).
	ReuseFields bool
}

// Series lists the keys of the series f selects that have an entry in
// f's time range (a tombstone's when its range overlaps), unsorted.
func (m *Memtable) Series(f Filter) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	kv := m.keyView()
	var keys symtab.KeyArena
	var out []string
	var buf []byte
	ords, n := m.candidates(&f)
	for i := range n {
		s := m.at(ord(ords, i))
		if s.maxTS < f.Start || s.minTS >= f.End {
			continue
		}
		if f.Series == nil {
			out = append(out, kv.key(&keys, s))
			continue
		}
		var k string
		if k, buf = kv.probe(s, buf); f.Series(k) {
			out = append(out, kv.keep(&keys, s, k, n-i))
		}
	}
	return out
}

// candidates returns the series that may pass f's tag filters: the n
// ordinals ords lists, or, with ords nil, every series (the first n).
// The caller holds m.mu.
func (m *Memtable) candidates(f *Filter) (ords []int32, n int) {
	ords, all := postings.Narrow(f.Tags, f.In, m.lookup)
	if all {
		return nil, int(m.n)
	}
	return ords, len(ords)
}

// ord returns candidate i of ords (see candidates).
func ord(ords []int32, i int) int32 {
	if ords == nil {
		return int32(i)
	}
	return ords[i]
}

// lookup returns the ordinals of the series with tag name = value. The
// caller holds m.mu.
func (m *Memtable) lookup(name, value string) []int32 {
	ns, ok := m.syms.Lookup(name)
	if !ok {
		return nil
	}
	vs, ok := m.syms.Lookup(value)
	if !ok {
		return nil
	}
	p, ok := m.post[ns][vs]
	if !ok {
		return nil
	}
	return slices.AppendSeq(make([]int32, 0, p.n), p.all)
}

type sortedValues struct {
	series int32    // the memtable's series when sorted (OrderedTag: its values)
	except []string // what the values were taken out of (TagValues)
	vals   []string // sorted
	syms   []uint32 // vals[i]'s symbol
}

// TagValues returns the values of tag name in the series with an entry in
// [start, end), sorted, but those that except holds (sorted; a region
// gives its files' answer to the same question, which mostly names the
// same values: a steady source's metric names are in every file). The
// answer is read only: the memtable may keep it. While every series with
// the tag has an entry in the range (the usual case: a range that ends
// now, over sources that keep sending), it is the same slice from one call
// to the next, with the same except, until a series is added (of
// OrderedTag, until a value is), which lets a region recognize, and keep,
// what it merged it into.
func (m *Memtable) TagValues(name string, start, end int64, except []string) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	ns, ok := m.syms.Lookup(name)
	if !ok {
		return nil
	}
	c := m.sortedOf(name, ns, except)
	if m.within(start, end) {
		return c.vals
	}
	post := m.post[ns]
	var out []string
	missed := false
	for i, v := range c.syms {
		ords := post[v]
		switch in := m.anyIn(&ords, start, end); {
		case in && missed:
			out = append(out, c.vals[i])
		case !in && !missed:
			missed = true
			out = append(make([]string, 0, len(c.vals)-1), c.vals[:i]...)
		}
	}
	if !missed {
		return c.vals
	}
	return out
}

// sortedOf returns the values of tag ns (named name) sorted, with their
// symbols, but those in except: worked out once for as long as no series
// is added (of OrderedTag, no value) and except is the same. The caller
// holds m.mu.
//
// Sorting 100,000 metric names was most of the first
// /api/v1/label/__name__/values after series came (BenchmarkTagValuesCold):
// OrderedTag's values are kept in order as they come, and one pass over
// them and except finds those except lacks; of another tag, when except
// is long, its values are looked up here instead, and only those it lacks
// are sorted, none where it holds them all.
func (m *Memtable) sortedOf(name string, ns uint32, except []string) sortedValues {
	m.sortedMu.Lock()
	defer m.sortedMu.Unlock()
	c, ok := m.sorted[name]
	if ns == m.orderedSym {
		// Kept in order: the same values while no new one came, however
		// many series did.
		if ok && c.series == int32(m.named.len()) && sameSlice(c.except, except) {
			return c
		}
		c = without(m.named.sorted(m.syms.Sym), except, m.syms.Sym)
		c.series = int32(m.named.len())
	} else {
		if ok && c.series == m.n && sameSlice(c.except, except) {
			return c
		}
		c = m.sortedAnew(ns, except)
		c.series = m.n
	}
	c.except = except
	if m.sorted == nil {
		m.sorted = map[string]sortedValues{}
	}
	m.sorted[name] = c
	return c
}

// sortedAnew sorts the values of tag ns, but those in except. The caller
// holds m.mu and m.sortedMu.
func (m *Memtable) sortedAnew(ns uint32, except []string) sortedValues {
	post := m.post[ns]
	if n := len(post); len(except) > 0 && 3*len(except) < n*bits.Len(uint(n)) {
		// A look-up of each of except's costs less than sorting ours
		// (some log2 n comparisons each, a look-up costing about three).
		if held, all := m.heldBy(post, except); !all {
			return m.sortValues(post, held)
		}
		return sortedValues{}
	}
	c := m.sortValues(post, nil)
	c.remove(except)
	return c
}

// sameSlice reports whether a and b are the same slice (not only equal).
func sameSlice(a, b []string) bool {
	return len(a) == len(b) && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// heldBy returns the symbols of post's values that except holds, or all
// if it holds every one (mostly so: then with no set built).
func (m *Memtable) heldBy(post map[uint32]plist, except []string) (held map[uint32]struct{}, all bool) {
	ours := func(s string) (uint32, bool) {
		v, ok := m.syms.Lookup(s)
		if ok {
			_, ok = post[v]
		}
		return v, ok
	}
	n := 0
	for _, s := range except {
		if _, ok := ours(s); ok {
			n++
		}
	}
	if n == len(post) {
		return nil, true
	}
	held = make(map[uint32]struct{}, n)
	for _, s := range except {
		if v, ok := ours(s); ok {
			held[v] = struct{}{}
		}
	}
	return held, false
}

// sortValues sorts the values of post, but those in skip (by symbol).
func (m *Memtable) sortValues(post map[uint32]plist, skip map[uint32]struct{}) sortedValues {
	type value struct {
		s   string
		sym uint32
	}
	vs := make([]value, 0, len(post)-len(skip))
	for v := range post {
		if _, ok := skip[v]; !ok {
			vs = append(vs, value{m.syms.Sym(v), v})
		}
	}
	slices.SortFunc(vs, func(a, b value) int { return strings.Compare(a.s, b.s) })
	c := sortedValues{vals: make([]string, len(vs)), syms: make([]uint32, len(vs))}
	for i, v := range vs {
		c.vals[i], c.syms[i] = v.s, v.sym
	}
	return c
}

// remove drops the values that except (sorted) holds.
func (c *sortedValues) remove(except []string) {
	if len(except) == 0 {
		return
	}
	k := 0
	for i, v := range c.vals {
		if _, ok := slices.BinarySearch(except, v); !ok {
			c.vals[k], c.syms[k] = v, c.syms[i]
			k++
		}
	}
	c.vals, c.syms = slices.Clip(c.vals[:k]), slices.Clip(c.syms[:k])
}

// TagValuesWhere returns the values of tag name, sorted, of the series
// with tag where and an entry in [start, end): a logical table's values in
// the physical table that holds many (its series carry its table tag).
func (m *Memtable) TagValuesWhere(name string, where row.Tag, start, end int64) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	ns, ok := m.syms.Lookup(name)
	if !ok {
		return nil
	}
	in := m.lookup(where.Name, where.Value)
	if len(in) == 0 {
		return nil
	}
	all := m.within(start, end)
	var out []string
	for v, ords := range m.post[ns] {
		for o := range ords.all {
			if _, ok := slices.BinarySearch(in, o); ok {
				if s := m.at(o); all || s.maxTS >= start && s.minTS < end {
					out = append(out, m.syms.Sym(v))
					break
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TagNames returns the tag names of the series with an entry in
// [start, end), sorted.
func (m *Memtable) TagNames(start, end int64) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	all := m.within(start, end)
	var out []string
	for ns, vals := range m.post {
		for _, ords := range vals {
			if all || m.anyIn(&ords, start, end) {
				out = append(out, m.syms.Sym(ns))
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// within reports whether every entry is in [start, end): then every
// series is, and none needs a look. The caller holds m.mu.
func (m *Memtable) within(start, end int64) bool {
	return m.entries > 0 && m.minTS >= start && m.maxTS < end
}

// anyIn reports whether one of the series ords has an entry in
// [start, end). The caller holds m.mu.
func (m *Memtable) anyIn(ords *plist, start, end int64) bool {
	for i := range ords.all {
		if s := m.at(i); s.maxTS >= start && s.minTS < end {
			return true
		}
	}
	return false
}
