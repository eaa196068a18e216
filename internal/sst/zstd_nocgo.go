//go:build !cgo

package sst

import (
	"io"

	kzstd "github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// ZstdEncoder names the zstd implementation SSTs are compressed with.
const ZstdEncoder = "github.com/klauspost/compress/zstd (pure Go; build with cgo for libzstd)"

// goEncoder is the pure-Go fallback: level 1 maps to its fastest mode,
// level 3 to its default mode (which matches zstd level 3's ratio at about
// half libzstd's speed).
type goEncoder struct{ codec zstd.Codec }

func newEncoder(level int) encoder {
	l := zstd.SpeedDefault
	if level <= 1 {
		l = zstd.SpeedFastest
	}
	return &goEncoder{codec: zstd.Codec{Level: l}}
}

func (e *goEncoder) encode(dst, src []byte) ([]byte, error) { return e.codec.Encode(dst, src) }

// streamWindow is the window of a stream: its encoder's history is a few
// times it (the default, 8 MiB, would make a stream cost more than the
// index it compresses).
const streamWindow = 1 << 20

// stream is a synchronous encoder (concurrency 1: no goroutines, blocks
// compressed as they fill) at the codec's level, options as encode's.
func (e *goEncoder) stream(w io.Writer) io.WriteCloser {
	z, err := kzstd.NewWriter(w, kzstd.WithEncoderLevel(e.codec.Level), kzstd.WithEncoderConcurrency(1),
		kzstd.WithWindowSize(streamWindow), kzstd.WithZeroFrames(true), kzstd.WithEncoderCRC(false))
	if err != nil {
		panic(err) // constant options
	}
	return z
}
