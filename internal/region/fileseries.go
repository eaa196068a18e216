package region

import (
	"encoding/binary"
	"iter"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/stratadb/strata/internal/postings"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/sst"
)

// fileSeries is a file's series index as a region keeps it in memory: each
// tag name and value once (a symbol), each series as the symbols of its
// tags, and each series' first row. Keys are rebuilt from the symbols for
// the series a scan or listing selects. The postings of a tag name (its
// values' series) are built from the symbols on the first filter or
// look-up that names it, so a file of a million series kept for filters
// on __name__ costs about 60 bytes a series, where its keys as strings,
// with postings by string for every tag, took 950 MB: more than a region's
// cache holds, so every query decoded the file again.
type fileSeries struct {
	n     int
	syms  []string // the distinct tag names and values
	symOf map[string]uint32
	names map[uint32]struct{} // the symbols that are tag names
	refs  []byte              // each series' tags: uvarint (name, value) symbol pairs
	offs  []uint32            // series i's are refs[offs[i]:offs[i+1]]
	// raw holds whole the keys that symbols would not rebuild byte for
	// byte (one that does not decode, or not canonically: none that
	// row.EncodeSeries wrote); their postings list the tags before the
	// fault, as a scan's match (row.SeriesTag) finds them.
	raw    map[int32]string
	starts []int64 // starts[i]: series i's first row; starts[n]: the rows (nil without row counts)

	mu     sync.Mutex
	byName map[uint32]map[uint32][]int32 // name -> value -> ordinals, ascending; built on first use
	sorted map[uint32][]string           // name -> its values, sorted; built with its postings

	size  atomic.Int64 // approximate memory
	cache atomic.Pointer[seriesCache]
	id    string // the file's, in cache
}

// fileSeriesBuilder adds a file's keys, in order, to a fileSeries.
type fileSeriesBuilder struct {
	fs   *fileSeries
	tags []row.Tag
	size int64
}

func newFileSeriesBuilder(id string, rows bool) *fileSeriesBuilder {
	fs := &fileSeries{id: id, offs: []uint32{0}, symOf: map[string]uint32{}, names: map[uint32]struct{}{}}
	if rows {
		fs.starts = []int64{0}
	}
	return &fileSeriesBuilder{fs: fs}
}

// sym returns the symbol of s, interning s (which may be cut from a buffer
// that changes) if it is new.
func (b *fileSeriesBuilder) sym(s string) uint32 {
	if id, ok := b.fs.symOf[s]; ok {
		return id
	}
	c := strings.Clone(s)
	id := uint32(len(b.fs.syms))
	b.fs.syms = append(b.fs.syms, c)
	b.fs.symOf[c] = id
	b.size += int64(len(c)) + 16 + 40 // the string, its header and map entry
	return id
}

// add adds the next key (valid only during the call) and its rows (ignored
// without row counts).
func (b *fileSeriesBuilder) add(key []byte, rows int64) {
	fs := b.fs
	id := int32(fs.n)
	fs.n++
	k := unsafe.String(unsafe.SliceData(key), len(key)) // transient: nothing keeps it
	var err error
	b.tags, err = row.DecodeSeries(b.tags[:0], k)
	encoded := 0
	for _, t := range b.tags {
		encoded += uvarintLen(len(t.Name)) + len(t.Name) + uvarintLen(len(t.Value)) + len(t.Value)
		ns, vs := b.sym(t.Name), b.sym(t.Value)
		fs.names[ns] = struct{}{}
		if err == nil {
			fs.refs = binary.AppendUvarint(fs.refs, uint64(ns))
			fs.refs = binary.AppendUvarint(fs.refs, uint64(vs))
		}
	}
	if err != nil || encoded != len(key) {
		if fs.raw == nil {
			fs.raw = map[int32]string{}
		}
		fs.raw[id] = string(key)
		fs.refs = fs.refs[:fs.offs[len(fs.offs)-1]]
		b.size += int64(len(key)) + 64
	}
	fs.offs = append(fs.offs, uint32(len(fs.refs)))
	if fs.starts != nil {
		fs.starts = append(fs.starts, fs.starts[len(fs.starts)-1]+rows)
	}
}

// done returns the series, their arrays cut to size and their memory
// counted.
func (b *fileSeriesBuilder) done() *fileSeries {
	fs := b.fs
	fs.refs, fs.offs, fs.starts = slices.Clone(fs.refs), slices.Clone(fs.offs), slices.Clone(fs.starts)
	fs.size.Store(b.size + int64(len(fs.refs)) + 4*int64(len(fs.offs)) + 8*int64(len(fs.starts)) + 24*int64(len(fs.names)) + 256)
	return fs
}

func uvarintLen(n int) int {
	w := 1
	for ; n >= 0x80; n >>= 7 {
		w++
	}
	return w
}

// decodeFileSeries decodes file id's series index object.
func decodeFileSeries(id string, data []byte) (*fileSeries, error) {
	b := newFileSeriesBuilder(id, true)
	if err := sst.ReadSeriesIndex(data, b.add); err != nil {
		return nil, err
	}
	return b.done(), nil
}

// appendKey appends the key of series i to dst.
func (fs *fileSeries) appendKey(dst []byte, i int) []byte {
	if k, ok := fs.raw[int32(i)]; ok {
		return append(dst, k...)
	}
	refs := fs.refs[fs.offs[i]:fs.offs[i+1]]
	for len(refs) > 0 {
		s, w := binary.Uvarint(refs)
		refs = refs[w:]
		dst = binary.AppendUvarint(dst, uint64(len(fs.syms[s])))
		dst = append(dst, fs.syms[s]...)
	}
	return dst
}

// lookup returns the ordinals of the series with tag name = value.
func (fs *fileSeries) lookup(name, value string) []int32 {
	ns, ok := fs.symOf[name]
	if !ok {
		return nil
	}
	vs, ok := fs.symOf[value]
	if !ok {
		return nil
	}
	return fs.postings(ns)[vs]
}

// values returns the values of tag name, sorted (read only).
func (fs *fileSeries) values(name string) []string {
	ns, ok := fs.symOf[name]
	if !ok {
		return nil
	}
	fs.postings(ns)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.sorted[ns]
}

// tagNames iterates the file's tag names.
func (fs *fileSeries) tagNames() iter.Seq[string] {
	return func(yield func(string) bool) {
		for ns := range fs.names {
			if !yield(fs.syms[ns]) {
				return
			}
		}
	}
}

// postings returns the postings of tag name ns (read only), building them
// on first use.
func (fs *fileSeries) postings(ns uint32) map[uint32][]int32 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if p, ok := fs.byName[ns]; ok {
		return p
	}
	p := map[uint32][]int32{}
	var size int64
	for i := range fs.n {
		refs := fs.refs[fs.offs[i]:fs.offs[i+1]]
		for len(refs) > 0 {
			n, w := binary.Uvarint(refs)
			v, w2 := binary.Uvarint(refs[w:])
			refs = refs[w+w2:]
			if uint32(n) == ns {
				p[uint32(v)] = append(p[uint32(v)], int32(i))
				break
			}
		}
	}
	if len(fs.raw) > 0 {
		var tags []row.Tag
		for i, k := range fs.raw {
			tags, _ = row.DecodeSeries(tags[:0], k)
			for _, t := range tags {
				if fs.symOf[t.Name] == ns {
					v := fs.symOf[t.Value]
					p[v] = append(p[v], i)
					slices.Sort(p[v])
					break
				}
			}
		}
	}
	vals := make([]string, 0, len(p))
	for v, l := range p {
		size += 4*int64(cap(l)) + 48 + 16
		vals = append(vals, fs.syms[v])
	}
	slices.Sort(vals)
	if fs.byName == nil {
		fs.byName, fs.sorted = map[uint32]map[uint32][]int32{}, map[uint32][]string{}
	}
	fs.byName[ns], fs.sorted[ns] = p, vals
	fs.grow(size + 64)
	return p
}

// grow counts delta more bytes of the file's memory, in its cache too.
func (fs *fileSeries) grow(delta int64) {
	fs.size.Add(delta)
	if c := fs.cache.Load(); c != nil {
		c.grew(fs, delta)
	}
}

// each calls f with the ordinal of each series that may pass tags and in,
// ascending.
func (fs *fileSeries) each(tags []row.Tag, in []row.TagIn, f func(i int)) {
	ords, all := postings.Narrow(tags, in, fs.lookup)
	if all {
		for i := range fs.n {
			f(i)
		}
		return
	}
	for _, i := range ords {
		f(int(i))
	}
}

// keyArena rebuilds keys into shared chunks: a listing of many keys
// allocates a chunk at a time, not a key. The strings it returns stay
// valid: bytes once written in a chunk are never written again (a key that
// outgrows its chunk moves the chunk's bytes to a new one, and the old
// chunk, with the strings cut from it, is left as it was).
type keyArena struct{ buf []byte }

const keyChunk = 64 << 10

// key returns the key of fs's series i.
func (a *keyArena) key(fs *fileSeries, i int) string {
	if cap(a.buf)-len(a.buf) < 1<<10 {
		a.buf = make([]byte, 0, keyChunk)
	}
	start := len(a.buf)
	a.buf = fs.appendKey(a.buf, i)
	k := a.buf[start:]
	return unsafe.String(unsafe.SliceData(k), len(k))
}
