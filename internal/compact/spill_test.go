package compact

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestSpillReadsWaitForTheEncoder: a read of bytes not yet written waits
// for them; EOF comes only once the encoder finished; once it gives up,
// reads fail; once the upload fails, writes do.
func TestSpillReadsWaitForTheEncoder(t *testing.T) {
	sp, err := newSpill(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer sp.drop()
	got := make(chan []byte)
	go func() {
		b, err := io.ReadAll(io.NewSectionReader(sp, 0, 1<<62))
		if err != nil {
			t.Errorf("read: %v", err)
		}
		got <- b
	}()
	var want []byte
	for i := range 50 {
		chunk := bytes.Repeat([]byte{byte(i)}, 1000+i)
		if _, err := sp.Write(chunk); err != nil {
			t.Fatal(err)
		}
		want = append(want, chunk...)
	}
	select {
	case <-got:
		t.Fatal("the reader reached EOF before the encoder finished")
	default:
	}
	sp.finish(nil)
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("read %d bytes, want %d", len(b), len(want))
	}

	ab, err := newSpill(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ab.drop()
	ab.Write([]byte("partial"))
	failed := make(chan error)
	go func() {
		_, err := io.ReadAll(io.NewSectionReader(ab, 0, 1<<62))
		failed <- err
	}()
	cause := errors.New("input unreadable")
	ab.finish(cause)
	if err := <-failed; !errors.Is(err, errEncodeAbandoned) || !errors.Is(err, cause) {
		t.Fatalf("read of an abandoned spill: %v", err)
	}

	up, err := newSpill(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer up.drop()
	uerr := errors.New("bucket gone")
	up.uploadFailed(uerr)
	if _, err := up.Write([]byte("x")); !errors.Is(err, uerr) {
		t.Fatalf("write after the upload failed: %v", err)
	}
}
