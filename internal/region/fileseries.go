package region

import (
	"encoding/binary"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/stratadb/strata/internal/postings"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/sst"
	"github.com/stratadb/strata/internal/symtab"
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
	syms  symtab.Table        // the distinct tag names and values
	names map[uint32]struct{} // the symbols that are tag names
	refs  []byte              // each series' tags: their refs (package symtab)
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
	// last holds the symbols of the last key's tags, name and value, by
	// place: sorted keys share most of their tags with the key before
	// them, and a compare with the symbol costs less than the table's
	// hash look-up (which, for 36 strings a Prometheus series, was most
	// of building a file of a million).
	last [][2]uint32
}

// noSym is no symbol (last's place not yet set).
const noSym = ^uint32(0)

func newFileSeriesBuilder(id string, rows bool) *fileSeriesBuilder {
	fs := &fileSeries{id: id, offs: []uint32{0}, names: map[uint32]struct{}{}}
	if rows {
		fs.starts = []int64{0}
	}
	return &fileSeriesBuilder{fs: fs}
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
	if err == nil && symtab.Canonical(b.tags, k) {
		if cap(fs.refs)-len(fs.refs) < 2*binary.MaxVarintLen32*len(b.tags) {
			// Doubled: grown a quarter at a time by append, a million
			// series' refs were copied four times over.
			fs.refs = slices.Grow(fs.refs, max(len(fs.refs), 4<<10))
		}
		for i, t := range b.tags { // as symtab.AppendRefs, the same symbols in the same order
			name, value := b.intern(i, t)
			fs.refs = binary.AppendUvarint(fs.refs, uint64(name))
			fs.refs = binary.AppendUvarint(fs.refs, uint64(value))
		}
	} else {
		for _, t := range b.tags { // the tags before the fault: symbols for the postings
			fs.names[fs.syms.Intern(t.Name)] = struct{}{}
			fs.syms.Intern(t.Value)
		}
		if fs.raw == nil {
			fs.raw = map[int32]string{}
		}
		fs.raw[id] = string(key)
		b.size += int64(len(key)) + 64
	}
	fs.offs = append(fs.offs, uint32(len(fs.refs)))
	if fs.starts != nil {
		fs.starts = append(fs.starts, fs.starts[len(fs.starts)-1]+rows)
	}
}

// intern returns the symbols of tag t, the i-th of its key: the last
// key's i-th tag's where they are the same strings.
func (b *fileSeriesBuilder) intern(i int, t row.Tag) (name, value uint32) {
	fs := b.fs
	for len(b.last) <= i {
		b.last = append(b.last, [2]uint32{noSym, noSym})
	}
	p := &b.last[i]
	if p[0] == noSym || fs.syms.Sym(p[0]) != t.Name {
		p[0] = fs.syms.Intern(t.Name)
		fs.names[p[0]] = struct{}{}
	}
	if p[1] == noSym || fs.syms.Sym(p[1]) != t.Value {
		p[1] = fs.syms.Intern(t.Value)
	}
	return p[0], p[1]
}

// done returns the series, their arrays cut to size and their memory
// counted.
func (b *fileSeriesBuilder) done() *fileSeries {
	fs := b.fs
	fs.refs, fs.offs, fs.starts = slices.Clone(fs.refs), slices.Clone(fs.offs), slices.Clone(fs.starts)
	fs.size.Store(b.size + fs.syms.Size() + int64(len(fs.refs)) + 4*int64(len(fs.offs)) + 8*int64(len(fs.starts)) + 24*int64(len(fs.names)) + 256)
	return fs
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
	return fs.syms.View().AppendKey(dst, fs.refs[fs.offs[i]:fs.offs[i+1]])
}

// lookup returns the ordinals of the series with tag name = value.
func (fs *fileSeries) lookup(name, value string) []int32 {
	ns, ok := fs.syms.Lookup(name)
	if !ok {
		return nil
	}
	vs, ok := fs.syms.Lookup(value)
	if !ok {
		return nil
	}
	return fs.postings(ns)[vs]
}

// values returns the values of tag name, sorted (read only).
func (fs *fileSeries) values(name string) []string {
	ns, ok := fs.syms.Lookup(name)
	if !ok {
		return nil
	}
	fs.postings(ns)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.sorted[ns]
}

// valuesWhere returns the values of tag name, sorted, of the series with
// tag where (a logical table's, by its table tag).
func (fs *fileSeries) valuesWhere(name string, where row.Tag) []string {
	in := fs.lookup(where.Name, where.Value)
	ns, ok := fs.syms.Lookup(name)
	if len(in) == 0 || !ok {
		return nil
	}
	var out []string
	for v, ords := range fs.postings(ns) {
		for _, o := range ords {
			if _, ok := slices.BinarySearch(in, o); ok {
				out = append(out, fs.syms.Sym(v))
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// tagNames iterates the file's tag names.
func (fs *fileSeries) tagNames() iter.Seq[string] {
	return func(yield func(string) bool) {
		for ns := range fs.names {
			if !yield(fs.syms.Sym(ns)) {
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
				if n, _ := fs.syms.Lookup(t.Name); n == ns {
					v, _ := fs.syms.Lookup(t.Value)
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
		vals = append(vals, fs.syms.Sym(v))
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

// keyArena rebuilds keys into shared chunks (symtab.KeyArena).
type keyArena struct{ symtab.KeyArena }

// key returns the key of fs's series i.
func (a *keyArena) key(fs *fileSeries, i int) string { return a.End(fs.appendKey(a.Start(), i)) }
