// Package memtable holds a region's recent writes in memory, per series,
// until they are flushed to an SST.
//
// INVARIANT: a series' row slice is only ever appended to; no element is
// changed once written. A scan can therefore capture a prefix of it under
// the read lock and read it afterwards without a lock, while writes go on.
// Sorting (for series written out of order) works on copies. Likewise a
// series' key (its refs, or the key kept whole) never changes, and the
// symbols, ref chunks and whole keys are only appended to: a scan reads
// the keys of the series it captured without a lock too (keyView).
package memtable

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/postings"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/symtab"
)

// memRow is one entry, 24 bytes, its field values stored compactly: a
// Value is 32 bytes with a pointer the collector must scan, a payload here
// is 8 bytes in pointer-free memory, and the kinds are shared by every row
// of one shape. (Rows held as Values made the memtable three times the
// size of its data, and each write allocated them anew.) A row holds no
// pointer either: its kinds, and the payloads of a row of several, are
// found by index in the memtable's kind sets and slabs (rowData), so the
// collector does not scan the rows, the bulk of a node's heap, in every
// cycle.
//
// A put's payloads are its field values by ordinal (Value.Bits, or a
// string's index in the memtable's strings) and its kind set their kinds
// (row.Null: no value); a tombstone has no kind set and its end as its one
// payload. A row of one payload (a single field, a tombstone) holds it in
// val; a wider row's are in a slab, and val is where: slab<<32 | offset.
// (A Prometheus sample is one field: 24 bytes a sample, where a row of
// 32 bytes and a payload of 8 in a slab took 40.)
type memRow struct {
	ts  int64
	val uint64
	// seq is the entry's sequence less the memtable's first (minSeq): a
	// memtable holds less than 2^32 sequences (Insert refuses the entry
	// that would not fit).
	seq   uint32
	kinds uint32 // 1 + the index of the kind set; 0: a tombstone
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

// payload returns payload j of r, a row of n payloads.
func (d *rowData) payload(r *memRow, n, j int) uint64 {
	if n == 1 {
		return r.val
	}
	return d.slabs[r.val>>32][uint32(r.val)+uint32(j)]
}

// end is a tombstone's last deleted ts (0 for a put).
func (d *rowData) end(r *memRow) int64 {
	if r.kinds == 0 {
		return int64(r.val)
	}
	return 0
}

// field returns the value of ordinal j of put r, of kinds.
func (d *rowData) field(r *memRow, kinds []row.Kind, j int) row.Value {
	if j >= len(kinds) {
		return row.Value{}
	}
	switch k := kinds[j]; k {
	case row.Null:
		return row.Value{}
	case row.String:
		return row.StringValue(d.strs[d.payload(r, len(kinds), j)])
	case row.Bool:
		return row.BoolValue(d.payload(r, len(kinds), j) != 0)
	default:
		return row.NumberValue(k, d.payload(r, len(kinds), j))
	}
}

// series is one series of a memtable, 64 bytes, kept in the memtable's
// chunks by ordinal (not an allocation each). Its key is its refs
// (package symtab) in the memtable's ref chunks, or, for a key the
// symbols would not rebuild byte for byte, whole in the memtable's raw
// keys.
type series struct {
	rows []memRow
	// minTS and maxTS bound the rows' timestamps (a tombstone's end too).
	minTS, maxTS int64
	// The key: refs[ref][off:off+n], or raw[ref] if raw.
	ref    uint32
	off, n uint16
	sorted bool // rows are in (ts, seq desc) order
	raw    bool
	// frozen holds the rows sorted, of a frozen memtable's series that
	// came out of order: sorted once, by the first scan that needs them.
	frozen atomic.Pointer[[]memRow]
}

// seriesChunk is how many series a chunk of a memtable holds.
const seriesChunk = 1 << 10

// refChunk is the size of a chunk of refs; a key whose refs are longer is
// kept whole.
const refChunk = 64 << 10

// Memtable is one region's in-memory rows.
type Memtable struct {
	mu sync.RWMutex
	// chunks hold the series in the order they came (their ordinals);
	// a series' place never moves, so a scan may keep its address.
	chunks [][]series
	n      int32
	// byHash finds a series by its key's hash; more holds the series
	// whose key has the hash of an earlier one's (byHash has the first).
	// A key is compared with a series' symbols, not rebuilt.
	byHash map[uint64]int32
	more   map[uint64][]int32
	// The series' keys: their symbols, refs (in chunks of refChunk, the
	// last filled up to refUsed) and the keys kept whole.
	syms    symtab.Table
	refs    [][]byte
	refUsed int
	raw     []string
	refBuf  []byte    // scratch of Insert
	tags    []row.Tag // scratch of Insert
	// post holds the series' ordinals by tag, name and value symbols: a
	// filtered scan looks its series up rather than test every key (a
	// million keys a selector, else).
	post map[uint32]map[uint32]plist
	// sorted caches each tag's values, sorted, as of n series (a listing
	// of a steady source's 100,000 metric names sorted them again on every
	// request).
	sorted      map[string]sortedValues
	sortedMu    sync.Mutex
	bytes       int64
	keyBytes    int64 // of bytes, per series: keys, entries and rows reserved (Stats)
	entries     int64
	deletes     int64
	minSeq      uint64 // the first entry's: rows hold their sequence less it
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

// rowSize is a memRow's size: a row's memory but for a wider row's
// payloads (8 bytes each).
const rowSize = int64(unsafe.Sizeof(memRow{}))

// payloads returns n payloads cut from the last slab, and where they are.
func (m *Memtable) payloads(n int) (at uint64, vals []uint64) {
	if len(m.slabs) == 0 || len(m.slabs[len(m.slabs)-1])-m.used < n {
		m.slabs = append(m.slabs, make([]uint64, max(slabValues, n)))
		m.used = 0
	}
	i, off := len(m.slabs)-1, m.used
	m.used += n
	return uint64(i)<<32 | uint64(off), m.slabs[i][off : off+n : off+n]
}

// store stores fs as r's payloads and kinds, and returns the bytes its
// payloads take beyond the row and its strings.
func (m *Memtable) store(r *memRow, fs []row.Value) int64 {
	var one [1]uint64
	vals := one[:len(fs)&1] // a single payload: in the row
	var size int64
	if len(fs) > 1 {
		r.val, vals = m.payloads(len(fs))
		size = 8 * int64(len(fs))
	}
	same := m.last != 0 && len(m.kindSets[m.last-1]) == len(fs)
	for j := range fs {
		k := fs[j].Kind()
		if same && m.kindSets[m.last-1][j] != k {
			same = false
		}
		if k == row.String {
			vals[j] = uint64(len(m.strs))
			m.strs = append(m.strs, fs[j].Str())
			size += int64(16 + len(fs[j].Str()))
			continue
		}
		vals[j] = fs[j].Bits()
	}
	if len(fs) == 1 {
		r.val = vals[0]
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
	return size
}

// New returns an empty memtable.
func New() *Memtable {
	return &Memtable{byHash: map[uint64]int32{}, post: map[uint32]map[uint32]plist{}}
}

// Successor returns an empty memtable that expects the writes m had: a
// new series' rows are allocated at m's mean rows a series and an eighth
// more (capped), not grown by doubling from one (a fifth of the
// memtable's insert time, and the copies left for the collector). The
// eighth is for the series a row or two above the mean: a memtable is
// frozen at a size, not a row count, so with the mean itself about half
// of a steady source's series outgrew it and were copied into twice the
// memory. A successor interns its keys' symbols anew: a series costs it
// its refs, a few dozen bytes, and m's symbols go with m.
func (m *Memtable) Successor() *Memtable {
	st := m.Stats()
	n := New()
	if st.Series > 0 {
		mean := st.Entries / int64(st.Series)
		n.rowsHint = int(min(mean+mean/8+1, 4096))
	}
	return n
}

// at returns series o. The caller holds m.mu (or has it from a capture).
func (m *Memtable) at(o int32) *series { return &m.chunks[o/seriesChunk][o%seriesChunk] }

// hashKey hashes a series key (a variable: tests collide keys).
var hashKey = func(k string) uint64 { return maphash.String(hashSeed, k) }

var hashSeed = maphash.MakeSeed()

// find returns the ordinal of the series of key, hash h, or -1. The
// caller holds m.mu.
func (m *Memtable) find(key string, h uint64) int32 {
	o, ok := m.byHash[h]
	if !ok {
		return -1
	}
	if m.is(o, key) {
		return o
	}
	for _, o := range m.more[h] {
		if m.is(o, key) {
			return o
		}
	}
	return -1
}

// is reports whether key is series o's. The caller holds m.mu.
func (m *Memtable) is(o int32, key string) bool {
	s := m.at(o)
	if s.raw {
		return m.raw[s.ref] == key
	}
	return m.syms.View().Equal(m.refs[s.ref][s.off:int(s.off)+int(s.n)], key)
}

// seriesOverhead approximates the memory of a series beyond its rows,
// postings and refs: its place in a chunk and in byHash.
const seriesOverhead = 64 + 24

// rawOverhead approximates the memory of a key kept whole beyond its
// bytes: its string header and allocation.
const rawOverhead = 32

// postingBytes approximates a series' memory in the postings a tag: its
// ordinal's difference (plist), and a share of the value's entry and list
// growth.
const postingBytes = 2

// add adds the series of key, hash h, and returns its ordinal and the
// memory it takes. The caller holds m.mu.
func (m *Memtable) add(key string, h uint64) (int32, int64) {
	o := m.n
	m.n++
	if int(o)/seriesChunk == len(m.chunks) {
		m.chunks = append(m.chunks, make([]series, seriesChunk))
	}
	s := m.at(o)
	symBytes := m.syms.Size()
	size := int64(seriesOverhead)
	tags, err := row.DecodeSeries(m.tags[:0], key)
	s.raw = err != nil || !symtab.Canonical(tags, key)
	if !s.raw {
		m.refBuf = m.syms.AppendRefs(m.refBuf[:0], tags)
		s.raw = len(m.refBuf) >= refChunk
	}
	if s.raw {
		// Its postings list the tags before a fault, as a scan's match
		// (row.SeriesTag) finds them.
		s.ref = uint32(len(m.raw))
		m.raw = append(m.raw, strings.Clone(key))
		size += int64(len(key)) + rawOverhead
	} else {
		if len(m.refs) == 0 || refChunk-m.refUsed < len(m.refBuf) {
			m.refs = append(m.refs, make([]byte, refChunk))
			m.refUsed = 0
		}
		s.ref, s.off, s.n = uint32(len(m.refs)-1), uint16(m.refUsed), uint16(len(m.refBuf))
		m.refUsed += copy(m.refs[s.ref][m.refUsed:], m.refBuf)
		size += int64(len(m.refBuf))
	}
	if s.raw {
		for _, t := range tags {
			m.post1(m.syms.Intern(t.Name), m.syms.Intern(t.Value), o)
		}
	} else {
		for refs := m.refBuf; len(refs) > 0; {
			ns, w := binary.Uvarint(refs)
			vs, w2 := binary.Uvarint(refs[w:])
			refs = refs[w+w2:]
			m.post1(uint32(ns), uint32(vs), o)
		}
	}
	size += postingBytes*int64(len(tags)) + m.syms.Size() - symBytes
	clear(tags) // they are cut from key
	m.tags = tags[:0]
	if _, ok := m.byHash[h]; ok {
		if m.more == nil {
			m.more = map[uint64][]int32{}
		}
		m.more[h] = append(m.more[h], o)
	} else {
		m.byHash[h] = o
	}
	return o, size
}

// post1 adds series o to the postings of tag ns = vs.
func (m *Memtable) post1(ns, vs uint32, o int32) {
	vals := m.post[ns]
	if vals == nil {
		vals = map[uint32]plist{}
		m.post[ns] = vals
	}
	p := vals[vs]
	p.add(o)
	vals[vs] = p
}

// plist is a posting list: the ordinals of the series with one tag value,
// ascending, as uvarint differences, each from the one before (from 0
// for the first). Ordinals of one value lie close together, most a byte
// apart: 18 tags of a series took 98 bytes of heap as lists of int32 and
// take about 30 so.
type plist struct {
	last, n int32
	b       []byte
}

func (p *plist) add(o int32) {
	p.b = binary.AppendUvarint(p.b, uint64(o-p.last))
	p.last = o
	p.n++
}

// all iterates the ordinals.
func (p *plist) all(yield func(int32) bool) {
	o := int32(0)
	for b := p.b; len(b) > 0; {
		d, w := binary.Uvarint(b)
		b = b[w:]
		o += int32(d)
		if !yield(o) {
			return
		}
	}
}

// Fits reports whether the memtable can take entries up to sequence
// last (entries' sequences grow): its rows hold their sequence less the
// memtable's first in 32 bits. The caller freezes a memtable that cannot
// (with a flush, as for its size) and inserts into a successor; a
// memtable of a few gigabytes holds a few hundred million rows, so a
// flush is always far ahead of this bound.
func (m *Memtable) Fits(last uint64) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.entries == 0 || m.fits(last)
}

func (m *Memtable) fits(seq uint64) bool {
	return seq >= m.minSeq && seq-m.minSeq <= math.MaxUint32
}

// Insert adds durable entries from WAL segment seg. Entries' sequences must
// grow across calls, and fit (Fits): Insert panics on one that does not
// rather than store a wrong sequence.
func (m *Memtable) Insert(seg uint64, entries []row.Entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.frozen {
		panic("memtable: insert into a frozen memtable")
	}
	for i := range entries {
		e := &entries[i]
		if m.entries == 0 {
			m.minSeq, m.minTS, m.maxTS = e.Seq, e.TS, e.TS
		}
		if !m.fits(e.Seq) {
			panic(fmt.Sprintf("memtable: sequence %d does not fit a memtable from %d", e.Seq, m.minSeq))
		}
		hi := e.TS
		if e.Op == row.Delete {
			hi = e.End
		}
		h := hashKey(e.Series)
		o := m.find(e.Series, h)
		if o < 0 {
			var size int64
			o, size = m.add(e.Series, h)
			s := m.at(o)
			s.sorted, s.minTS, s.maxTS, s.rows = true, e.TS, hi, make([]memRow, 0, max(1, m.rowsHint))
			size += int64(cap(s.rows)) * rowSize // reserved
			m.bytes += size
			m.keyBytes += size
		}
		s := m.at(o)
		s.minTS, s.maxTS = min(s.minTS, e.TS), max(s.maxTS, hi)
		r := memRow{ts: e.TS, seq: uint32(e.Seq - m.minSeq)}
		size := int64(rowSize)
		if e.Op == row.Put {
			size += m.store(&r, e.Fields)
		} else {
			r.val = uint64(e.End)
		}
		// NB: a newer version of an existing ts must sort before it, so an
		// equal ts also breaks the order.
		if n := len(s.rows); n > 0 && r.ts <= s.rows[n-1].ts {
			s.sorted = false
		}
		// The rows' capacity is counted as it is allocated, as reserved
		// (per series: in keyBytes), and a row moves from the reserve.
		c0 := cap(s.rows)
		s.rows = append(s.rows, r)
		if c := cap(s.rows); c != c0 {
			m.bytes += int64(c-c0) * rowSize
			m.keyBytes += int64(c-c0) * rowSize
		}
		m.keyBytes -= rowSize
		m.bytes += size - rowSize
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
// string, one string for the keys of the batch that are equal (the WAL's
// compact encoding writes a key once for the entries that share its
// string). The strings are keys' bytes, not copies: they hold only while
// the caller leaves those bytes alone. The write path does until the WAL's
// Append returns, and Insert copies what it keeps (as symbols, or a raw
// key with strings.Clone); a WAL that keeps entries past its Append copies
// them (wal.Stream, an ambiguous segment).
func ShareKeys(entries []row.Entry, keys [][]byte) {
	seen, ok := shareMaps.Get()
	if !ok {
		seen = map[string]string{}
	}
	for i, k := range keys {
		key, ok := seen[string(k)]
		if !ok {
			key = unsafe.String(unsafe.SliceData(k), len(k))
			seen[key] = key
		}
		entries[i].Series = key
	}
	if len(seen) <= 1<<16 {
		clear(seen)
		shareMaps.Put(seen)
	}
}

// shareMaps are ShareKeys' maps, kept for the next write.
var shareMaps = freelist.New[map[string]string](8)

// Freeze makes the memtable read-only.
func (m *Memtable) Freeze() {
	m.mu.Lock()
	m.frozen = true
	m.mu.Unlock()
}

// Stats describe a memtable.
type Stats struct {
	Bytes, Entries int64
	// KeyBytes are, of Bytes, what the memtable holds per series, not
	// per row: the series' keys, entries and postings, and the rows
	// their row slices have room for but do not hold yet (a successor
	// allocates a series' rows at once: Successor).
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
	return Stats{Bytes: m.bytes, KeyBytes: m.keyBytes, Entries: m.entries, Deletes: m.deletes, Series: int(m.n), MinSeq: m.minSeq, MaxSeq: m.maxSeq,
		MinTS: m.minTS, MaxTS: m.maxTS, LastSegment: m.lastSegment}
}

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

// keyView is a memtable's keys as of a moment (each part is only appended
// to, and a series' key never changes), read without m.mu.
type keyView struct {
	syms symtab.View
	refs [][]byte
	raw  []string
}

// keyView returns the keys as of now. The caller holds m.mu.
func (m *Memtable) keyView() keyView { return keyView{m.syms.View(), m.refs, m.raw} }

func (kv *keyView) refsOf(s *series) []byte { return kv.refs[s.ref][s.off : int(s.off)+int(s.n)] }

// key returns s's key, rebuilt in keys (a key kept whole as it is).
func (kv *keyView) key(keys *symtab.KeyArena, s *series) string {
	if s.raw {
		return kv.raw[s.ref]
	}
	return keys.Key(kv.syms, kv.refsOf(s))
}

// probe returns s's key rebuilt in buf (valid until buf is used again),
// and buf.
func (kv *keyView) probe(s *series, buf []byte) (string, []byte) {
	if s.raw {
		return kv.raw[s.ref], buf
	}
	buf = kv.syms.AppendKey(buf[:0], kv.refsOf(s))
	return unsafe.String(unsafe.SliceData(buf), len(buf)), buf
}

// keep returns k, s's key from probe, to keep: copied into keys, which
// it sizes for up to left keys of its length.
func (kv *keyView) keep(keys *symtab.KeyArena, s *series, k string, left int) string {
	if s.raw {
		return k
	}
	return keys.Copy(k, left*len(k))
}

// compare orders series a and b by key, bytewise: by their refs, without
// rebuilding a key (but for a key kept whole).
func (kv *keyView) compare(a, b *series) int {
	if !a.raw && !b.raw {
		return kv.syms.Compare(kv.refsOf(a), kv.refsOf(b))
	}
	var keys symtab.KeyArena
	return strings.Compare(kv.key(&keys, a), kv.key(&keys, b))
}

type sortedValues struct {
	series int32
	vals   []string // sorted
	syms   []uint32 // vals[i]'s symbol
}

// TagValues returns the values of tag name in the series with an entry in
// [start, end), sorted (read only: the memtable may keep it). While every
// series with the tag has an entry in the range (the usual case: a range
// that ends now, over sources that keep sending), it is the same slice
// from one call to the next until a series is added, which lets a
// region recognize, and keep, what it merged it into.
func (m *Memtable) TagValues(name string, start, end int64) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	ns, ok := m.syms.Lookup(name)
	if !ok {
		return nil
	}
	c := m.sortedOf(name, ns)
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
// symbols: sorted once for as long as no series is added. The caller
// holds m.mu.
func (m *Memtable) sortedOf(name string, ns uint32) sortedValues {
	m.sortedMu.Lock()
	defer m.sortedMu.Unlock()
	if c, ok := m.sorted[name]; ok && c.series == m.n {
		return c
	}
	type value struct {
		s   string
		sym uint32
	}
	post := m.post[ns]
	vs := make([]value, 0, len(post))
	for v := range post {
		vs = append(vs, value{m.syms.Sym(v), v})
	}
	slices.SortFunc(vs, func(a, b value) int { return strings.Compare(a.s, b.s) })
	c := sortedValues{series: m.n, vals: make([]string, len(vs)), syms: make([]uint32, len(vs))}
	for i, v := range vs {
		c.vals[i], c.syms[i] = v.s, v.sym
	}
	if m.sorted == nil {
		m.sorted = map[string]sortedValues{}
	}
	m.sorted[name] = c
	return c
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

type capture struct {
	s      *series
	key    string // rebuilt when the filter or the iteration needs it
	rows   []memRow
	sorted bool
}

// Iter returns the entries that match f, in stream order, as of now.
func (m *Memtable) Iter(f Filter) row.Iterator {
	m.mu.RLock()
	var keys symtab.KeyArena
	var buf []byte
	frozen := m.frozen
	kv := m.keyView()
	ords, n := m.candidates(&f)
	caps := make([]capture, 0, n)
	if f.Series != nil && ords == nil {
		caps = make([]capture, 0, min(n, 1024)) // a filter of its own
	}
	for i := range n {
		s := m.at(ord(ords, i))
		c := capture{s: s, rows: s.rows, sorted: s.sorted}
		if f.Series != nil {
			var k string
			if k, buf = kv.probe(s, buf); !f.Series(k) {
				continue
			}
			c.key = kv.keep(&keys, s, k, n-i)
		}
		caps = append(caps, c)
	}
	data := m.rowData // appended to only: holds what the rows captured refer to
	base := m.minSeq
	m.mu.RUnlock()
	if f.Series != nil {
		slices.SortFunc(caps, func(a, b capture) int { return strings.Compare(a.key, b.key) })
	} else {
		slices.SortFunc(caps, func(a, b capture) int { return kv.compare(a.s, b.s) })
	}
	return &iter{caps: caps, f: f, frozen: frozen, idx: -1, data: data, kv: kv, keyed: f.Series != nil, keys: keys, base: base}
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
		if p := c.s.frozen.Load(); p != nil {
			return *p
		}
		rows := sortedCopy(c.rows)
		if c.s.frozen.CompareAndSwap(nil, &rows) {
			return rows
		}
		return *c.s.frozen.Load()
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
	data   rowData // the memtable's as of Iter
	kv     keyView // likewise
	keyed  bool    // the captures have their keys
	keys   symtab.KeyArena
	base   uint64         // the memtable's first sequence
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
			it.e = row.Entry{Series: it.caps[it.idx].key, TS: r.ts, End: end, Seq: it.base + uint64(r.seq), Op: op}
			if op == row.Put {
				it.e.Fields = it.fields(r)
			}
			return true
		}
		if !it.keyed && it.idx >= 0 {
			// Read past: the key goes with the reader's last entry. (Kept,
			// a flush of a million series held every key it had rebuilt,
			// 300 MB, until its last row.)
			it.caps[it.idx].key = ""
		}
		it.idx++
		if it.idx >= len(it.caps) {
			return false
		}
		c := &it.caps[it.idx]
		if !it.keyed {
			c.key = it.kv.key(&it.keys, c.s)
		}
		it.rows, it.pos = c.sortedRows(it.frozen), 0
		it.touch()
	}
}

// touch loads the first payload of each of the series' wider rows (up to
// 512) before they are read. The rows' payloads lie in arrival order, a
// cache miss each; the loads of this short loop overlap, where those of
// the reading (a row at a time through a merge and the SST writer) waited
// one after another. A flush spent about 6% of a write's CPU in those
// misses. (A row of one payload holds it.)
func (it *iter) touch() {
	var sum uint64
	for i := range it.rows[:min(len(it.rows), 512)] {
		r := &it.rows[i]
		if r.kinds == 0 || len(it.data.kindSets[r.kinds-1]) < 2 {
			continue
		}
		if s := it.data.slabs[r.val>>32]; int(uint32(r.val)) < len(s) {
			sum += s[uint32(r.val)]
		}
	}
	it.touched += sum // kept, so the loads are not optimised away
}

// fields returns r's values for the filter's fields, in memory cut from a
// slab (or, with ReuseFields, in one of two buffers by turns).
func (it *iter) fields(r *memRow) []row.Value {
	kinds := it.data.kindSets[r.kinds-1]
	n := len(kinds)
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
			out[j] = it.data.field(r, kinds, j)
		}
		return out
	}
	for i, ord := range it.f.Fields {
		out[i] = it.data.field(r, kinds, ord)
	}
	return out
}

func (it *iter) Entry() *row.Entry { return &it.e }
func (it *iter) Err() error        { return nil }
func (it *iter) Close() error      { it.caps, it.rows = nil, nil; return nil }
