package sst

import (
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/format"
)

// Compression is the zstd level an SST is written at. Both levels write
// standard zstd frames; readers never need to know which was used.
type Compression int

const (
	// CompressDefault is zstd level 3, zstd's own default: for compaction
	// outputs, the long-lived files.
	CompressDefault Compression = iota
	// CompressFast is zstd level 1: for flushes, whose files are
	// short-lived inputs of compaction and must keep up with ingest.
	CompressFast
)

// zstdLevel is the reference zstd level of c.
func (c Compression) zstdLevel() int {
	if c == CompressFast {
		return 1
	}
	return 3
}

// zstdCodec is the Parquet codec SSTs are written with. Encoding uses
// libzstd through cgo where the build has cgo (zstd_cgo.go), about twice as
// fast as the pure-Go encoder for slightly smaller output; without cgo it
// falls back to github.com/klauspost/compress (zstd_nocgo.go). Decoding
// always uses the pure-Go decoder, which is fast (assembly) and is what
// parquet-go uses to read any zstd file.
type zstdCodec struct{ enc encoder }

func newZstdCodec(c Compression) *zstdCodec {
	return &zstdCodec{enc: newEncoder(c.zstdLevel())}
}

// codecs are shared by every writer, so their pooled encoder state is too.
var codecs = map[Compression]*zstdCodec{
	CompressDefault: newZstdCodec(CompressDefault),
	CompressFast:    newZstdCodec(CompressFast),
}

func codecFor(c Compression) (*zstdCodec, error) {
	if z, ok := codecs[c]; ok {
		return z, nil
	}
	return nil, fmt.Errorf("sst: unknown compression %d", c)
}

func (*zstdCodec) String() string                            { return "ZSTD" }
func (*zstdCodec) CompressionCodec() format.CompressionCodec { return format.Zstd }

func (c *zstdCodec) Encode(dst, src []byte) ([]byte, error) { return c.enc.encode(dst, src) }

// decoder is shared: its pool of decoders is safe for concurrent use.
var decoder zstd.Codec

func (*zstdCodec) Decode(dst, src []byte) ([]byte, error) { return decoder.Decode(dst, src) }

// stream starts one zstd frame written to w as it is compressed: for an
// object built a piece at a time (the series index), whose uncompressed
// bytes are never whole in memory. Its Close ends the frame, and must be
// called whatever happened: it frees the stream's state (libzstd's, outside
// the Go heap).
func (c *zstdCodec) stream(w io.Writer) io.WriteCloser { return c.enc.stream(w) }

// encoder compresses one page at a time, or a stream; safe for concurrent
// use.
type encoder interface {
	encode(dst, src []byte) ([]byte, error)
	stream(w io.Writer) io.WriteCloser
}
