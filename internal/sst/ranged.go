package sst

import (
	"context"
	"fmt"
	"io"

	"github.com/stratadb/strata/internal/objstore"
)

// rangeReader reads a file larger than WholeFileLimit from the store in
// ranges, as parquet-go asks for them, serving what lies in the tail it
// read at open from there.
type rangeReader struct {
	ctx   context.Context
	store objstore.Bucket
	key   string
	size  int64
	// The file's last bytes, from tailOff: the footer and page indexes,
	// which opening reads piece by piece (five reads of the store,
	// one after another, without it).
	tail    []byte
	tailOff int64
}

// tailBytes is how much of a file's end Open reads at once: about a
// thousandth of the file, which holds a Strata SST's footer and page
// indexes (a 512 MiB file's are about 400 KiB), within [64 KiB, 1 MiB].
func tailBytes(size int64) int64 {
	return min(size, max(64<<10, min(1<<20, size/1000)))
}

// readTail reads the file's last tailBytes.
func (r *rangeReader) readTail(size int64) error {
	n := tailBytes(size)
	data, err := r.store.GetRange(r.ctx, r.key, size-n, n)
	if err != nil {
		return fmt.Errorf("sst: read %s: %w", r.key, err)
	}
	if int64(len(data)) != n {
		return fmt.Errorf("%w: %s is shorter than the manifest's %d bytes", ErrCorrupt, r.key, size)
	}
	r.tail, r.tailOff = data, size-n
	return nil
}

// fromTail serves a read that lies within the tail.
func (r *rangeReader) fromTail(p []byte, off int64) (int, bool) {
	if off >= r.tailOff && off+int64(len(p)) <= r.tailOff+int64(len(r.tail)) {
		return copy(p, r.tail[off-r.tailOff:]), true
	}
	return 0, false
}

func (r *rangeReader) ReadAt(p []byte, off int64) (int, error) {
	if n, ok := r.fromTail(p, off); ok {
		return n, nil
	}
	n, err := r.store.ReadRange(r.ctx, r.key, off, p)
	if err != nil {
		return 0, fmt.Errorf("sst: read %s at %d: %w", r.key, off, err)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// windowReader serves reads within [base, base+len(data)) from data, and
// any other from rest.
type windowReader struct {
	base int64
	data []byte
	rest io.ReaderAt
}

func (w *windowReader) ReadAt(p []byte, off int64) (int, error) {
	if off < w.base || off+int64(len(p)) > w.base+int64(len(w.data)) {
		return w.rest.ReadAt(p, off)
	}
	return copy(p, w.data[off-w.base:]), nil
}
