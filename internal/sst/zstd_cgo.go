//go:build cgo

package sst

import (
	"fmt"
	"io"
	"sync"

	czstd "github.com/DataDog/zstd"
)

// ZstdEncoder names the zstd implementation SSTs are compressed with.
const ZstdEncoder = "libzstd through cgo (github.com/DataDog/zstd)"

// cgoEncoder compresses with libzstd. A compression context holds a few
// MiB of tables; contexts are pooled so that each concurrent encode has
// its own and none is rebuilt per page.
type cgoEncoder struct {
	level int
	ctxs  sync.Pool
}

func newEncoder(level int) encoder {
	e := &cgoEncoder{level: level}
	e.ctxs.New = func() any { return czstd.NewCtx() }
	return e
}

func (e *cgoEncoder) encode(dst, src []byte) ([]byte, error) {
	c := e.ctxs.Get().(czstd.Ctx)
	defer e.ctxs.Put(c)
	out, err := c.CompressLevel(dst[:0], src, e.level)
	if err != nil {
		return nil, fmt.Errorf("sst: zstd level %d: %w", e.level, err)
	}
	return out, nil
}

// stream is a libzstd stream at the encoder's level.
func (e *cgoEncoder) stream(w io.Writer) io.WriteCloser { return czstd.NewWriterLevel(w, e.level) }
