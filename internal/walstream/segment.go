// Package walstream is a WAL stream as objects: the
// segments' envelope (headers, block bounds, checksum), sealing a stream
// with a fence, and releasing segments that no region needs any more.
//
// It knows which regions a segment holds and whether it is a fence, not
// how their entries are encoded: internal/wal encodes and decodes the
// blocks' bodies and writes the stream. So the coordinator can seal and
// release a dropped table's streams without linking the data plane
// (docs/design-decisions.md, "The coordinator reads streams by their
// envelope"). The format is specified in docs/format/wal.md.
package walstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/stratadb/strata/internal/layout"
)

// A stream segment holds the entries of several regions, one block per
// region. The blocks' headers come first, so a reader learns which
// regions a segment holds from its first bytes.
const (
	magic         = "STRS"
	formatVersion = 1
	kindData      = 0
	kindFence     = 1
	// HeaderLen is the segment header's length: magic, version, kind,
	// blocks. The blocks' headers follow it.
	HeaderLen = 4 + 1 + 1 + 4
	// BlockHeaderLen is one block header's length: table, region,
	// epoch, first sequence, entries, stored length, codec, raw length.
	BlockHeaderLen = 4 + 4 + 8 + 8 + 4 + 4 + 1 + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt: a segment does not decode or fails its checksum. It is
// internal/wal's ErrCorrupt too, for both of its formats.
var ErrCorrupt = errors.New("wal: corrupt segment")

// Block is one region's block in a segment, as its header describes it.
type Block struct {
	Region   layout.RegionID
	Epoch    uint64 // the region owner's manifest epoch
	FirstSeq uint64 // the region's sequence of the block's first entry
	Count    uint32 // entries
	Codec    byte   // how Body is encoded (internal/wal's)
	Raw      uint32 // Body's length once decoded, for the codecs that compress
	// Body is the block's stored bytes. Decode sets it (a slice of the
	// segment's data); Append ignores it.
	Body []byte
}

// Segment is one stream object's envelope. A fence has no blocks, or
// only empty ones naming the regions whose new owner wrote it.
type Segment struct {
	Number uint64
	Fence  bool
	Blocks []Block
}

// Has reports whether the segment has a block of region.
func (s *Segment) Has(region layout.RegionID) (Block, bool) {
	for _, b := range s.Blocks {
		if b.Region == region {
			return b, true
		}
	}
	return Block{}, false
}

// Append appends a segment's bytes to dst: the headers of blocks (their
// stored lengths patched in), each block's body as body appends it (nil:
// none), and the checksum.
func Append(dst []byte, fence bool, blocks []Block, body func(dst []byte, i int) []byte) []byte {
	dst = AppendHead(dst, magic, formatVersion, fence)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(blocks)))
	hdr := len(dst)
	for _, b := range blocks {
		dst = binary.LittleEndian.AppendUint32(dst, b.Region.Table)
		dst = binary.LittleEndian.AppendUint32(dst, b.Region.Region)
		dst = binary.LittleEndian.AppendUint64(dst, b.Epoch)
		dst = binary.LittleEndian.AppendUint64(dst, b.FirstSeq)
		dst = binary.LittleEndian.AppendUint32(dst, b.Count)
		dst = binary.LittleEndian.AppendUint32(dst, 0) // stored length, below
		dst = append(dst, b.Codec)
		dst = binary.LittleEndian.AppendUint32(dst, b.Raw)
	}
	if body != nil {
		for i := range blocks {
			start := len(dst)
			dst = body(dst, i)
			binary.LittleEndian.PutUint32(dst[hdr+i*BlockHeaderLen+28:], uint32(len(dst)-start))
		}
	}
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst, castagnoli))
}

// Fence returns the bytes of a fence segment naming region, whose owner
// of epoch writes it.
func Fence(region layout.RegionID, epoch uint64) []byte {
	return Append(nil, true, []Block{{Region: region, Epoch: epoch}}, nil)
}

// AppendHead appends the start of the envelope both WAL formats share
// (Envelope checks it): magic, version and kind (data or fence).
func AppendHead(dst []byte, magic string, version byte, fence bool) []byte {
	dst = append(dst, magic...)
	dst = append(dst, version)
	if fence {
		return append(dst, kindFence)
	}
	return append(dst, kindData)
}

// Envelope checks the envelope both WAL formats share (a stream segment's
// and a region WAL's, told apart by magic): at least headerLen bytes and a
// trailing CRC-32C, the checksum, the magic and the format version. It
// returns the bytes before the checksum, and bad, which makes the errors
// of segment number (ErrCorrupt).
func Envelope(number uint64, data []byte, magic string, version byte, headerLen int) (body []byte, bad func(format string, args ...any) error, err error) {
	bad = func(format string, args ...any) error {
		return fmt.Errorf("%w %d: %s", ErrCorrupt, number, fmt.Sprintf(format, args...))
	}
	if len(data) < headerLen+4 {
		return nil, bad, bad("%d bytes is shorter than a header", len(data))
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, bad, bad("checksum %08x, want %08x", got, sum)
	}
	if string(body[:4]) != magic {
		return nil, bad, bad("bad magic %q", body[:4])
	}
	if body[4] != version {
		return nil, bad, bad("unknown format version %d", body[4])
	}
	return body, bad, nil
}

// Decode parses a segment's envelope: it checks the checksum and the
// headers and slices each block's body, which it does not decode.
func Decode(number uint64, data []byte) (*Segment, error) {
	body, bad, err := Envelope(number, data, magic, formatVersion, HeaderLen)
	if err != nil {
		return nil, err
	}
	s := &Segment{Number: number, Fence: body[5] == kindFence}
	n := binary.LittleEndian.Uint32(body[6:])
	if uint64(n)*BlockHeaderLen > uint64(len(body)-HeaderLen) {
		return nil, bad("%d blocks in %d bytes", n, len(body))
	}
	s.Blocks = make([]Block, n)
	hdr := body[HeaderLen:]
	rest := body[HeaderLen+int(n)*BlockHeaderLen:]
	for i := range s.Blocks {
		h := hdr[i*BlockHeaderLen:]
		b := &s.Blocks[i]
		b.Region = layout.RegionID{Table: binary.LittleEndian.Uint32(h), Region: binary.LittleEndian.Uint32(h[4:])}
		b.Epoch = binary.LittleEndian.Uint64(h[8:])
		b.FirstSeq = binary.LittleEndian.Uint64(h[16:])
		b.Count = binary.LittleEndian.Uint32(h[24:])
		size := int(binary.LittleEndian.Uint32(h[28:]))
		b.Codec, b.Raw = h[32], binary.LittleEndian.Uint32(h[33:])
		if size > len(rest) {
			return nil, bad("block %d: %d bytes, %d left", i, size, len(rest))
		}
		b.Body = rest[:size:size]
		rest = rest[size:]
	}
	if len(rest) != 0 {
		return nil, bad("%d trailing bytes", len(rest))
	}
	return s, nil
}
