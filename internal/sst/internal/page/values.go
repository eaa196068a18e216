package page

import (
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/parquet-go/parquet-go/format"
)

// Values is a data page of a required 64-bit column (timestamps, a numeric
// field), PLAIN or DELTA_BINARY_PACKED, zstd-compressed or not, decoded
// from its stored bytes without parquet-go's page decoding: only the values
// asked for are decoded (DeltaCursor). It keeps its buffers from one page
// to the next.
type Values struct {
	enc    format.Encoding
	values []byte // the values section, with Padding past its end
	delta  DeltaCursor
	unz    []byte // decompressed bytes, reused
}

// Decompressor decompresses a zstd page body.
type Decompressor interface {
	Decode(dst, src []byte) ([]byte, error)
}

// Buffers is an empty Values holding v's buffers, to be reused.
func (v *Values) Buffers() Values {
	return Values{delta: DeltaCursor{held: v.delta.held, deltas: v.delta.deltas}, unz: v.unz}
}

// BufferBytes is the capacity of v's largest buffer.
func (v *Values) BufferBytes() int { return cap(v.unz) }

// Load makes v page i (which names it in errors) of a chunk compressed with
// codec (format.Zstd, or format.Uncompressed), decompressing with zstd: b
// is the page as stored, its header and body, with Padding bytes of
// capacity past its end. The header must describe a data page of rows
// values without levels, whose body matches its CRC (if it has one) and
// its sizes; otherwise Load returns ErrCorrupt. v may keep references into
// b until the next Load.
func (v *Values) Load(i int, b []byte, rows int32, codec format.CompressionCodec, zstd Decompressor) error {
	h, hn, err := ParseHeader(b)
	if err != nil {
		return err
	}
	body := b[hn:]
	switch {
	case !h.Data:
		return fmt.Errorf("%w: page %d is of type %d, not data", ErrCorrupt, i, h.Type)
	case int(h.Compressed) != len(body):
		return fmt.Errorf("%w: page %d holds %d bytes, its offset index entry %d", ErrCorrupt, i, h.Compressed, len(body))
	case h.NumValues != rows || h.V2 && (h.NumRows != rows || h.NumNulls != 0):
		return fmt.Errorf("%w: page %d holds %d values, its offset index %d rows", ErrCorrupt, i, h.NumValues, rows)
	case h.RepLen != 0 || h.DefLen != 0:
		return fmt.Errorf("%w: page %d of a required column has levels", ErrCorrupt, i)
	case h.Encoding != format.Plain && h.Encoding != format.DeltaBinaryPacked:
		return fmt.Errorf("%w: page %d has encoding %d, which its chunk's metadata does not list", ErrCorrupt, i, h.Encoding)
	}
	if h.HasCRC && crc32.ChecksumIEEE(body) != uint32(h.CRC) {
		return fmt.Errorf("%w: page %d fails its checksum", ErrCorrupt, i)
	}
	v.values = body
	if codec == format.Zstd && (!h.V2 || h.IsCompressed) {
		v.unz = slices.Grow(v.unz[:0], int(h.Uncompressed)+Padding)
		if v.unz, err = zstd.Decode(v.unz, body); err != nil {
			return fmt.Errorf("%w: page %d: %w", ErrCorrupt, i, err)
		}
		if len(v.unz) != int(h.Uncompressed) {
			return fmt.Errorf("%w: page %d decompresses to %d bytes, not %d", ErrCorrupt, i, len(v.unz), h.Uncompressed)
		}
		v.unz = slices.Grow(v.unz, Padding)
		v.values = v.unz
	}
	if h.Encoding == format.DeltaBinaryPacked {
		if err := v.delta.Reset(v.values, int(rows)); err != nil {
			return fmt.Errorf("page %d: %w", i, err)
		}
	} else if len(v.values) != 8*int(rows) {
		return fmt.Errorf("%w: page %d of %d rows holds %d bytes of plain values", ErrCorrupt, i, rows, len(v.values))
	}
	v.enc = h.Encoding
	return nil
}

// AppendRange appends values [a, b) of the page to dst, as uint64 bits.
// The caller keeps the range within the page's rows.
func (v *Values) AppendRange(dst []uint64, a, b int) ([]uint64, error) {
	if v.enc == format.DeltaBinaryPacked {
		return v.delta.AppendRange(dst, a, b)
	}
	return append(dst, plainInt64s(v.values)[a:b]...), nil
}
