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
//
// The files, by job: memtable.go the rows and their insert, keys.go the
// series (found by hash, keys as symbols) and their postings, lookup.go
// the filters and the series, tag values and tag names they select,
// iter.go the iteration in stream order.
package memtable

import (
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/stratadb/strata/internal/addrmemo"
	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/freelist"
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
	sorted   map[string]sortedValues
	sortedMu sync.Mutex
	// named keeps OrderedTag's values in order as they come (its symbol
	// is orderedSym): its listing sorts none of them again.
	named       ordered
	orderedSym  uint32
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
	m := &Memtable{byHash: map[uint64]int32{}, post: map[uint32]map[uint32]plist{}}
	m.orderedSym = m.syms.Intern(OrderedTag)
	return m
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

// hashKey hashes a series key (a variable: tests collide keys).
var hashKey = func(k string) uint64 { return maphash.String(hashSeed, k) }

var hashSeed = maphash.MakeSeed()

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
	memo, ok := seriesMemos.Get()
	if !ok {
		memo = new(addrmemo.Memo)
	}
	defer seriesMemos.Put(memo)
	memo.Begin()
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
		slot, v, ok := memo.Find(unsafe.StringData(e.Series), len(e.Series))
		o := int32(v)
		if !ok {
			h := hashKey(e.Series)
			if o = m.find(e.Series, h); o < 0 {
				var size int64
				o, size = m.add(e.Series, h)
				s := m.at(o)
				s.sorted, s.minTS, s.maxTS, s.rows = true, e.TS, hi, make([]memRow, 0, max(1, m.rowsHint))
				size += int64(cap(s.rows)) * rowSize // reserved
				m.bytes += size
				m.keyBytes += size
			}
			memo.Note(slot, unsafe.StringData(e.Series), len(e.Series), uint32(o))
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
//
// A key at the address of one before is that one's (internal/addrmemo:
// the parser's keys of a series share their bytes); the others are looked
// up by their bytes.
func ShareKeys(entries []row.Entry, keys [][]byte) {
	seen, ok := shareMaps.Get()
	if !ok {
		seen = map[string]string{}
	}
	memo, ok := seriesMemos.Get()
	if !ok {
		memo = new(addrmemo.Memo)
	}
	memo.Begin()
	for i, k := range keys {
		p := unsafe.SliceData(k)
		slot, first, ok := memo.Find(p, len(k))
		if ok {
			entries[i].Series = entries[first].Series
			continue
		}
		key, ok := seen[string(k)]
		if !ok {
			key = unsafe.String(p, len(k))
			seen[key] = key
		}
		entries[i].Series = key
		memo.Note(slot, p, len(k), uint32(i))
	}
	seriesMemos.Put(memo)
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
