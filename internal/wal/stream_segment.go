package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/klauspost/compress/s2"

	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/row"
)

// A stream segment holds the entries of several regions, one block per
// region (docs/format/wal.md, "Streams"). The blocks' headers come first, so
// a reader learns which regions a segment holds from its first bytes.
const (
	streamMagic     = "STRS"
	streamHeaderLen = 4 + 1 + 1 + 4 // magic, version, kind, blocks
	blockHeaderLen  = 4 + 4 + 8 + 8 + 4 + 4 + 1 + 4

	codecRaw = 0
	codecS2  = 1 // the body is chunks: uvarint length, then an S2 block
	// The body is chunks as codecS2's, each of compact entries
	// (compact.go), every value with its kind.
	codecS2Compact = 2
	// As codecS2Compact, a put's kinds carried from the put before when
	// they are the same (compact.go). The writer writes only this one;
	// the others are read, for segments earlier versions wrote.
	codecS2Kinds = 3
)

// Block is one region's entries in a stream segment.
type Block struct {
	Region   layout.RegionID
	Epoch    uint64 // the region owner's manifest epoch
	FirstSeq uint64 // the region's sequence of Entries[0]; consecutive
	Entries  []row.Entry
	// chunks are the entries already encoded and compressed, an S2
	// chunk of raw bytes per append (the writer compresses on each
	// append's goroutine), count entries in all; Entries is then empty
	// (the appends hold them). nil: encode Entries, uncompressed. The
	// chunks are the appends' pooled buffers: valid until the segment's
	// bytes are made, then dropped.
	chunks [][]byte
	count  int
	raw    int
}

// entries is the number of entries the block holds.
func (b *Block) entries() int { return max(b.count, len(b.Entries)) }

// StreamSegment is one decoded stream object. A fence has no blocks, or
// only empty ones naming the regions whose new owner wrote it.
type StreamSegment struct {
	Number uint64
	Fence  bool
	Blocks []Block
}

// Block returns region's block, if the segment has one.
func (s *StreamSegment) Block(region layout.RegionID) (*Block, bool) {
	for i := range s.Blocks {
		if s.Blocks[i].Region == region {
			return &s.Blocks[i], true
		}
	}
	return nil, false
}

// encodeStream appends a stream segment's bytes to dst.
func encodeStream(dst []byte, fence bool, blocks []Block) []byte {
	dst = append(dst, streamMagic...)
	dst = append(dst, formatVersion)
	if fence {
		dst = append(dst, kindFence)
	} else {
		dst = append(dst, kindData)
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(blocks)))
	// Headers first, with each block's byte length patched in after its
	// entries are encoded.
	hdr := len(dst)
	for _, b := range blocks {
		dst = binary.LittleEndian.AppendUint32(dst, b.Region.Table)
		dst = binary.LittleEndian.AppendUint32(dst, b.Region.Region)
		dst = binary.LittleEndian.AppendUint64(dst, b.Epoch)
		dst = binary.LittleEndian.AppendUint64(dst, b.FirstSeq)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(b.entries()))
		dst = binary.LittleEndian.AppendUint32(dst, 0) // stored length, below
		codec := byte(codecRaw)
		if b.chunks != nil {
			codec = codecS2Kinds
		}
		dst = append(dst, codec)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(b.raw))
	}
	for i := range blocks {
		start := len(dst)
		if blocks[i].chunks != nil {
			for _, c := range blocks[i].chunks {
				dst = append(dst, c...)
			}
		} else {
			for j := range blocks[i].Entries {
				dst = appendEntry(dst, &blocks[i].Entries[j])
			}
		}
		binary.LittleEndian.PutUint32(dst[hdr+i*blockHeaderLen+28:], uint32(len(dst)-start))
	}
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst, castagnoli))
}

// The writer compresses each append on its caller's goroutine, as one
// chunk, so a segment carries more rows per PUT for the same bytes. S2
// (Snappy's faster successor) rather than zstd: zstd's fastest level took
// 16% of a 2-core standalone's CPU at 250k rows/s of 10,000-row requests,
// and S2 kept the same MinIO throughput (docs/cost.md).

// chunk compresses src as one chunk: its uvarint length, then the S2
// block.
// The chunk is in a pooled buffer, which it returns: the stream gives it
// back once the chunk is in a segment's bytes (a buffer of S2's worst
// case, allocated for each append, or a copy of the chunk, were most of
// the WAL's allocations).
func chunk(src []byte) ([]byte, *[]byte) {
	const pre = binary.MaxVarintLen64
	bp := getScratch()
	buf := slices.Grow((*bp)[:0], pre+s2.MaxEncodedLen(len(src)))
	buf = buf[:cap(buf)]
	enc := s2.Encode(buf[pre:], src)
	start := pre - len(binary.AppendUvarint(nil, uint64(len(enc))))
	binary.PutUvarint(buf[start:], uint64(len(enc)))
	*bp = buf
	return buf[start : pre+len(enc)], bp
}

// scratch holds the encoding buffers of appends: the raw entries and
// their S2 block, both garbage once a chunk is made. They are kept for the
// next appends (freelist: a sync.Pool's were mostly gone by the next
// append on a busy node, and megabytes allocated again).
var scratch = freelist.New[*[]byte](16)

const maxScratch = 16 << 20 // larger buffers are not kept

func getScratch() *[]byte {
	if bp, ok := scratch.Get(); ok {
		return bp
	}
	return new([]byte)
}

func putScratch(bp *[]byte) {
	if cap(*bp) <= maxScratch {
		*bp = (*bp)[:0]
		scratch.Put(bp)
	}
}

// decodeChunks decompresses a chunked body of raw bytes, calling each (if
// set) with each chunk's bytes as they are decompressed.
func decodeChunks(data []byte, raw int, each func([]byte) error) ([]byte, error) {
	out := make([]byte, 0, raw)
	for len(data) > 0 {
		n, k := binary.Uvarint(data)
		if k <= 0 || n > uint64(len(data)-k) {
			return nil, fmt.Errorf("truncated chunk")
		}
		chunk := data[k : k+int(n)]
		data = data[k+int(n):]
		m, err := s2.DecodedLen(chunk)
		if err != nil || m > raw-len(out) {
			return nil, fmt.Errorf("chunk of %d bytes in %d left: %v", m, raw-len(out), err)
		}
		d, err := s2.Decode(out[len(out):len(out)+m], chunk)
		if err != nil {
			return nil, fmt.Errorf("s2: %w", err)
		}
		out = out[:len(out)+len(d)]
		if each != nil {
			if err := each(d); err != nil {
				return nil, err
			}
		}
	}
	if len(out) != raw {
		return nil, fmt.Errorf("%d bytes decompressed, want %d", len(out), raw)
	}
	return out, nil
}

// DecodeStream parses a stream segment object.
func DecodeStream(number uint64, data []byte) (*StreamSegment, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w %d: %s", ErrCorrupt, number, fmt.Sprintf(format, args...))
	}
	if len(data) < streamHeaderLen+4 {
		return nil, bad("%d bytes is shorter than a header", len(data))
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, bad("checksum %08x, want %08x", got, sum)
	}
	if string(body[:4]) != streamMagic {
		return nil, bad("bad magic %q", body[:4])
	}
	if body[4] != formatVersion {
		return nil, bad("unknown format version %d", body[4])
	}
	s := &StreamSegment{Number: number, Fence: body[5] == kindFence}
	n := binary.LittleEndian.Uint32(body[6:])
	if uint64(n)*blockHeaderLen > uint64(len(body)-streamHeaderLen) {
		return nil, bad("%d blocks in %d bytes", n, len(body))
	}
	s.Blocks = make([]Block, n)
	hdr := body[streamHeaderLen:]
	rest := body[streamHeaderLen+int(n)*blockHeaderLen:]
	for i := range s.Blocks {
		h := hdr[i*blockHeaderLen:]
		b := &s.Blocks[i]
		b.Region = layout.RegionID{Table: binary.LittleEndian.Uint32(h), Region: binary.LittleEndian.Uint32(h[4:])}
		b.Epoch = binary.LittleEndian.Uint64(h[8:])
		b.FirstSeq = binary.LittleEndian.Uint64(h[16:])
		count := binary.LittleEndian.Uint32(h[24:])
		size := int(binary.LittleEndian.Uint32(h[28:]))
		codec, raw := h[32], int(binary.LittleEndian.Uint32(h[33:]))
		if size > len(rest) {
			return nil, bad("block %d: %d bytes, %d left", i, size, len(rest))
		}
		data := rest[:size]
		rest = rest[size:]
		switch codec {
		case codecRaw:
		case codecS2:
			out, err := decodeChunks(data, raw, nil)
			if err != nil {
				return nil, bad("block %d: %v", i, err)
			}
			data = out
		case codecS2Compact, codecS2Kinds:
			if uint64(count) > uint64(raw) {
				return nil, bad("block %d: %d entries in %d bytes", i, count, raw)
			}
			// Each chunk's entries refer only to the chunk's own.
			b.Entries = make([]row.Entry, 0, count)
			_, err := decodeChunks(data, raw, func(chunk []byte) (err error) {
				if b.Entries, err = decodeCompactChunk(b.Entries, chunk, codec == codecS2Kinds); err != nil {
					return fmt.Errorf("entry %d: %w", len(b.Entries), err)
				}
				return nil
			})
			if err != nil {
				return nil, bad("block %d: %v", i, err)
			}
			if len(b.Entries) != int(count) {
				return nil, bad("block %d: %d entries, the header says %d", i, len(b.Entries), count)
			}
			for j := range b.Entries {
				b.Entries[j].Seq = b.FirstSeq + uint64(j)
			}
			continue
		default:
			return nil, bad("block %d: unknown codec %d", i, codec)
		}
		if uint64(count) > uint64(len(data)) {
			return nil, bad("block %d: %d entries in %d bytes", i, count, len(data))
		}
		d := decoder{buf: data, str: string(data)}
		b.Entries = make([]row.Entry, count)
		for j := range b.Entries {
			e := &b.Entries[j]
			e.Seq = b.FirstSeq + uint64(j)
			if err := d.entry(e); err != nil {
				return nil, bad("block %d entry %d: %v", i, j, err)
			}
		}
		if d.off != len(data) {
			return nil, bad("block %d: %d bytes, entries took %d", i, len(data), d.off)
		}
	}
	if len(rest) != 0 {
		return nil, bad("%d trailing bytes", len(rest))
	}
	return s, nil
}
