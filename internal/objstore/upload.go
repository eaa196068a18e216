package objstore

import (
	"context"
	"io"
	"os"
	"path/filepath"

	"gocloud.dev/blob"
)

// Uploader is implemented by buckets that can write an object from a
// reader without holding it in memory. The reader is re-read from offset 0
// on every attempt, so retries are safe.
type Uploader interface {
	Upload(ctx context.Context, key string, r io.ReaderAt, size int64) error
}

// Upload writes size bytes of r as key (replacing it), streaming where b
// supports it and reading r into memory otherwise.
func Upload(ctx context.Context, b Bucket, key string, r io.ReaderAt, size int64) error {
	if u, ok := b.(Uploader); ok {
		return u.Upload(ctx, key, r, size)
	}
	data := make([]byte, size)
	if _, err := r.ReadAt(data, 0); err != nil && err != io.EOF {
		return &OpError{Op: OpPut, Key: key, Cause: err}
	}
	return b.Put(ctx, key, data)
}

// Upload retries transient failures, re-reading r from the start.
func (s *Store) Upload(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return s.do(ctx, OpPut, func() error { return Upload(ctx, s.inner, key, r, size) })
}

func (c *cloudBucket) Upload(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	src := io.NewSectionReader(r, 0, size)
	if c.file != nil {
		return classify(OpPut, key, c.file.writeFrom(key, src))
	}
	w, err := c.b.NewWriter(ctx, key, &blob.WriterOptions{})
	if err != nil {
		return classify(OpPut, key, err)
	}
	if _, err := io.Copy(w, src); err != nil {
		w.Close()
		return classify(OpPut, key, err)
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
	defer os.Remove(tmp)
	if _, err := io.Copy(fd, src); err != nil {
		fd.Close()
		return err
	}
	if err := fd.Sync(); err != nil {
		fd.Close()
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
