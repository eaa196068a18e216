package page

import (
	"encoding/binary"
	"fmt"

	"github.com/parquet-go/parquet-go/format"
)

// Header is what Values needs of a Parquet page header. It is read by hand
// from Thrift's compact protocol: parquet-go's reflective decoder of the
// whole header (statistics included) cost a twentieth of a narrow query's
// time.
type Header struct {
	Type         format.PageType
	Uncompressed int32
	Compressed   int32
	CRC          int32
	HasCRC       bool
	// The data page header, of either version (V2 sets the levels'
	// lengths and may leave its values uncompressed).
	Data, V2     bool
	NumValues    int32
	NumNulls     int32
	NumRows      int32
	Encoding     format.Encoding
	DefLen       int32
	RepLen       int32
	IsCompressed bool
}

// Thrift compact protocol types.
const (
	tBoolTrue  = 1
	tBoolFalse = 2
	tByte      = 3
	tI16       = 4
	tI32       = 5
	tI64       = 6
	tDouble    = 7
	tBinary    = 8
	tList      = 9
	tSet       = 10
	tMap       = 11
	tStruct    = 12
)

// compactReader reads Thrift's compact protocol from a byte slice; the
// first malformed or truncated read sets err, and every read after it
// returns zero.
type compactReader struct {
	b   []byte
	pos int
	err error
}

func (r *compactReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: page header: %s at byte %d", ErrCorrupt, what, r.pos)
	}
}

func (r *compactReader) byte() byte {
	if r.err != nil || r.pos >= len(r.b) {
		r.fail("truncated")
		return 0
	}
	c := r.b[r.pos]
	r.pos++
	return c
}

func (r *compactReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.pos:])
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.pos += n
	return v
}

// int is a zigzag varint (i16, i32, i64).
func (r *compactReader) int() int64 {
	u := r.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (r *compactReader) i32() int32 {
	v := r.int()
	if int64(int32(v)) != v {
		r.fail("i32 out of range")
		return 0
	}
	return int32(v)
}

// field reads a field header of a struct whose last field was last: the
// field's id and type, or typ 0 at the struct's end.
func (r *compactReader) field(last int16) (id int16, typ byte) {
	c := r.byte()
	if c == 0 || r.err != nil {
		return 0, 0
	}
	typ = c & 0x0f
	if d := int16(c >> 4); d != 0 {
		return last + d, typ
	}
	v := r.int()
	if int64(int16(v)) != v {
		r.fail("field id out of range")
	}
	return int16(v), typ
}

// skip skips a value of type typ (depth bounds nesting).
func (r *compactReader) skip(typ byte, depth int) {
	if depth > 16 {
		r.fail("nested too deep")
		return
	}
	switch typ {
	case tBoolTrue, tBoolFalse:
		// The value is the type of a field; a list's booleans are bytes
		// (skipElements).
	case tByte:
		r.byte()
	case tI16, tI32, tI64:
		r.uvarint()
	case tDouble:
		r.bytes(8)
	case tBinary:
		n := r.uvarint()
		if n > uint64(len(r.b)) {
			r.fail("binary longer than the header")
			return
		}
		r.bytes(int(n))
	case tList, tSet:
		c := r.byte()
		n := uint64(c >> 4)
		if n == 15 {
			n = r.uvarint()
		}
		r.skipElements(c&0x0f, n, depth)
	case tMap:
		n := r.uvarint()
		if n == 0 {
			return
		}
		kv := r.byte()
		for i := uint64(0); i < n && r.err == nil; i++ {
			r.skipElements(kv>>4, 1, depth)
			r.skipElements(kv&0x0f, 1, depth)
		}
	case tStruct:
		r.fields(depth+1, func(int16, byte) bool { return false })
	default:
		r.fail(fmt.Sprintf("type %d", typ))
	}
}

// fields reads a struct's fields to its end: read reads a field's value
// and reports true, or reports false to have it skipped (at depth).
func (r *compactReader) fields(depth int, read func(id int16, typ byte) bool) {
	var last int16
	for r.err == nil {
		id, typ := r.field(last)
		if typ == 0 {
			return
		}
		last = id
		if !read(id, typ) {
			r.skip(typ, depth)
		}
	}
}

// skipElements skips n elements of type typ in a list, set or map.
func (r *compactReader) skipElements(typ byte, n uint64, depth int) {
	if n > uint64(len(r.b)) { // every element takes a byte at least
		r.fail("collection longer than the header")
		return
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		if typ == tBoolTrue || typ == tBoolFalse {
			r.byte()
			continue
		}
		r.skip(typ, depth+1)
	}
}

func (r *compactReader) bytes(n int) {
	if r.err == nil && len(r.b)-r.pos < n {
		r.fail("truncated")
		return
	}
	r.pos += n
}

// ParseHeader reads the page header at the start of b and returns it and
// its length in bytes. Malformed or truncated bytes are ErrCorrupt.
func ParseHeader(b []byte) (Header, int, error) {
	r := compactReader{b: b}
	h := Header{IsCompressed: true}
	var seen uint8
	r.fields(0, func(id int16, typ byte) bool {
		switch {
		case id == 1 && typ == tI32:
			h.Type, seen = format.PageType(r.i32()), seen|1
		case id == 2 && typ == tI32:
			h.Uncompressed, seen = r.i32(), seen|2
		case id == 3 && typ == tI32:
			h.Compressed, seen = r.i32(), seen|4
		case id == 4 && typ == tI32:
			h.CRC, h.HasCRC = r.i32(), true
		case id == 5 && typ == tStruct:
			h.Data = true
			r.dataPageHeader(&h, false)
		case id == 8 && typ == tStruct:
			h.Data, h.V2 = true, true
			r.dataPageHeader(&h, true)
		default:
			return false
		}
		return true
	})
	if r.err != nil {
		return h, 0, r.err
	}
	if seen != 7 {
		return h, 0, fmt.Errorf("%w: page header lacks a required field", ErrCorrupt)
	}
	if h.Uncompressed < 0 || h.Compressed < 0 || h.NumValues < 0 || h.NumNulls < 0 || h.NumRows < 0 || h.DefLen < 0 || h.RepLen < 0 {
		return h, 0, fmt.Errorf("%w: page header has a negative size or count", ErrCorrupt)
	}
	return h, r.pos, nil
}

// dataPageHeader reads a DataPageHeader (v2: a DataPageHeaderV2) into h.
func (r *compactReader) dataPageHeader(h *Header, v2 bool) {
	r.fields(1, func(id int16, typ byte) bool {
		switch {
		case id == 1 && typ == tI32:
			h.NumValues = r.i32()
		case v2 && id == 2 && typ == tI32:
			h.NumNulls = r.i32()
		case v2 && id == 3 && typ == tI32:
			h.NumRows = r.i32()
		case (v2 && id == 4 || !v2 && id == 2) && typ == tI32:
			h.Encoding = format.Encoding(r.i32())
		case v2 && id == 5 && typ == tI32:
			h.DefLen = r.i32()
		case v2 && id == 6 && typ == tI32:
			h.RepLen = r.i32()
		case v2 && id == 7 && (typ == tBoolTrue || typ == tBoolFalse):
			h.IsCompressed = typ == tBoolTrue
		default:
			return false
		}
		return true
	})
}
