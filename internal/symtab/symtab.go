// Package symtab keeps series keys as symbols: each distinct tag name and
// value once, in a Table, and each key as its refs, the uvarint symbol ids
// of its tags' names and values in order. A key of a hundred bytes or more
// (a Prometheus series' 18 labels: 420) is then a few dozen bytes of refs,
// and the symbols repeat across keys. A region keeps a file's series index
// this way, and a memtable its series.
//
// Only a key whose refs rebuild it byte for byte is kept as refs: one that
// row.DecodeSeries reads and whose lengths are minimal uvarints
// (Canonical; every key row.EncodeSeries writes). Its owner keeps other
// keys whole.
package symtab

import (
	"encoding/binary"
	"strings"
	"unsafe"

	"github.com/stratadb/strata/internal/row"
)

// Table interns symbols. Its symbols are copied into chunks it allocates
// (not one allocation a symbol), and a symbol's id and string never
// change: a View taken under its owner's lock can be read after the lock
// is released while the table grows. Not safe for concurrent use.
type Table struct {
	syms  []string
	ids   map[string]uint32
	chunk []byte // where new symbols are copied
	bytes int64  // the symbols' bytes
}

const (
	chunkSize = 64 << 10
	// SymOverhead approximates the memory of a symbol beyond its bytes:
	// its string header and its entry in the table's map.
	SymOverhead = 16 + 40
)

// Intern returns the id of s, interning a copy of s (which may be cut
// from a buffer that changes) if it is new.
func (t *Table) Intern(s string) uint32 {
	if id, ok := t.ids[s]; ok {
		return id
	}
	if t.ids == nil {
		t.ids = map[string]uint32{}
	}
	c := t.copy(s)
	id := uint32(len(t.syms))
	t.syms = append(t.syms, c)
	t.ids[c] = id
	t.bytes += int64(len(c))
	return id
}

// copy copies s into the current chunk (a long s into memory of its own).
func (t *Table) copy(s string) string {
	if len(s) > chunkSize/16 {
		return strings.Clone(s)
	}
	if cap(t.chunk)-len(t.chunk) < len(s) {
		// Chunks double up to chunkSize: a small table takes little.
		t.chunk = make([]byte, 0, max(len(s), 256, min(chunkSize, 2*cap(t.chunk))))
	}
	start := len(t.chunk)
	t.chunk = append(t.chunk, s...)
	b := t.chunk[start:]
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// Lookup returns the id of s, if it is interned.
func (t *Table) Lookup(s string) (uint32, bool) {
	id, ok := t.ids[s]
	return id, ok
}

// Sym returns symbol id.
func (t *Table) Sym(id uint32) string { return t.syms[id] }

// Len is the number of symbols.
func (t *Table) Len() int { return len(t.syms) }

// Size approximates the table's memory.
func (t *Table) Size() int64 { return t.bytes + SymOverhead*int64(len(t.syms)) }

// View returns the table as of now, to read while it grows.
func (t *Table) View() View { return View{t.syms} }

// AppendRefs appends the refs of tags (decoded from a key: see Canonical)
// to dst, interning their names and values.
func (t *Table) AppendRefs(dst []byte, tags []row.Tag) []byte {
	for _, tg := range tags {
		dst = binary.AppendUvarint(dst, uint64(t.Intern(tg.Name)))
		dst = binary.AppendUvarint(dst, uint64(t.Intern(tg.Value)))
	}
	return dst
}

// Canonical reports whether tags, which row.DecodeSeries read from key
// without an error, rebuild key byte for byte: whether key's lengths are
// minimal uvarints.
func Canonical(tags []row.Tag, key string) bool {
	n := 0
	for _, t := range tags {
		n += UvarintLen(len(t.Name)) + len(t.Name) + UvarintLen(len(t.Value)) + len(t.Value)
	}
	return n == len(key)
}

// UvarintLen is the length of n as a uvarint.
func UvarintLen(n int) int {
	w := 1
	for ; n >= 0x80; n >>= 7 {
		w++
	}
	return w
}

// View is a Table as of a moment: the symbols it had.
type View struct{ syms []string }

// Sym returns symbol id.
func (v View) Sym(id uint32) string { return v.syms[id] }

// AppendKey appends the key refs encode to dst.
func (v View) AppendKey(dst []byte, refs []byte) []byte {
	for len(refs) > 0 {
		id, w := binary.Uvarint(refs)
		refs = refs[w:]
		s := v.syms[id]
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	return dst
}

// Equal reports whether key is the key refs encode, without rebuilding
// it.
func (v View) Equal(refs []byte, key string) bool {
	for len(refs) > 0 {
		id, w := binary.Uvarint(refs)
		refs = refs[w:]
		s := v.syms[id]
		var n uint64
		var kw int
		if len(key) > 0 && key[0] < 0x80 { // most lengths
			n, kw = uint64(key[0]), 1
		} else {
			n, kw = binary.Uvarint(unsafe.Slice(unsafe.StringData(key), min(len(key), binary.MaxVarintLen64)))
			// A longer encoding of the length is another key.
			if kw <= 0 || kw != UvarintLen(len(s)) {
				return false
			}
		}
		if n != uint64(len(s)) || len(key)-kw < len(s) || key[kw:kw+len(s)] != s {
			return false
		}
		key = key[kw+len(s):]
	}
	return len(key) == 0
}

// Compare compares the keys that refs a and b encode, bytewise, without
// rebuilding them. A key is its tags' names and values in turn, each
// uvarint(len) bytes: no such segment is a prefix of another, so the
// first segments that differ order the keys as their encodings do, and
// equal symbols are equal segments.
func (v View) Compare(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		x, w := binary.Uvarint(a)
		y, w2 := binary.Uvarint(b)
		a, b = a[w:], b[w2:]
		if x != y {
			return compareSegments(v.syms[x], v.syms[y])
		}
	}
	switch {
	case len(a) > 0:
		return 1
	case len(b) > 0:
		return -1
	}
	return 0
}

// compareSegments compares the encodings of s and t as key segments.
func compareSegments(s, t string) int {
	if len(s) == len(t) {
		return strings.Compare(s, t)
	}
	var bs, bt [binary.MaxVarintLen64]byte
	ls := binary.PutUvarint(bs[:], uint64(len(s)))
	lt := binary.PutUvarint(bt[:], uint64(len(t)))
	// Different lengths differ in their encodings, within the shorter.
	return strings.Compare(string(bs[:ls]), string(bt[:lt]))
}

// KeyArena rebuilds keys into shared chunks: a listing of many keys
// allocates a chunk at a time, not a key. The strings it returns stay
// valid: bytes once written in a chunk are never written again (a key that
// outgrows its chunk moves the chunk's bytes to a new one, and the old
// chunk, with the strings cut from it, is left as it was).
type KeyArena struct{ buf []byte }

const keyChunk = 64 << 10

// Start returns the buffer to append the next key to; End cuts it.
// Chunks double from 4 KiB to 64 KiB: a scan of a few series takes
// little.
func (a *KeyArena) Start() []byte {
	if cap(a.buf)-len(a.buf) < 1<<10 {
		a.buf = make([]byte, 0, min(keyChunk, max(4<<10, 2*cap(a.buf))))
	}
	return a.buf
}

// End returns the key appended to buf, which Start returned.
func (a *KeyArena) End(buf []byte) string {
	start := len(a.buf)
	a.buf = buf
	k := buf[start:]
	return unsafe.String(unsafe.SliceData(k), len(k))
}

// Copy returns a copy of k in the arena. A new chunk, if k needs one,
// has room for hint bytes (up to 64 KiB): a caller that knows how many
// keys it will copy sizes the chunk for them.
func (a *KeyArena) Copy(k string, hint int) string {
	if cap(a.buf)-len(a.buf) < len(k) {
		a.buf = make([]byte, 0, max(len(k), min(keyChunk, hint)))
	}
	return a.End(append(a.buf, k...))
}

// Key returns the key refs encode, rebuilt in the arena.
func (a *KeyArena) Key(v View, refs []byte) string { return a.End(v.AppendKey(a.Start(), refs)) }
