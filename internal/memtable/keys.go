package memtable

import (
	"encoding/binary"
	"strings"
	"unsafe"

	"github.com/stratadb/strata/internal/addrmemo"
	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/symtab"
)

// at returns series o. The caller holds m.mu (or has it from a capture).
func (m *Memtable) at(o int32) *series { return &m.chunks[o/seriesChunk][o%seriesChunk] }

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
	if p.n == 0 && ns == m.orderedSym {
		m.named.add(vs, m.syms.Sym)
	}
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

// seriesMemos are the memos of Insert (the series met in the call) and
// ShareKeys (the keys met in the batch), by their keys' addresses
// (internal/addrmemo): hashing each row's key and comparing it with a
// series' symbols was a third of an insert's time over 400 TSBS hosts
// (BenchmarkInsertTSBS), whose rows of a series share one key string.
// As many are kept as of the write path's other buffers: ShareKeys runs
// for every region's write.
var seriesMemos = freelist.New[*addrmemo.Memo](16)
