package objstore

import (
	"context"
	"io"
	"math"
	"os"
	"path/filepath"

	"gocloud.dev/blob"

	"github.com/stratadb/strata/internal/freelist"
)

// Uploader is implemented by buckets that can write an object from a
// reader without holding it in memory. The reader is re-read from offset 0
// on every attempt, so retries are safe.
//
// If reading r fails, the upload fails and no object is written: a store
// never sees the end of a body whose reader failed.
type Uploader interface {
	Upload(ctx context.Context, key string, r io.ReaderAt, size int64) error
}

// Upload writes size bytes of r as key (replacing it), streaming where b
// supports it and reading r into memory otherwise. A negative size reads r
// until it reports io.EOF, for a source still being written (its ReadAt
// waits for the bytes it is asked for).
func Upload(ctx context.Context, b Bucket, key string, r io.ReaderAt, size int64) error {
	if u, ok := b.(Uploader); ok {
		return u.Upload(ctx, key, r, size)
	}
	data, err := io.ReadAll(section(r, size))
	if err != nil {
		return &OpError{Op: OpPut, Key: key, Cause: err}
	}
	return b.Put(ctx, key, data)
}

// sourceReader records a read error of an upload's source: that is the
// caller's failure, not the store's, and never worth a retry.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// uploadError is the error of a failed copy from src.
func uploadError(key string, src *sourceReader, err error) error {
	if src.err != nil {
		return &OpError{Op: OpPut, Key: key, Cause: src.err}
	}
	return classify(OpPut, key, err)
}

// section reads r from 0 to size, or to its EOF if size < 0.
func section(r io.ReaderAt, size int64) io.Reader {
	if size < 0 {
		size = math.MaxInt64
	}
	return io.NewSectionReader(r, 0, size)
}

// uploadBuffer is the copy buffer of a streaming upload: large, so that
// a file upload makes few system calls.
const uploadBuffer = 1 << 20

// uploadBuffers are kept for the next uploads: one allocated for each
// upload was a quarter of a datanode's object-store CPU in a load (fresh
// memory: a megabyte zeroed and faulted in, for every SST uploaded).
// Few uploads run at once on a node.
var uploadBuffers = freelist.New[*[]byte](4)

// copyUpload copies src to dst through a kept buffer.
func copyUpload(dst io.Writer, src io.Reader) error {
	bp, ok := uploadBuffers.Get()
	if !ok {
		b := make([]byte, uploadBuffer)
		bp = &b
	}
	defer uploadBuffers.Put(bp)
	_, err := io.CopyBuffer(onlyWriter{dst}, src, *bp)
	return err
}

// onlyWriter hides a destination's ReadFrom, so that io.CopyBuffer uses its
// buffer.
type onlyWriter struct{ io.Writer }

// Upload retries transient failures, re-reading r from the start.
func (s *Store) Upload(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return s.do(ctx, OpPut, func() error { return Upload(ctx, s.inner, key, r, size) })
}

func (c *cloudBucket) Upload(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	src := &sourceReader{r: section(r, size)}
	if c.file != nil {
		if err := c.file.writeFrom(key, src); err != nil {
			return uploadError(key, src, err)
		}
		return nil
	}
	// NB: closing a blob writer commits what was written; the way to
	// abort it is to cancel its context first. A multipart upload is then
	// aborted, and a single PUT is never sent.
	wctx, abort := context.WithCancel(ctx)
	defer abort()
	w, err := c.b.NewWriter(wctx, key, &blob.WriterOptions{})
	if err != nil {
		return classify(OpPut, key, err)
	}
	if err := copyUpload(w, src); err != nil {
		abort()
		_ = w.Close() // aborted: the upload's error is the one returned
		return uploadError(key, src, err)
	}
	return classify(OpPut, key, w.Close())
}

// writeFrom is write (a replacing Put) from a reader.
func (f *fileWriter) writeFrom(key string, src io.Reader) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	fd, err := os.CreateTemp(filepath.Join(f.dir, tmpDir), "upload-")
	if err != nil {
		return err
	}
	tmp := fd.Name()
	defer func() { _ = os.Remove(tmp) }()
	if err := copyUpload(fd, src); err != nil {
		_ = fd.Close()
		return err
	}
	if err := fd.Sync(); err != nil {
		_ = fd.Close()
		return err
	}
	if err := fd.Close(); err != nil {
		return err
	}
	dst := f.path(key)
	parent := filepath.Dir(dst)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	return syncDir(parent)
}
