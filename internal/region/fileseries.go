package region

import (
	"encoding/binary"
	"strings"
	"unsafe"

	"github.com/stratadb/strata/internal/postings"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/sst"
)

// fileSeries is a file's series index as a region keeps it in memory: each
// tag name and value once (a symbol), each series as the symbols of its
// tags, each series' first row, and the series of each tag value. A file
// of a million series of 18 labels decodes to about 130 MB this way, where
// its keys as strings, with postings by string, took 950 MB: more than a
// region's cache holds, so every query decoded the file again. Keys are
// rebuilt from the symbols for the series a scan or listing selects.
type fileSeries struct {
	n    int
	syms []string // the distinct tag names and values
	refs []byte   // each series' tags: uvarint (name, value) symbol pairs
	offs []uint32 // series i's are refs[offs[i]:offs[i+1]]
	// raw holds whole the keys that symbols would not rebuild byte for
	// byte (one that does not decode, or not canonically: none that
	// row.EncodeSeries wrote); their postings list the tags before the
	// fault, as a scan's match (row.SeriesTag) finds them.
	raw    map[int32]string
	starts []int64 // starts[i]: series i's first row; starts[n]: the rows (nil without row counts)

	postings postings.Index
	size     int64 // approximate memory
}

// fileSeriesBuilder adds a file's keys, in order, to a fileSeries.
type fileSeriesBuilder struct {
	fs    *fileSeries
	symOf map[string]uint32
	tags  []row.Tag
}

func newFileSeriesBuilder(rows bool) *fileSeriesBuilder {
	fs := &fileSeries{offs: []uint32{0}}
	if rows {
		fs.starts = []int64{0}
	}
	return &fileSeriesBuilder{fs: fs, symOf: map[string]uint32{}}
}

// sym returns the symbol of s, and its string, interning s (which may be
// cut from a buffer that changes) if it is new.
func (b *fileSeriesBuilder) sym(s string) (uint32, string) {
	if id, ok := b.symOf[s]; ok {
		return id, b.fs.syms[id]
	}
	c := strings.Clone(s)
	id := uint32(len(b.fs.syms))
	b.fs.syms = append(b.fs.syms, c)
	b.symOf[c] = id
	b.fs.size += int64(len(c)) + 16
	return id, c
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
	for i, t := range b.tags {
		encoded += uvarintLen(len(t.Name)) + len(t.Name) + uvarintLen(len(t.Value)) + len(t.Value)
		var ns, vs uint32
		ns, b.tags[i].Name = b.sym(t.Name)
		vs, b.tags[i].Value = b.sym(t.Value)
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
		fs.size += int64(len(key)) + 64
	}
	fs.offs = append(fs.offs, uint32(len(fs.refs)))
	if fs.starts != nil {
		fs.starts = append(fs.starts, fs.starts[len(fs.starts)-1]+rows)
	}
	fs.postings.AddTags(id, b.tags)
}

// done returns the series, with their memory counted.
func (b *fileSeriesBuilder) done() *fileSeries {
	fs := b.fs
	fs.size += int64(cap(fs.refs)) + 4*int64(cap(fs.offs)) + 8*int64(cap(fs.starts)) + fs.postings.Bytes() + 128
	return fs
}

func uvarintLen(n int) int {
	w := 1
	for ; n >= 0x80; n >>= 7 {
		w++
	}
	return w
}

// newFileSeries keeps the series of x (with row counts if it has one for
// each key).
func newFileSeries(x sst.SeriesIndex) *fileSeries {
	b := newFileSeriesBuilder(len(x.Rows) == len(x.Keys))
	for i, k := range x.Keys {
		var rows int64
		if len(x.Rows) == len(x.Keys) {
			rows = x.Rows[i]
		}
		b.add(unsafe.Slice(unsafe.StringData(k), len(k)), rows)
	}
	return b.done()
}

// decodeFileSeries decodes a series index object.
func decodeFileSeries(data []byte) (*fileSeries, error) {
	b := newFileSeriesBuilder(true)
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

// candidates returns the ordinals, ascending, of the series that may pass
// the filter's tags and in: a superset of those that do (the scan's own
// match decides). all is true when no filter narrows the set.
func (fs *fileSeries) candidates(tags []row.Tag, in []row.TagIn) (ords []int32, all bool) {
	return fs.postings.Candidates(tags, in)
}

// each calls f with the ordinal of each series that may pass tags and in,
// ascending.
func (fs *fileSeries) each(tags []row.Tag, in []row.TagIn, f func(i int)) {
	ords, all := fs.candidates(tags, in)
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
