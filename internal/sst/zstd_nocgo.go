//go:build !cgo

package sst

import (
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
