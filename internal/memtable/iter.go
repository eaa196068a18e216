package memtable

import (
	"cmp"
	"slices"
	"strings"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/symtab"
)

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
