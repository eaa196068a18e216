package sst

import (
	"fmt"
	"slices"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/sst/internal/page"
)

// rawPages reads a required 64-bit column chunk (timestamps, a numeric
// field) of one row group page by page, without parquet-go's page
// decoding: it finds a row's page through the offset index, reads the
// page, and has package page check its CRC, decompress it and decode only
// the rows asked for. ReadColumns uses it where a chunk's metadata shows
// only what it decodes (data pages of PLAIN or DELTA_BINARY_PACKED values,
// zstd or uncompressed); any other chunk is read through parquet-go
// (colStream).
type rawPages struct {
	r        *Reader
	index    parquet.OffsetIndex
	rows     int64 // the chunk's rows
	codec    format.CompressionCodec
	decimals bool // mantissas at scale, read as float64 bits
	scale    int8

	page       int   // the page loaded, -1 none
	start, end int64 // its rows, within the row group
	vals       page.Values
	raw        []byte // the page as read, reused

	// the seek/read interface ReadColumns shares with colStream
	pos  int64
	bits []uint64
}

// rawPagesOff makes every chunk read through parquet-go, for tests that
// compare the two readers.
var rawPagesOff = false

// openRaw sets p to read column c of row group g (keeping p's buffers),
// and reports false if the chunk may hold anything rawPages does not
// decode.
func (r *Reader) openRaw(g, c int, p *rawPages) bool {
	if rawPagesOff || r.optional[c] || !r.numeric[c] {
		return false
	}
	fc, ok := r.file.RowGroups()[g].ColumnChunks()[c].(*parquet.FileColumnChunk)
	if !ok {
		return false
	}
	md := &r.file.Metadata().RowGroups[g].Columns[c].MetaData
	if md.DictionaryPageOffset != 0 || md.Codec != format.Uncompressed && md.Codec != format.Zstd {
		return false
	}
	for _, e := range md.Encoding {
		switch e {
		case format.Plain, format.DeltaBinaryPacked, format.RLE, format.BitPacked:
		default:
			return false
		}
	}
	index, err := fc.OffsetIndexFrom(r.pages)
	if err != nil || index.NumPages() == 0 {
		return false
	}
	*p = p.buffers()
	p.r, p.index, p.rows, p.codec, p.page = r, index, fc.NumValues(), md.Codec, -1
	p.decimals, p.scale = r.scales[c] >= 0, r.scales[c]
	return true
}

// buffers is an empty rawPages holding p's buffers, to be reused.
func (p *rawPages) buffers() rawPages {
	return rawPages{vals: p.vals.Buffers(), raw: p.raw, bits: p.bits}
}

func (p *rawPages) seek(row int64) error { p.pos = row; return nil }

// read reads the next n rows into p.bits.
func (p *rawPages) read(n int) error {
	var err error
	p.bits, err = p.appendRows(p.bits[:0], p.pos, p.pos+int64(n))
	p.pos += int64(n)
	return err
}

// appendRequired consumes the next n rows, appending rows [lo, hi) of
// them to dst.
func (p *rawPages) appendRequired(dst []uint64, n, lo, hi int) ([]uint64, error) {
	dst, err := p.appendRows(dst, p.pos+int64(lo), p.pos+int64(hi))
	p.pos += int64(n)
	return dst, err
}

// appendRows appends the payloads of rows [from, to) of the row group.
func (p *rawPages) appendRows(dst []uint64, from, to int64) ([]uint64, error) {
	if from < 0 || to > p.rows {
		return dst, fmt.Errorf("%w: rows [%d, %d) of a chunk of %d", ErrCorrupt, from, to, p.rows)
	}
	for from < to {
		if p.page < 0 || from < p.start || from >= p.end {
			if err := p.load(p.pageOf(from)); err != nil {
				return dst, err
			}
		}
		k := min(to, p.end)
		a, b := int(from-p.start), int(k-p.start)
		n := len(dst)
		var err error
		if dst, err = p.vals.AppendRange(dst, a, b); err != nil {
			return dst, err
		}
		if p.decimals {
			decimal.Floats(dst[n:], p.scale)
		}
		from = k
	}
	return dst, nil
}

// pageOf returns the page holding row.
func (p *rawPages) pageOf(row int64) int {
	lo, hi := 0, p.index.NumPages() // the last page whose first row <= row
	for hi-lo > 1 {
		m := int(uint(lo+hi) >> 1)
		if p.index.FirstRowIndex(m) <= row {
			lo = m
		} else {
			hi = m
		}
	}
	return lo
}

// load reads page i and has p.vals decode it.
func (p *rawPages) load(i int) error {
	p.page = -1
	start, end := p.index.FirstRowIndex(i), p.rows
	if i+1 < p.index.NumPages() {
		end = p.index.FirstRowIndex(i + 1)
	}
	off, size := p.index.Offset(i), p.index.CompressedPageSize(i)
	if start < 0 || end <= start || off < 0 || size <= 0 || size > 1<<30 {
		return fmt.Errorf("%w: offset index entry %d: rows [%d, %d), %d bytes at %d", ErrCorrupt, i, start, end, size, off)
	}
	p.raw = slices.Grow(p.raw[:0], int(size)+page.Padding)[:size]
	if _, err := p.r.pages.ReadAt(p.raw, off); err != nil {
		return fmt.Errorf("sst: read page at %d: %w", off, err)
	}
	if err := p.vals.Load(i, p.raw, int32(end-start), p.codec, &decoder); err != nil {
		return err
	}
	p.page, p.start, p.end = i, start, end
	return nil
}

func (p *rawPages) payloads() []uint64 { return p.bits }

func (p *rawPages) close() {}
