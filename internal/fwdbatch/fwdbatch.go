// Package fwdbatch encodes the share of a write one datanode forwards to
// the owner of a region: the batch as the engine holds it once it has
// validated it (region.Batch: points and their encoded series keys), in
// column form, so the owner neither parses points nor encodes keys again.
//
// The encoding is a version byte, then uvarint(rows) uvarint(runs), then
// runs of consecutive points of one shape (tag names, field names and
// kinds, in the points' order), each:
//
//	uvarint(n)
//	uvarint(tags)   tags   × (uvarint(len) name)
//	uvarint(fields) fields × (uvarint(len) name, kind byte)
//	version 2: uvarint(k) k × (uvarint(len) series key), the run's keys
//	           once each, then n × uvarint(index of the point's key)
//	version 1: n × (uvarint(len) series key)
//	n × varint(ts - previous ts)            (the first against 0)
//	per field, n values: float64 8 bytes little-endian (any bits: NaN,
//	±Inf and staleness markers stay as they are), int64 varint, uint64
//	uvarint, bool one byte 0 or 1, string uvarint(len) bytes; version 2
//	sends a float column as a scale byte s then each value's mantissa m,
//	a varint (the value is m / 10^s to the bit, internal/decimal), if every
//	value is such a decimal, else as 0xff then the 8 bytes of each
//
// Decode checks everything that does not need the table's schema: the
// structure and sizes, every key decodes (tag names ascending, values not
// empty, each name one of its run's tag names), kinds are kinds, bools
// are 0 or 1. The engine checks the rest (datanode.Engine.WriteForwarded):
// the batch against the table's schema (region.ValidateBatch, a number
// compared per point: a run's points share a Shape), and that each key
// routes to the region.
package fwdbatch

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
	"unsafe"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/stratadb/strata/internal/addrmemo"
	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
)

// Encoding versions. Version 2 sends each key of a run once and each
// point its key's index: a TSBS share of 10,000 lines over 400 hosts holds
// each key 25 times, and its 150 bytes a point were most of the batch,
// of the compressor's input and of the gRPC messages' copies. An owner
// announces the newest version it reads (cluster.NodeInfo.Forward); a
// sender writes version 1 to an owner that announces none (an older
// build).
const (
	V1     = 1
	V2     = 2
	Latest = V2
)

// MaxSize bounds a batch decoded (and so decompressed): a datanode takes
// gRPC messages of up to 64 MiB, which compress well.
const MaxSize = 256 << 20

// Codec says how an encoded batch is compressed.
type Codec uint32

const (
	None   Codec = 0
	Snappy Codec = 1 // S2's snappy-compatible block format
	Zstd   Codec = 2 // one zstd frame, fastest level
)

// ErrMalformed: a forwarded batch does not decode. It wraps
// region.ErrInvalidWrite (the class of a bad write).
var ErrMalformed = fmt.Errorf("%w: malformed forwarded batch", region.ErrInvalidWrite)

// Append appends the encoding of b, in the latest version, to dst. b's
// points must have their fields (the engine's prepared batches do), and
// Keys[i] must be the series key of Points[i].
func Append(dst []byte, b region.Batch) []byte {
	return new(Encoder).Append(dst, b, Latest)
}

// An Encoder encodes batches, keeping its memory for the next.
type Encoder struct {
	memo  *addrmemo.Memo // allocated for the first version 2 run; a pass a run
	index []uint32
	keys  [][]byte
	cols  []uint64 // a run's numbers, column-major (appendFields)
}

// Append appends the encoding of b in version v (V1 or V2) to dst.
func (e *Encoder) Append(dst []byte, b region.Batch, v int) []byte {
	pts := b.Points
	dst = append(dst, byte(v))
	dst = binary.AppendUvarint(dst, uint64(len(pts)))
	runs := 0
	for i := range pts {
		if i == 0 || !row.SameShape(&pts[i], &pts[i-1]) {
			runs++
		}
	}
	dst = binary.AppendUvarint(dst, uint64(runs))
	for i := 0; i < len(pts); {
		j := i + 1
		for j < len(pts) && row.SameShape(&pts[j], &pts[j-1]) {
			j++
		}
		dst = e.appendRun(dst, pts[i:j], b.Keys[i:j], v)
		i = j
	}
	clear(e.keys[:cap(e.keys)]) // no reference to the batch stays (an earlier run's keys either)
	e.keys = e.keys[:0]
	if cap(e.cols) > 1<<20 {
		e.cols = nil // a rare huge run's: not kept
	}
	return dst
}

func (e *Encoder) appendRun(dst []byte, pts []row.Point, keys [][]byte, v int) []byte {
	p0 := &pts[0]
	dst = binary.AppendUvarint(dst, uint64(len(pts)))
	dst = binary.AppendUvarint(dst, uint64(len(p0.Tags)))
	for _, t := range p0.Tags {
		dst = appendString(dst, t.Name)
	}
	dst = binary.AppendUvarint(dst, uint64(len(p0.Fields)))
	for _, f := range p0.Fields {
		dst = appendString(dst, f.Name)
		dst = append(dst, byte(f.Value.Kind()))
	}
	if v == V1 {
		for _, k := range keys {
			dst = binary.AppendUvarint(dst, uint64(len(k)))
			dst = append(dst, k...)
		}
	} else {
		e.dedup(keys)
		dst = binary.AppendUvarint(dst, uint64(len(e.keys)))
		for _, k := range e.keys {
			dst = binary.AppendUvarint(dst, uint64(len(k)))
			dst = append(dst, k...)
		}
		for _, i := range e.index {
			dst = binary.AppendUvarint(dst, uint64(i))
		}
	}
	prev := int64(0)
	for i := range pts {
		dst = binary.AppendVarint(dst, pts[i].TS-prev)
		prev = pts[i].TS
	}
	return e.appendFields(dst, pts, v)
}

// appendFields appends a run's field columns. A point holds its fields in
// a slice of its own (48 bytes a field), so a column read from the points
// strides a cache line or more a value, over a share larger than the
// cache (column by column this was a sixth of a sender's CPU in a TSBS
// load): the numbers are first copied out point by point into one
// column-major array, read from there column by column.
func (e *Encoder) appendFields(dst []byte, pts []row.Point, v int) []byte {
	fields := pts[0].Fields
	n, nf := len(pts), len(fields)
	cols := slices.Grow(e.cols[:0], n*nf)[:n*nf]
	e.cols = cols
	for i := range pts {
		for j, f := range pts[i].Fields[:nf] { // a run's points share a shape
			cols[j*n+i] = f.Value.Bits()
		}
	}
	for j, f := range fields {
		col := cols[j*n : (j+1)*n]
		switch f.Value.Kind() {
		case row.Float:
			if v >= V2 {
				dst = appendDecimals(dst, col)
				continue
			}
			for _, b := range col {
				dst = binary.LittleEndian.AppendUint64(dst, b)
			}
		case row.Int:
			for _, b := range col {
				dst = binary.AppendVarint(dst, int64(b))
			}
		case row.Uint:
			for _, b := range col {
				dst = binary.AppendUvarint(dst, b)
			}
		case row.Bool:
			for _, b := range col {
				dst = append(dst, byte(min(b, 1)))
			}
		case row.String:
			for i := range pts {
				dst = appendString(dst, pts[i].Fields[j].Value.Str())
			}
		}
		// A null field (never in a validated batch) has no values: the
		// receiver refuses the kind.
	}
	return dst
}

// rawFloats marks a version 2 float column sent as its values' 8 bytes.
const rawFloats = 0xff

// appendDecimals appends a version 2 float column: its scale s and each
// value's mantissa m (a varint: m / 10^s is the value to the bit,
// internal/decimal) if every value is such a short decimal (TSBS's and
// most samples are: two bytes or three instead of eight, and less for the
// compressor to read), else rawFloats and each value's 8 bytes
// little-endian (NaN, ±Inf, -0 and staleness markers as they are).
func appendDecimals(dst []byte, col []uint64) []byte {
	// The scale starts at 0 and is raised to the least a value needs
	// that the one tried does not fit (the column then written again):
	// one Mantissa a value, where a decimal.Scan first took two.
	mark := len(dst)
	for s := int8(0); s <= decimal.MaxScale; {
		dst = append(dst[:mark], byte(s))
		next := s
		for _, b := range col {
			f := math.Float64frombits(b)
			m, ok := decimal.Mantissa(f, s)
			if !ok {
				next = leastScale(f, s+1)
				break
			}
			dst = binary.AppendVarint(dst, m)
		}
		if next == s {
			return dst
		}
		s = next
	}
	dst = append(dst[:mark], rawFloats)
	for _, b := range col {
		dst = binary.LittleEndian.AppendUint64(dst, b)
	}
	return dst
}

// leastScale is the least scale from from on at which f is a decimal, or
// decimal.MaxScale+1 if there is none.
func leastScale(f float64, from int8) int8 {
	s := from
	for ; s <= decimal.MaxScale; s++ {
		if _, ok := decimal.Mantissa(f, s); ok {
			break
		}
	}
	return s
}

// fields reads a run's field columns (n points, fields' names and kinds)
// into vals, row-major as the points hold them. The numbers are read
// column by column into one column-major array, then copied point by
// point: written column by column, vals would be strided a cache line or
// more a value (appendFields).
func (s *Scratch) fields(d *decoder, vals, fields []row.Field, n, v, first int) {
	nf := len(fields)
	cols := slices.Grow(s.cols[:0], n*nf)[:n*nf]
	s.cols = cols
	for j, f := range fields {
		col := cols[j*n : (j+1)*n]
		switch f.Value.Kind() {
		case row.Float:
			if v == V2 {
				d.decimals(col, f.Name)
				continue
			}
			for i := range col {
				col[i] = d.uint64()
			}
		case row.Int:
			for i := range col {
				col[i] = uint64(d.varint())
			}
		case row.Uint:
			for i := range col {
				col[i] = d.uvarint()
			}
		case row.Bool:
			for i := range col {
				switch col[i] = uint64(d.byte()); col[i] {
				case 0, 1:
				default:
					d.fail("point %d: field %q: a bool not 0 or 1", first+i, f.Name)
				}
			}
		case row.String:
			for i := range n {
				vals[i*nf+j] = row.Field{Name: f.Name, Value: row.StringValue(d.string())}
			}
		}
	}
	if d.err != nil {
		return
	}
	for i := range n {
		pt := vals[i*nf : (i+1)*nf : (i+1)*nf]
		for j := range pt {
			f := &fields[j]
			switch k := f.Value.Kind(); k {
			case row.Float, row.Int, row.Uint:
				pt[j] = row.Field{Name: f.Name, Value: row.NumberValue(k, cols[j*n+i])}
			case row.Bool:
				pt[j] = row.Field{Name: f.Name, Value: row.BoolValue(cols[j*n+i] != 0)}
			}
			// A string was read above.
		}
	}
}

// decimals reads a version 2 float column (appendDecimals) into col, as
// the values' bits.
func (d *decoder) decimals(col []uint64, name string) {
	s := d.byte()
	switch {
	case d.err != nil:
		return
	case s == rawFloats:
		for i := range col {
			col[i] = d.uint64()
		}
	case s <= decimal.MaxScale:
		for i := range col {
			col[i] = math.Float64bits(decimal.Float(d.varint(), int8(s)))
		}
	default:
		d.fail("field %q: scale %d", name, s)
	}
}

// dedup sets e.keys to a run's keys, once each as far as their addresses
// tell (internal/addrmemo: finding a repeat by address costs a fraction of
// comparing its bytes; a key it misses is sent twice, which costs bytes
// only), and e.index to each point's key's index in them.
func (e *Encoder) dedup(keys [][]byte) {
	if e.memo == nil {
		e.memo = new(addrmemo.Memo)
	}
	e.memo.Begin()
	e.keys, e.index = e.keys[:0], e.index[:0]
	for _, k := range keys {
		p := unsafe.SliceData(k)
		s, i, ok := e.memo.Find(p, len(k))
		if !ok {
			i = uint32(len(e.keys))
			e.keys = append(e.keys, k)
			e.memo.Note(s, p, len(k), i)
		}
		e.index = append(e.index, i)
	}
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// Decode decodes a batch Append encoded. The batch's points carry their
// tag names only (values empty: the keys hold them, and a prepared batch's
// writer reads only names, region.Batch), and the points of a run share a
// Shape. Keys point into data; the strings of names and values are copies.
// Any error wraps ErrMalformed (a *region.PointError for a bad point).
func Decode(data []byte) (region.Batch, error) {
	return new(Scratch).Decode(data)
}

// Scratch is the memory of decoded batches, reused from one to the next:
// a batch Decode returned is valid until the next Decode with the same
// Scratch (a region copies what it keeps of a batch it wrote).
type Scratch struct {
	// Buf is for Decompress's output.
	Buf    []byte
	points []row.Point
	keys   [][]byte
	vals   []row.Field
	dict   [][]byte // a version 2 run's keys
	cols   []uint64 // a run's numbers, column-major (fields)
	// seen maps a key checked in the current run to its index in the
	// batch: a key repeats within a batch (a TSBS batch of 10,000 lines
	// over 4,000 hosts holds each key 2.5 times), and finding it costs a
	// fraction of checking it again. Its strings are the data's bytes,
	// cleared before Decode returns.
	seen map[string]int
}

// Keep reports whether s is small enough to keep for the next batch.
func (s *Scratch) Keep() bool {
	return cap(s.Buf) <= 16<<20 && cap(s.vals) <= 1<<20 && cap(s.cols) <= 1<<20 && cap(s.points) <= 1<<18
}

// forget empties seen (a map of a rare huge run is not kept: a cleared
// map keeps its size).
func (s *Scratch) forget() {
	if s.seen == nil || len(s.seen) > 1<<16 {
		s.seen = map[string]int{}
	}
	clear(s.seen)
}

// Decode is Decode into s's memory. The points of a run with the same key
// share one slice of data for it (its first occurrence), checked once.
func (s *Scratch) Decode(data []byte) (region.Batch, error) {
	defer s.forget() // no reference to data stays
	d := decoder{buf: data}
	v := int(d.byte())
	if v != V1 && v != V2 {
		return region.Batch{}, fmt.Errorf("%w: version %d, not %d or %d", ErrMalformed, v, V1, V2)
	}
	rows, runs := d.count(1), d.count(1)
	if d.err != nil {
		return region.Batch{}, d.err
	}
	// Grown by the declared rows only as far as the bytes can hold points
	// of a few fields (a batch of zeros declaring a row a byte allocated
	// a hundred times its size), then as the runs decode.
	b := region.Batch{Points: slices.Grow(s.points[:0], min(rows, len(data)/16)), Keys: slices.Grow(s.keys[:0], min(rows, len(data)/16))}
	defer func() { s.points, s.keys = b.Points[:0], b.Keys[:0] }() // kept for the next batch
	free := s.vals[:0]                                             // every value is written before it is read
	for r := range runs {
		n := d.count(2) // a key's length and a timestamp at least
		if d.err == nil && len(b.Points)+n > rows {
			d.fail("%d points in the runs, %d declared", len(b.Points)+n, rows)
		}
		ntags := d.count(1)
		tags := make([]row.Tag, 0, min(ntags, 1024))
		for range ntags {
			tags = append(tags, row.Tag{Name: d.string()})
		}
		nf := d.count(2)
		fields := make([]row.Field, 0, min(nf, 1024))
		for range nf {
			name := d.string()
			k := row.Kind(d.byte())
			if d.err == nil && (k == row.Null || k > row.Bool) {
				d.fail("field %q of kind %d", name, k)
			}
			fields = append(fields, row.Field{Name: name, Value: zero(k)})
		}
		if d.err != nil {
			return region.Batch{}, d.err
		}
		sorted := make([]string, len(tags))
		for i, t := range tags {
			sorted[i] = t.Name
		}
		sort.Strings(sorted)
		sorted = slices.Compact(sorted) // a name twice is ValidateBatch's to refuse
		first := len(b.Points)
		var err error
		if v == V1 {
			b.Keys, err = s.keysV1(&d, b.Keys, n, sorted, first)
		} else {
			b.Keys, err = s.keysV2(&d, b.Keys, n, sorted, first)
		}
		if err != nil {
			return region.Batch{}, err
		}
		// The run's fields, row-major as points hold them: one slice.
		if n*nf > len(d.buf) { // a value takes a byte at least
			d.fail("%d points of %d fields in %d bytes", n, nf, len(d.buf))
			return region.Batch{}, d.err
		}
		if cap(free)-len(free) < n*nf {
			free = make([]row.Field, 0, max(n*nf, 2*cap(free)))
			s.vals = free
		}
		vals := free[len(free) : len(free)+n*nf : len(free)+n*nf]
		free = free[:len(free)+n*nf]
		ts := int64(0)
		for i := range n {
			ts += d.varint()
			b.Points = append(b.Points, row.Point{Tags: tags, TS: ts, Fields: vals[i*nf : (i+1)*nf : (i+1)*nf], Shape: uint32(r + 1)})
		}
		s.fields(&d, vals, fields, n, v, first)
		if d.err != nil {
			return region.Batch{}, d.err
		}
	}
	if len(b.Points) != rows {
		return region.Batch{}, fmt.Errorf("%w: %d points in the runs, %d declared", ErrMalformed, len(b.Points), rows)
	}
	if len(d.buf) != 0 {
		return region.Batch{}, fmt.Errorf("%w: %d bytes after the batch", ErrMalformed, len(d.buf))
	}
	return b, nil
}

// keysV1 reads a version 1 run's n keys, one a point, checking each
// against the run's tag names once: a repeat shares its first bytes.
func (s *Scratch) keysV1(d *decoder, keys [][]byte, n int, sorted []string, first int) ([][]byte, error) {
	s.forget() // a key is checked against its run's tag names
	for i := range n {
		k := d.bytes()
		if d.err != nil {
			return nil, d.err
		}
		// The same bytes checked against the same names: the same
		// outcome.
		if j, ok := s.seen[string(k)]; ok {
			keys = append(keys, keys[j])
			continue
		}
		if err := checkKey(k, sorted); err != nil {
			return nil, &region.PointError{Index: first + i, Err: fmt.Errorf("%w: %v", ErrMalformed, err)}
		}
		s.seen[unsafe.String(unsafe.SliceData(k), len(k))] = len(keys)
		keys = append(keys, k)
	}
	return keys, nil
}

// keysV2 reads a version 2 run's keys, each checked once, and its n
// points' indexes into them: the points of a key share its bytes. A bad
// key is refused at the first point that has it (any point: a key no
// point has is refused too).
func (s *Scratch) keysV2(d *decoder, keys [][]byte, n int, sorted []string, first int) ([][]byte, error) {
	k := d.count(1) // a key's length at least
	if d.err == nil && (k > n || (k == 0 && n > 0)) {
		d.fail("%d keys for %d points", k, n)
	}
	if d.err != nil {
		return nil, d.err
	}
	dict := s.dict[:0]
	defer func() {
		clear(dict[:cap(dict)]) // no reference to data stays
		s.dict = dict[:0]
	}()
	var bad map[int]error
	for j := range k {
		key := d.bytes()
		if d.err != nil {
			return nil, d.err
		}
		if err := checkKey(key, sorted); err != nil {
			if bad == nil {
				bad = map[int]error{}
			}
			bad[j] = err
		}
		dict = append(dict, key)
	}
	if len(d.buf) < n {
		d.fail("%d points' keys in %d bytes", n, len(d.buf))
		return nil, d.err
	}
	for i := range n {
		var j uint64
		if c := d.buf[0]; c < 0x80 { // all but always: under 128 keys a run
			j = uint64(c)
			d.buf = d.buf[1:]
		} else if j = d.uvarint(); d.err != nil {
			return nil, d.err
		}
		if j >= uint64(k) {
			d.fail("point %d: key %d of %d", first+i, j, k)
			return nil, d.err
		}
		if err, ok := bad[int(j)]; ok {
			return nil, &region.PointError{Index: first + i, Err: fmt.Errorf("%w: %v", ErrMalformed, err)}
		}
		keys = append(keys, dict[j])
		if len(d.buf) == 0 && i+1 < n {
			d.fail("short")
			return nil, d.err
		}
	}
	if len(bad) > 0 {
		d.fail("a bad key no point has")
		return nil, d.err
	}
	return keys, nil
}

func zero(k row.Kind) row.Value {
	switch k {
	case row.Float, row.Int, row.Uint:
		return row.NumberValue(k, 0)
	case row.String:
		return row.StringValue("")
	case row.Bool:
		return row.BoolValue(false)
	}
	return row.Value{}
}

// checkKey checks that key is a series key EncodeSeries could have made
// of tags named among names (sorted, each once): tags ascending by name,
// each once, no empty value. A key's names match names at ascending
// places, so they ascend, each once, with no comparison of their own.
// A key's next name is all but always the next of names (its point has
// every tag of its run): that is checked first, as the name's bytes.
func checkKey(key []byte, names []string) error {
	j := 0
	for len(key) > 0 {
		var name, rest []byte
		if j < len(names) && startsWith(key, names[j]) {
			name, rest = key[1:1+len(names[j])], key[1+len(names[j]):]
		} else {
			var ok bool
			if name, rest, ok = cut(key); !ok {
				return row.ErrBadSeries
			}
			for j < len(names) && names[j] < string(name) {
				j++
			}
			if j == len(names) || names[j] != string(name) {
				return fmt.Errorf("%w: tag %q is out of order, twice or not one of the point's tags", row.ErrBadSeries, name)
			}
		}
		value, rest, ok := cut(rest)
		if !ok {
			return row.ErrBadSeries
		}
		if len(value) == 0 {
			return fmt.Errorf("%w: tag %q has an empty value", row.ErrBadSeries, name)
		}
		j++
		key = rest
	}
	return nil
}

// startsWith says whether key begins with name as a key writes it: its
// length in one byte (names under 128 bytes), then its bytes, and more
// after (its value).
func startsWith(key []byte, name string) bool {
	n := len(name)
	return n < 0x80 && len(key) > n && int(key[0]) == n && string(key[1:1+n]) == name
}

// cut splits b into a uvarint-prefixed string and the rest. A length under
// 128 (a tag's name or value, all but always) takes a byte.
func cut(b []byte) (s, rest []byte, ok bool) {
	if len(b) > 0 && b[0] < 0x80 {
		n := int(b[0])
		if len(b)-1 < n {
			return nil, b, false
		}
		return b[1 : 1+n], b[1+n:], true
	}
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return nil, b, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}

// decoder reads an encoded batch; the first error sticks, and reads after
// it return zeros.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.buf) == 0 {
		d.fail("short")
		return 0
	}
	c := d.buf[0]
	d.buf = d.buf[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, w := binary.Uvarint(d.buf)
	if w <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.buf = d.buf[w:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, w := binary.Varint(d.buf)
	if w <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.buf = d.buf[w:]
	return v
}

func (d *decoder) uint64() uint64 {
	if d.err != nil || len(d.buf) < 8 {
		d.fail("short")
		return 0
	}
	v := binary.LittleEndian.Uint64(d.buf)
	d.buf = d.buf[8:]
	return v
}

// count reads a count of items of at least min bytes each, which the
// rest of the batch must be able to hold (so no count allocates more than
// the batch's size warrants).
func (d *decoder) count(min int) int {
	v := d.uvarint()
	if d.err == nil && v > uint64(len(d.buf)/min) {
		d.fail("%d items in %d bytes", v, len(d.buf))
		return 0
	}
	return int(v)
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.buf)) {
		d.fail("%d bytes of %d", n, len(d.buf))
	}
	if d.err != nil {
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

func (d *decoder) string() string { return string(d.bytes()) }

// Compress compresses an encoded batch with c (None: raw itself), into
// dst's memory if it is large enough.
func Compress(c Codec, dst, raw []byte) []byte {
	switch c {
	case Snappy:
		return s2.EncodeSnappy(dst[:cap(dst)], raw)
	case Zstd:
		return zenc.EncodeAll(raw, dst[:0])
	}
	return raw
}

// Decompress decompresses data, compressed with c, that decodes to size
// bytes (at most MaxSize), into dst's memory if it is large enough.
func Decompress(c Codec, dst, data []byte, size uint64) ([]byte, error) {
	if size > MaxSize {
		return nil, fmt.Errorf("%w: %d bytes decoded, the limit is %d", region.ErrBatchTooLarge, size, MaxSize)
	}
	var out []byte
	var err error
	switch c {
	case None:
		out = data
	case Snappy:
		n, derr := s2.DecodedLen(data)
		if derr != nil || uint64(n) != size {
			return nil, fmt.Errorf("%w: snappy: %d bytes decoded, %d declared (%v)", ErrMalformed, n, size, derr)
		}
		out, err = s2.Decode(slices.Grow(dst[:0], n)[:n], data)
	case Zstd:
		out, err = zdec.DecodeAll(data, slices.Grow(dst[:0], int(size)))
	default:
		return nil, fmt.Errorf("%w: compression %d", ErrMalformed, c)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if uint64(len(out)) != size {
		return nil, fmt.Errorf("%w: %d bytes decoded, %d declared", ErrMalformed, len(out), size)
	}
	return out, nil
}

var (
	zenc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	zdec, _ = zstd.NewReader(nil, zstd.WithDecoderMaxMemory(MaxSize), zstd.WithDecoderConcurrency(0))
)
