package sst

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

// TestPipeStreamsAndFailsBothWays: the upload side reads exactly what the
// encoder wrote, through a buffer far smaller than the object, and sees
// EOF only once the encoder finished; an abandoned encoder fails the
// upload's reads; a failed upload fails the encoder's writes; a rewound
// (retried) upload fails, unless nothing had been read yet.
func TestPipeStreamsAndFailsBothWays(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	p := NewPipe(4096)
	want := make([]byte, 300_000)
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	got := make(chan []byte, 1)
	go func() {
		// Reads of random sizes, some larger than the buffer.
		rng := rand.New(rand.NewPCG(seed, 4))
		var out []byte
		var off int64
		for {
			b := make([]byte, 1+rng.IntN(6000))
			n, err := p.ReadAt(b, off)
			out, off = append(out, b[:n]...), off+int64(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Errorf("read at %d: %v", off, err)
				break
			}
		}
		got <- out
	}()
	for rest := want; len(rest) > 0; {
		n := min(len(rest), 1+rng.IntN(10_000))
		if k, err := p.Write(rest[:n]); err != nil || k != n {
			t.Fatalf("write: %d, %v", k, err)
		}
		rest = rest[n:]
	}
	select {
	case <-got:
		t.Fatal("the reader reached EOF before the encoder finished")
	default:
	}
	p.Finish(nil)
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("read %d bytes, want %d, or different bytes", len(b), len(want))
	}
	if _, err := p.ReadAt(make([]byte, 10), 0); !errors.Is(err, errRewind) {
		t.Fatalf("a rewound read: %v", err)
	}

	// Abandoned by the encoder.
	ab := NewPipe(4096)
	if _, err := ab.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(io.NewSectionReader(ab, 0, 1<<62))
		failed <- err
	}()
	cause := errors.New("input unreadable")
	ab.Finish(cause)
	if err := <-failed; !errors.Is(err, ErrAbandoned) || !errors.Is(err, cause) {
		t.Fatalf("read of an abandoned output: %v", err)
	}

	// The upload failed: a writer blocked on a full buffer is released.
	up := NewPipe(16)
	uerr := errors.New("bucket gone")
	done := make(chan error, 1)
	go func() { _, err := up.Write(make([]byte, 100)); done <- err }()
	up.UploadFailed(uerr)
	if err := <-done; !errors.Is(err, uerr) {
		t.Fatalf("write after the upload failed: %v", err)
	}

	// A retry before anything was read starts from the beginning.
	fresh := NewPipe(64)
	if _, err := fresh.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	fresh.Finish(nil)
	b, err := io.ReadAll(io.NewSectionReader(fresh, 0, 1<<62))
	if err != nil || string(b) != "abc" {
		t.Fatalf("read %q, %v", b, err)
	}
}
