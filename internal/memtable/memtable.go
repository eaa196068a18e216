// Package memtable holds a region's recent writes in memory, per series,
// until they are flushed to an SST.
//
// INVARIANT: a series' row slice is only ever appended to; no element is
// changed once written. A scan can therefore capture a prefix of it under
// the read lock and read it afterwards without a lock, while writes go on.
// Sorting (for series written out of order) works on copies.
package memtable

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/postings"
	"github.com/stratadb/strata/internal/row"
)

// memRow is one entry, its field values stored compactly: a Value is 32
// bytes with a pointer the collector must scan, a payload here is 8
// bytes in pointer-free memory, and the kinds are shared by every row of
// one shape. (Rows held as Values made the memtable three times the size
// of its data, and each write allocated them anew.) A row holds no
// pointer either: its payloads and kinds are found by index in the
// memtable's slabs and kind sets (rowData), so the collector does not
// scan the rows, the bulk of a node's heap, in every cycle.
//
// A put's payloads are its field values by ordinal (Value.Bits, or a
// string's index in the memtable's strings) and its kind set their kinds
// (row.Null: no value); a tombstone has no kind set and its end as its one
// payload.
type memRow struct {
	ts        int64
	seq       uint64
	slab, off uint32 // the payloads start at slabs[slab][off]
	kinds     uint32 // 1 + the index of the kind set; 0: a tombstone
}

func (r *memRow) op() row.Op {
	if r.kinds == 0 {
		return row.Delete
	}
	return row.Put
}

// rowData is what rows' payloads, kinds and strings are read from: a
// memtable's, as of a moment (each is only appended to, and a row only
// refers to what was there when it was inserted).
type rowData struct {
	slabs    [][]uint64
	kindSets [][]row.Kind
	strs     []string
}

// vals returns r's payloads.
func (d *rowData) vals(r *memRow) []uint64 {
	n := 1
	if r.kinds != 0 {
		n = len(d.kindSets[r.kinds-1])
	}
	return d.slabs[r.slab][r.off : int(r.off)+n : int(r.off)+n]
}

// end is a tombstone's last deleted ts (0 for a put).
func (d *rowData) end(r *memRow) int64 {
	if r.kinds == 0 {
		return int64(d.slabs[r.slab][r.off])
	}
	return 0
}

// field returns the value of ordinal j of a put's payloads and kinds,
// its strings in strs.
func field(vals []uint64, kinds []row.Kind, j int, strs []string) row.Value {
	if j >= len(vals) {
		return row.Value{}
	}
	switch k := kinds[j]; k {
	case row.Null:
		return row.Value{}
	case row.String:
		return row.StringValue(strs[vals[j]])
	case row.Bool:
		return row.BoolValue(vals[j] != 0)
	default:
		return row.NumberValue(k, vals[j])
	}
}

type series struct {
	key  string
	rows []memRow
	// minTS and maxTS bound the rows' timestamps (a tombstone's end too).
	minTS, maxTS int64
	sorted       bool // rows are in (ts, seq desc) order

	sortOnce sync.Once // frozen memtables sort each series once
	frozen   []memRow
}

// Memtable is one region's in-memory rows.
type Memtable struct {
	mu     sync.RWMutex
	series map[string]*series
	// byAddr finds a series by the address of its key's bytes: the
	// entries of a write share the memtable's keys (ShareKeys), and
	// hashing an address is cheaper than hashing a key of a hundred bytes
	// or more.
	byAddr map[*byte]*series
	// list holds the series in the order they came (their ordinals), and
	// post their ordinals by tag: a filtered scan looks its series up
	// rather than test every key (a million keys a selector, else).
	list []*series
	post postings.Index
	// sorted caches each tag's values, sorted, as of len(list) series
	// (a listing of a steady source's 100,000 metric names sorted them
	// again on every request).
	sorted   map[string]sortedValues
	sortedMu sync.Mutex
	bytes    int64
	keyBytes int64 // of bytes, the series' keys and entries
	// prev is the frozen memtable this one succeeded, until its flush is
	// done (ForgetPredecessor): a series it had takes its key from there
	// instead of a copy of its own, so a steady source's keys are
	// allocated once, not once a memtable. Frozen, prev's series map is
	// only read, and a key never changes.
	prev        *Memtable
	entries     int64
	deletes     int64
	minSeq      uint64
	maxSeq      uint64
	minTS       int64
	maxTS       int64
	lastSegment uint64
	frozen      bool

	// Which fields every put so far has a value for: the first
	// putWidth ordinals, but those in nulls.
	puts     int64
	putWidth int
	nulls    []bool
	// Each field's decimal scan over every put's float value (row data is
	// hot here, not when a flush asks), and whether one held another kind.
	scans []decimal.Scan
	other []bool

	rowsHint int // capacity of a new series' rows (see Successor)

	// Rows' payloads are cut from the last of the slabs (used of it so
	// far); their kinds are interned in kindSets (1 + index by the kinds
	// as bytes in kinds; last is the last row's).
	rowData
	used  int
	kinds map[string]uint32
	last  uint32
}

const slabValues = 1 << 15

// rowSize is a memRow's size, its payloads aside.
const rowSize = int64(unsafe.Sizeof(memRow{}))

// payloads returns n payloads cut from the last slab, and where they are.
func (m *Memtable) payloads(n int) (slab, off uint32, vals []uint64) {
	if len(m.slabs) == 0 || len(m.slabs[len(m.slabs)-1])-m.used < n {
		m.slabs = append(m.slabs, make([]uint64, max(slabValues, n)))
		m.used = 0
	}
	i, at := len(m.slabs)-1, m.used
	m.used += n
	return uint32(i), uint32(at), m.slabs[i][at : at+n : at+n]
}

// store stores fs as r's payloads and kinds, and returns the bytes its
// strings take.
func (m *Memtable) store(r *memRow, fs []row.Value) int64 {
	var vals []uint64
	r.slab, r.off, vals = m.payloads(len(fs))
	var strBytes int64
	same := m.last != 0 && len(m.kindSets[m.last-1]) == len(fs)
	for j := range fs {
		k := fs[j].Kind()
		if same && m.kindSets[m.last-1][j] != k {
			same = false
		}
		if k == row.String {
			vals[j] = uint64(len(m.strs))
			m.strs = append(m.strs, fs[j].Str())
			strBytes += int64(16 + len(fs[j].Str()))
			continue
		}
		vals[j] = fs[j].Bits()
	}
	if !same {
		key := make([]byte, len(fs)) // a Kind is a byte
		for j := range fs {
			key[j] = byte(fs[j].Kind())
		}
		if m.last = m.kinds[string(key)]; m.last == 0 {
			ks := make([]row.Kind, len(fs))
			for j := range fs {
				ks[j] = fs[j].Kind()
			}
			if m.kinds == nil {
				m.kinds = map[string]uint32{}
			}
			m.kindSets = append(m.kindSets, ks)
			m.last = uint32(len(m.kindSets))
			m.kinds[string(key)] = m.last
		}
	}
	r.kinds = m.last
	return strBytes
}

// New returns an empty memtable.
func New() *Memtable { return &Memtable{series: map[string]*series{}, byAddr: map[*byte]*series{}} }

// Successor returns an empty memtable that expects the writes m had: a
// new series' rows are allocated at m's mean rows a series and an eighth
// more (capped), not grown by doubling from one (a fifth of the
// memtable's insert time, and the copies left for the collector). The
// eighth is for the series a row or two above the mean: a memtable is
// frozen at a size, not a row count, so with the mean itself about half
// of a steady source's series outgrew it and were copied into twice the
// memory.
func (m *Memtable) Successor() *Memtable {
	st := m.Stats()
	n := New()
	if st.Series > 0 {
		mean := st.Entries / int64(st.Series)
		n.rowsHint = int(min(mean+mean/8+1, 4096))
	}
	m.mu.Lock()
	if m.frozen {
		n.prev = m
		m.prev = nil // a chain would keep every flushed memtable's rows
	}
	m.mu.Unlock()
	return n
}

// ForgetPredecessor drops m's reference to the memtable it succeeded if
// that is flushed, once it is flushed: the keys m took from it stay, its
// rows go.
func (m *Memtable) ForgetPredecessor(flushed *Memtable) {
	m.mu.Lock()
	if m.prev == flushed {
		m.prev = nil
	}
	m.mu.Unlock()
}

// prevKey returns the key of series k in the predecessor, if it had it.
// The caller holds m.mu.
func (m *Memtable) prevKey(k string) (string, bool) {
	if m.prev == nil {
		return "", false
	}
	if s, ok := m.prev.series[k]; ok {
		return s.key, true
	}
	return "", false
}

// seriesOverhead approximates the memory of a series entry beyond its rows
// and postings: the entry, its places in series, byAddr and list.
const seriesOverhead = 160

// postingBytes approximates a series' memory in the postings a tag: its
// ordinal, and a share of the value's entry and list growth.
const postingBytes = 12

// Insert adds durable entries from WAL segment seg. Entries' sequences must
// grow across calls.
func (m *Memtable) Insert(seg uint64, entries []row.Entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.frozen {
		panic("memtable: insert into a frozen memtable")
	}
	for i := range entries {
		e := &entries[i]
		s := m.byAddr[unsafe.StringData(e.Series)]
		if s == nil || len(s.key) != len(e.Series) {
			s = m.series[e.Series]
		}
		hi := e.TS
		if e.Op == row.Delete {
			hi = e.End
		}
		if s == nil {
			// A copy of the key, unless the predecessor has one: a
			// replayed entry's is cut from its WAL segment's one
			// string, which the memtable would otherwise keep whole.
			key, ok := m.prevKey(e.Series)
			if !ok {
				key = strings.Clone(e.Series)
			}
			s = &series{key: key, sorted: true, minTS: e.TS, maxTS: hi, rows: make([]memRow, 0, max(1, m.rowsHint))}
			m.series[s.key] = s
			m.byAddr[unsafe.StringData(s.key)] = s
			tags := m.post.Add(int32(len(m.list)), s.key)
			m.list = append(m.list, s)
			size := int64(len(e.Series) + seriesOverhead + postingBytes*tags)
			m.bytes += size
			m.keyBytes += size
		}
		s.minTS, s.maxTS = min(s.minTS, e.TS), max(s.maxTS, hi)
		r := memRow{ts: e.TS, seq: e.Seq}
		size := int64(rowSize)
		if e.Op == row.Put {
			size += 8*int64(len(e.Fields)) + m.store(&r, e.Fields)
		} else {
			var vals []uint64
			r.slab, r.off, vals = m.payloads(1)
			vals[0] = uint64(e.End)
			size += 8
		}
		// NB: a newer version of an existing ts must sort before it, so an
		// equal ts also breaks the order.
		if n := len(s.rows); n > 0 && r.ts <= s.rows[n-1].ts {
			s.sorted = false
		}
		s.rows = append(s.rows, r)
		m.bytes += size
		if m.entries == 0 {
			m.minSeq, m.minTS, m.maxTS = e.Seq, e.TS, e.TS
		}
		m.entries++
		m.maxSeq = max(m.maxSeq, e.Seq)
		m.minTS = min(m.minTS, e.TS)
		m.maxTS = max(m.maxTS, e.TS)
		if e.Op == row.Delete {
			m.maxTS = max(m.maxTS, e.End)
			m.deletes++
		} else {
			m.notePut(e.Fields)
		}
	}
	m.lastSegment = max(m.lastSegment, seg)
}

// notePut records which of a put's fields are null, and scans its floats
// for Decimals.
func (m *Memtable) notePut(fs []row.Value) {
	if m.puts == 0 || len(fs) < m.putWidth {
		m.putWidth = len(fs)
	}
	m.puts++
	if len(m.nulls) < len(fs) {
		m.nulls = append(m.nulls, make([]bool, len(fs)-len(m.nulls))...)
		m.scans = append(m.scans, make([]decimal.Scan, len(fs)-len(m.scans))...)
		m.other = append(m.other, make([]bool, len(fs)-len(m.other))...)
	}
	for j := range fs {
		switch fs[j].Kind() {
		case row.Float:
			m.scans[j].Add(fs[j].Float())
		case row.Null:
			m.nulls[j] = true
		default:
			m.other[j] = true
		}
	}
}

// NullFree reports, for each of the first width field ordinals, whether
// every put in the memtable has a value for it: what an SST writer may be
// promised (sst.WriteOptions.NoNulls).
func (m *Memtable) NullFree(width int) []bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	free := make([]bool, width)
	for j := range min(width, m.putWidth) {
		free[j] = !m.nulls[j]
	}
	return free
}

// Decimals returns, for each of the first width field ordinals, the least
// decimal scale at which each of its values has a mantissa (package
// decimal), or decimal.None if one has none or is not a float: what an SST
// writer may write the field as (sst.WriteOptions.Decimals).
func (m *Memtable) Decimals(width int) []int8 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]int8, width)
	for j := range min(width, len(m.scans)) {
		out[j] = m.scans[j].Scale()
		if m.other[j] {
			out[j] = decimal.None
		}
	}
	return out
}

// ShareKeys sets each entry's Series to the series key keys[i] as a
// string: the memtable's copy where it holds the series, so the write
// shares it rather than allocate its own (and Insert finds it by its
// address); otherwise a new string, one for each key the batch repeats.
// One lock for the batch: a read lock a row cost as much as the lookups.
func (m *Memtable) ShareKeys(entries []row.Entry, keys [][]byte) {
	var fresh map[string]string
	m.mu.RLock()
	defer m.mu.RUnlock()
	for i, k := range keys {
		if s, ok := m.series[string(k)]; ok {
			entries[i].Series = s.key
			continue
		}
		if key, ok := m.prevKey(string(k)); ok {
			entries[i].Series = key
			continue
		}
		if fresh == nil {
			fresh = map[string]string{}
		}
		key, ok := fresh[string(k)]
		if !ok {
			key = string(k)
			fresh[key] = key
		}
		entries[i].Series = key
	}
}

// Freeze makes the memtable read-only.
func (m *Memtable) Freeze() {
	m.mu.Lock()
	m.frozen = true
	m.mu.Unlock()
}

// Stats describe a memtable.
type Stats struct {
	Bytes, Entries int64
	// KeyBytes are, of Bytes, the series' keys and entries: what the
	// memtable holds per series, not per row.
	KeyBytes       int64
	Deletes        int64 // tombstones among the entries
	Series         int
	MinSeq, MaxSeq uint64
	MinTS, MaxTS   int64 // covers tombstone ranges
	LastSegment    uint64
}

// Stats returns the memtable's size and bounds.
func (m *Memtable) Stats() Stats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return Stats{Bytes: m.bytes, KeyBytes: m.keyBytes, Entries: m.entries, Deletes: m.deletes, Series: len(m.series), MinSeq: m.minSeq, MaxSeq: m.maxSeq,
		MinTS: m.minTS, MaxTS: m.maxTS, LastSegment: m.lastSegment}
}

// Filter selects what an iterator returns.
type Filter struct {
	// Series, if set, selects series by key.
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
	var out []string
	for _, s := range m.candidates(&f) {
		if s.maxTS >= f.Start && s.minTS < f.End && (f.Series == nil || f.Series(s.key)) {
			out = append(out, s.key)
		}
	}
	return out
}

// candidates returns the series that may pass f's tag filters: those its
// postings list, or every series (the memtable's own list: read it only).
// The caller holds m.mu.
func (m *Memtable) candidates(f *Filter) []*series {
	ords, all := m.post.Candidates(f.Tags, f.In)
	if all {
		return m.list
	}
	out := make([]*series, len(ords))
	for i, o := range ords {
		out[i] = m.list[o]
	}
	return out
}

type sortedValues struct {
	series int
	vals   []string
}

// TagValues returns the values of tag name in the series with an entry in
// [start, end), sorted (read only: the memtable may keep it).
func (m *Memtable) TagValues(name string, start, end int64) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.within(start, end) {
		var out []string
		for v, ords := range m.post.Values(name) {
			if m.anyIn(ords, start, end) {
				out = append(out, v)
			}
		}
		slices.Sort(out)
		return out
	}
	// Every series is in range: the values of all of them, sorted once
	// for as long as no series is added.
	m.sortedMu.Lock()
	defer m.sortedMu.Unlock()
	if c, ok := m.sorted[name]; ok && c.series == len(m.list) {
		return c.vals
	}
	vals := slices.Sorted(maps.Keys(m.post.Values(name)))
	if m.sorted == nil {
		m.sorted = map[string]sortedValues{}
	}
	m.sorted[name] = sortedValues{series: len(m.list), vals: vals}
	return vals
}

// TagNames returns the tag names of the series with an entry in
// [start, end), sorted.
func (m *Memtable) TagNames(start, end int64) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	all := m.within(start, end)
	var out []string
	for name := range m.post.Names() {
		for _, ords := range m.post.Values(name) {
			if all || m.anyIn(ords, start, end) {
				out = append(out, name)
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
func (m *Memtable) anyIn(ords []int32, start, end int64) bool {
	for _, i := range ords {
		if s := m.list[i]; s.maxTS >= start && s.minTS < end {
			return true
		}
	}
	return false
}

type capture struct {
	key    string
	s      *series
	rows   []memRow
	sorted bool
}

// Iter returns the entries that match f, in stream order, as of now.
func (m *Memtable) Iter(f Filter) row.Iterator {
	m.mu.RLock()
	var caps []capture
	frozen := m.frozen
	for _, s := range m.candidates(&f) {
		if f.Series == nil || f.Series(s.key) {
			caps = append(caps, capture{key: s.key, s: s, rows: s.rows, sorted: s.sorted})
		}
	}
	data := m.rowData // appended to only: holds what the rows captured refer to
	m.mu.RUnlock()
	slices.SortFunc(caps, func(a, b capture) int { return cmp.Compare(a.key, b.key) })
	return &iter{caps: caps, f: f, frozen: frozen, idx: -1, data: data}
}

func cmpRow(a, b memRow) int {
	if c := cmp.Compare(a.ts, b.ts); c != 0 {
		return c
	}
	return cmp.Compare(b.seq, a.seq)
}

// sortedRows returns c's rows in (ts, seq desc) order.
func (c *capture) sortedRows(frozen bool) []memRow {
	if c.sorted {
		return c.rows
	}
	if frozen {
		c.s.sortOnce.Do(func() { c.s.frozen = sortedCopy(c.s.rows) })
		return c.s.frozen
	}
	return sortedCopy(c.rows)
}

// sortedCopy is rows in (ts, seq desc) order, in a copy allocated once.
func sortedCopy(rows []memRow) []memRow {
	out := slices.Clone(rows)
	slices.SortStableFunc(out, cmpRow)
	return out
}

type iter struct {
	caps   []capture
	f      Filter
	frozen bool
	idx    int
	rows   []memRow
	pos    int
	e      row.Entry
	buf    []row.Value
	data   rowData        // the memtable's as of Iter
	bufs   [2][]row.Value // ReuseFields: the buffers that take turns
	turn   int
	// touched sums the payloads touch loaded (nothing reads it)
	touched uint64
}

func (it *iter) Next() bool {
	for {
		for it.pos < len(it.rows) {
			r := &it.rows[it.pos]
			it.pos++
			op, end := r.op(), it.data.end(r)
			if op == row.Put && (r.ts < it.f.Start || r.ts >= it.f.End) {
				continue
			}
			if op == row.Delete && (end < it.f.Start || r.ts >= it.f.End) {
				continue
			}
			it.e = row.Entry{Series: it.caps[it.idx].key, TS: r.ts, End: end, Seq: r.seq, Op: op}
			if op == row.Put {
				it.e.Fields = it.fields(r)
			}
			return true
		}
		it.idx++
		if it.idx >= len(it.caps) {
			return false
		}
		it.rows, it.pos = it.caps[it.idx].sortedRows(it.frozen), 0
		it.touch()
	}
}

// touch loads the first payload of each of the series' rows (up to 512)
// before they are read. The rows' payloads lie in arrival order, a cache
// miss each; the loads of this short loop overlap, where those of the
// reading (a row at a time through a merge and the SST writer) waited one
// after another. A flush spent about 6% of a write's CPU in those misses.
func (it *iter) touch() {
	var sum uint64
	for i := range it.rows[:min(len(it.rows), 512)] {
		r := &it.rows[i]
		if s := it.data.slabs[r.slab]; int(r.off) < len(s) {
			sum += s[r.off]
		}
	}
	it.touched += sum // kept, so the loads are not optimised away
}

// fields returns r's values for the filter's fields, in memory cut from a
// slab (or, with ReuseFields, in one of two buffers by turns).
func (it *iter) fields(r *memRow) []row.Value {
	vals, kinds := it.data.vals(r), it.data.kindSets[r.kinds-1]
	n := len(vals)
	if it.f.Fields != nil {
		n = len(it.f.Fields)
	}
	var out []row.Value
	if it.f.ReuseFields {
		it.turn = 1 - it.turn
		if cap(it.bufs[it.turn]) < n {
			it.bufs[it.turn] = make([]row.Value, n)
		}
		out = it.bufs[it.turn][:n:n]
	} else {
		if len(it.buf) < n {
			it.buf = make([]row.Value, 256*max(1, n))
		}
		out = it.buf[:n:n]
		it.buf = it.buf[n:]
	}
	if it.f.Fields == nil {
		for j := range out {
			out[j] = field(vals, kinds, j, it.data.strs)
		}
		return out
	}
	for i, ord := range it.f.Fields {
		out[i] = field(vals, kinds, ord, it.data.strs)
	}
	return out
}

func (it *iter) Entry() *row.Entry { return &it.e }
func (it *iter) Err() error        { return nil }
func (it *iter) Close() error      { it.caps, it.rows = nil, nil; return nil }
