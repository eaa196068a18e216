package compact

import (
	"errors"
	"io"
	"os"
	"sync"
)

// spill is the local file an output is encoded into while a concurrent
// upload reads it: ReadAt waits for bytes not yet written, and reports EOF
// only once the encoder has finished. The upload therefore overlaps the
// encoding instead of following it, and a retried upload re-reads the file
// from the start. If the encoder gives up, reads fail, so the upload
// fails without ever having seen the end of the object: a partial output
// never lands.
type spill struct {
	f *os.File

	mu       sync.Mutex
	grew     *sync.Cond
	n        int64 // bytes written
	finished bool
	err      error // the encoder gave up
	upload   error // the upload failed: stop encoding
}

// errEncodeAbandoned is what the upload reads once the encoder gave up.
var errEncodeAbandoned = errors.New("compact: output abandoned before it was complete")

func newSpill(dir string) (*spill, error) {
	f, err := os.CreateTemp(dir, "strata-compact-*.parquet")
	if err != nil {
		return nil, err
	}
	s := &spill{f: f}
	s.grew = sync.NewCond(&s.mu)
	return s, nil
}

// Write appends p (the encoder's side). It fails once the upload has
// failed, which stops the encoding early.
func (s *spill) Write(p []byte) (int, error) {
	s.mu.Lock()
	uerr := s.upload
	s.mu.Unlock()
	if uerr != nil {
		return 0, uerr
	}
	n, err := s.f.Write(p)
	s.mu.Lock()
	s.n += int64(n)
	s.grew.Broadcast()
	s.mu.Unlock()
	return n, err
}

// finish ends the encoder's side: err nil means the file is complete.
func (s *spill) finish(err error) {
	s.mu.Lock()
	s.finished = true
	if err != nil {
		s.err = errors.Join(errEncodeAbandoned, err)
	}
	s.grew.Broadcast()
	s.mu.Unlock()
}

// uploadFailed records that the upload failed, so that Write stops the
// encoder.
func (s *spill) uploadFailed(err error) {
	s.mu.Lock()
	s.upload = err
	s.mu.Unlock()
}

// ReadAt is the upload's side; it blocks until p can be filled or the
// encoder has finished.
func (s *spill) ReadAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	for !s.finished && s.n < off+int64(len(p)) {
		s.grew.Wait()
	}
	n, err := s.n, s.err
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	avail := n - off
	if avail <= 0 {
		return 0, io.EOF
	}
	k, rerr := s.f.ReadAt(p[:min(int64(len(p)), avail)], off)
	if rerr != nil && rerr != io.EOF {
		return k, rerr
	}
	if k < len(p) {
		return k, io.EOF // only once finished: the end of the object
	}
	return k, nil
}

// drop closes and removes the file.
func (s *spill) drop() {
	s.f.Close()
	os.Remove(s.f.Name())
}
