package sst

import (
	"errors"
	"io"
	"sync"
)

// Pipe carries an SST from its Write to its upload through a bounded
// in-memory buffer, so that the upload overlaps the encoding and neither
// the whole file nor a local disk is needed. The upload reads it through
// ReadAt, sequentially (objstore.Upload with a negative size): a read waits
// for bytes not yet written, and reports EOF only once the writer has
// finished. If the writer gives up, reads fail, so the upload fails without
// ever having seen the end of the object, and no store turns a body whose
// reader failed into an object. If the upload fails, writes fail, which
// stops the writer.
//
// Bytes are dropped once read: a retry of the whole upload cannot re-read
// them and fails (the job is abandoned and runs again later; the store's
// error names the failure that caused the retry). Object stores' clients
// retry each request (a PUT or one part of a multipart upload) from their
// own buffers, which covers the transient failures a whole-upload retry
// would.
type Pipe struct {
	mu       sync.Mutex
	changed  *sync.Cond
	data     []byte // data[r:w] is written and not yet read
	r, w     int
	off      int64 // the object offset of data[r]
	finished bool
	err      error // the writer gave up
	upload   error // the upload failed
}

// PipeBuffer bounds the bytes written and not yet uploaded.
const PipeBuffer = 4 << 20

var (
	// ErrAbandoned is what the upload reads once the writer gave up.
	ErrAbandoned = errors.New("sst: output abandoned before it was complete")
	// errRewind: a retried upload asked for bytes already uploaded.
	errRewind = errors.New("sst: the streamed output cannot be re-read for a retried upload")
)

// NewPipe is a pipe buffering size bytes.
func NewPipe(size int) *Pipe {
	p := &Pipe{data: make([]byte, size)}
	p.changed = sync.NewCond(&p.mu)
	return p
}

// Write appends b, waiting for room. It fails once the upload has failed.
func (p *Pipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for len(b) > 0 {
		for p.upload == nil && p.r == 0 && p.w == len(p.data) {
			p.changed.Wait()
		}
		if p.upload != nil {
			return n, p.upload
		}
		if p.w == len(p.data) { // room only at the front: move the rest down
			p.w = copy(p.data, p.data[p.r:p.w])
			p.r = 0
		}
		k := copy(p.data[p.w:], b)
		p.w += k
		n += k
		b = b[k:]
		p.changed.Broadcast()
	}
	return n, nil
}

// Finish ends the writer's side: err nil means the object is complete;
// otherwise the upload's reads fail with ErrAbandoned and err.
func (p *Pipe) Finish(err error) {
	p.mu.Lock()
	p.finished = true
	if err != nil {
		p.err = errors.Join(ErrAbandoned, err)
	}
	p.changed.Broadcast()
	p.mu.Unlock()
}

// UploadFailed records that the upload failed, which fails Write.
func (p *Pipe) UploadFailed(err error) {
	p.mu.Lock()
	p.upload = err
	p.changed.Broadcast()
	p.mu.Unlock()
}

// ReadAt is the upload's side. Reads must be sequential: off is where the
// previous read ended. It fills b unless the object ends first, or b is
// larger than the buffer (then it returns what the buffer holds).
func (p *Pipe) ReadAt(b []byte, off int64) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if off != p.off {
		return 0, errRewind
	}
	for p.err == nil && !p.finished && p.w-p.r < len(b) {
		if p.r == 0 && p.w == len(p.data) {
			break // full: take what there is
		}
		p.changed.Wait()
	}
	if p.err != nil {
		return 0, p.err
	}
	k := copy(b, p.data[p.r:p.w])
	p.r += k
	p.off += int64(k)
	if p.r == p.w {
		p.r, p.w = 0, 0
	}
	p.changed.Broadcast()
	if k < len(b) && p.finished && p.r == p.w {
		return k, io.EOF
	}
	return k, nil
}
