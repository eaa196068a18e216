package objstore

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// fileWriter makes writes to a file:// store durable and atomic.
//
// Every write is staged in {dir}/.strata-tmp (same file system, hidden from
// listings), fsynced, and then published:
//   - Put renames the staged file over the key (atomic replace);
//   - CreateIfAbsent hard-links it to the key. link(2) fails with EEXIST if
//     the key exists, atomically in the kernel, so exactly one of any number
//     of racing processes wins.
//
// The parent directory is fsynced after publishing so the new name survives
// a power loss. The staged name is always removed before returning.
type fileWriter struct{ dir string }

func (f *fileWriter) path(key string) string { return filepath.Join(f.dir, filepath.FromSlash(key)) }

func (f *fileWriter) write(key string, data []byte, exclusive bool) (err error) {
	if err := ValidateKey(key); err != nil {
		return err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(f.dir, tmpDir, hex.EncodeToString(rnd[:]))
	if err := writeSynced(tmp, data); err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp) }() // gone once renamed

	dst := f.path(key)
	parent := filepath.Dir(dst)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("create parent dir: %w", err)
	}
	if exclusive {
		err = os.Link(tmp, dst)
	} else {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		return err
	}
	return syncDir(parent)
}

func writeSynced(path string, data []byte) error {
	fd, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := fd.Write(data); err != nil {
		_ = fd.Close()
		return err
	}
	if err := fd.Sync(); err != nil {
		_ = fd.Close()
		return err
	}
	return fd.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}
