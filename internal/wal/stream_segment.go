package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/klauspost/compress/s2"

	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/walstream"
)

// A stream segment holds the entries of several regions, one block per
// region (docs/format/wal.md, "Bytes"). Its envelope (the headers, the
// blocks' bounds, the checksum) is internal/walstream's; the blocks'
// bodies are this package's.
const (
	codecRaw = 0
	codecS2  = 1 // the body is chunks: uvarint length, then an S2 block
	// The body is chunks as codecS2's, each of compact entries
	// (compact.go), every value with its kind.
	codecS2Compact = 2
	// As codecS2Compact, a put's kinds carried from the put before when
	// they are the same (compact.go). The writer writes this one for a
	// block of compact chunks only; codecs below it are read, for
	// segments earlier versions wrote.
	codecS2Kinds = 3
	// Chunks of two kinds: each is uvarint(length<<1 | forwarded), then
	// an S2 block of compact entries as codecS2Kinds' (forwarded 0) or of
	// a forwarded batch as the datanode that received it encoded it
	// (forwarded 1, AppendChunk), which the block's reader decodes
	// (Forwarded). The writer writes it for a block with a forwarded
	// chunk.
	codecS2Mixed = 4
)

// CodecMixed is the codec of a block with a forwarded chunk (for tests
// that look at segments).
const CodecMixed = codecS2Mixed

// Forwarded decodes a forwarded chunk of a block (the bytes given to
// Member.AppendChunk, decompressed), appending its entries to dst in the
// order they were appended. Reading a block with such a chunk needs it.
type Forwarded func(data []byte, dst []row.Entry) ([]row.Entry, error)

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
	fwd    []bool // fwd[i]: chunks[i] is a forwarded chunk, unframed (AppendChunk)
	count  int
	raw    int
}

// mixed reports whether a chunk of the block is forwarded: the block is
// then codecS2Mixed.
func (b *Block) mixed() bool { return slices.Contains(b.fwd, true) }

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
	hdrs := make([]walstream.Block, len(blocks))
	for i, b := range blocks {
		hdrs[i] = walstream.Block{Region: b.Region, Epoch: b.Epoch, FirstSeq: b.FirstSeq, Count: uint32(b.entries()), Codec: codecRaw, Raw: uint32(b.raw)}
		switch {
		case b.mixed():
			hdrs[i].Codec = codecS2Mixed
		case b.chunks != nil:
			hdrs[i].Codec = codecS2Kinds
		}
	}
	return walstream.Append(dst, fence, hdrs, func(dst []byte, i int) []byte {
		b := &blocks[i]
		if b.mixed() {
			for j, c := range b.chunks {
				if b.fwd[j] {
					dst = binary.AppendUvarint(dst, uint64(len(c))<<1|1)
					dst = append(dst, c...)
					continue
				}
				n, k := binary.Uvarint(c) // a compact chunk, framed as codecS2Kinds frames it
				dst = binary.AppendUvarint(dst, n<<1)
				dst = append(dst, c[k:]...)
			}
			return dst
		}
		if b.chunks != nil {
			for _, c := range b.chunks {
				dst = append(dst, c...)
			}
			return dst
		}
		for j := range blocks[i].Entries {
			dst = appendEntry(dst, &blocks[i].Entries[j])
		}
		return dst
	})
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
	bp := getScratch(pre + s2.MaxEncodedLen(len(src)))
	buf := (*bp)[:cap(*bp)]
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

// getScratch returns a kept buffer of at least n bytes' capacity. One too
// small is replaced by one with room to spare: appends' sizes vary, and a
// buffer grown to each one's exact size was grown again on most appends
// (fresh memory zeroed, a hundredth of a write's CPU).
func getScratch(n int) *[]byte {
	bp, ok := scratch.Get()
	if !ok {
		bp = new([]byte)
	}
	if cap(*bp) < n {
		*bp = make([]byte, 0, n+n/4)
	}
	return bp
}

func putScratch(bp *[]byte) {
	if cap(*bp) <= maxScratch {
		*bp = (*bp)[:0]
		scratch.Put(bp)
	}
}

// decodeChunks decompresses a chunked body of raw bytes, calling each (if
// set) with each chunk's bytes as they are decompressed, and whether the
// chunk is forwarded (tagged: codecS2Mixed's framing).
func decodeChunks(data []byte, raw int, tagged bool, each func(chunk []byte, fwd bool) error) ([]byte, error) {
	out := make([]byte, 0, raw)
	for len(data) > 0 {
		n, k := binary.Uvarint(data)
		fwd := false
		if tagged {
			n, fwd = n>>1, n&1 == 1
		}
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
			if err := each(d, fwd); err != nil {
				return nil, err
			}
		}
	}
	if len(out) != raw {
		return nil, fmt.Errorf("%d bytes decompressed, want %d", len(out), raw)
	}
	return out, nil
}

// DecodeStream parses a stream segment object, every block's entries
// included; fwd decodes forwarded chunks (nil: a block with one is an
// error).
func DecodeStream(number uint64, data []byte, fwd Forwarded) (*StreamSegment, error) {
	env, err := walstream.Decode(number, data)
	if err != nil {
		return nil, err
	}
	s := &StreamSegment{Number: number, Fence: env.Fence, Blocks: make([]Block, len(env.Blocks))}
	for i := range env.Blocks {
		b, err := decodeBlock(&env.Blocks[i], fwd)
		if err != nil {
			return nil, fmt.Errorf("%w %d: block %d: %v", ErrCorrupt, number, i, err)
		}
		s.Blocks[i] = b
	}
	return s, nil
}

// decodeBlock decodes a block's entries, its forwarded chunks' with fwd.
func decodeBlock(h *walstream.Block, fwd Forwarded) (Block, error) {
	b := Block{Region: h.Region, Epoch: h.Epoch, FirstSeq: h.FirstSeq}
	count, raw, data := h.Count, int(h.Raw), h.Body
	switch h.Codec {
	case codecRaw:
	case codecS2:
		out, err := decodeChunks(data, raw, false, nil)
		if err != nil {
			return b, err
		}
		data = out
	case codecS2Compact, codecS2Kinds, codecS2Mixed:
		if uint64(count) > uint64(raw) {
			return b, fmt.Errorf("%d entries in %d bytes", count, raw)
		}
		// Each chunk's entries refer only to the chunk's own.
		b.Entries = make([]row.Entry, 0, count)
		_, err := decodeChunks(data, raw, h.Codec == codecS2Mixed, func(chunk []byte, forwarded bool) (err error) {
			at := len(b.Entries)
			switch {
			case !forwarded:
				b.Entries, err = decodeCompactChunk(b.Entries, chunk, h.Codec != codecS2Compact)
			case fwd == nil:
				err = errors.New("a forwarded chunk, and no decoder for one")
			default:
				b.Entries, err = fwd(chunk, b.Entries)
			}
			if err != nil {
				return fmt.Errorf("entry %d: %w", at, err)
			}
			if len(b.Entries) > int(count) {
				return fmt.Errorf("more than the %d entries the header says", count)
			}
			return nil
		})
		if err != nil {
			return b, err
		}
		if len(b.Entries) != int(count) {
			return b, fmt.Errorf("%d entries, the header says %d", len(b.Entries), count)
		}
		for j := range b.Entries {
			b.Entries[j].Seq = b.FirstSeq + uint64(j)
		}
		return b, nil
	default:
		return b, fmt.Errorf("unknown codec %d", h.Codec)
	}
	if uint64(count) > uint64(len(data)) {
		return b, fmt.Errorf("%d entries in %d bytes", count, len(data))
	}
	d := decoder{buf: data, str: string(data)}
	b.Entries = make([]row.Entry, count)
	for j := range b.Entries {
		e := &b.Entries[j]
		e.Seq = b.FirstSeq + uint64(j)
		if err := d.entry(e); err != nil {
			return b, fmt.Errorf("entry %d: %v", j, err)
		}
	}
	if d.off != len(data) {
		return b, fmt.Errorf("%d bytes, entries took %d", len(data), d.off)
	}
	return b, nil
}
