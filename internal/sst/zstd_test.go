package sst

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	kzstd "github.com/klauspost/compress/zstd"
)

// TestZstdCodecRoundTrip: whatever encoder the build has, its frames decode
// with the pure-Go decoder parquet-go reads every file with, for empty,
// incompressible and compressible pages, from many goroutines at once and
// with reused buffers.
func TestZstdCodecRoundTrip(t *testing.T) {
	t.Logf("encoder: %s", ZstdEncoder)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	pages := [][]byte{{}, {42}}
	random := make([]byte, 300<<10)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	pages = append(pages, random)
	var floats []byte
	for i := range 40_000 {
		floats = binary.LittleEndian.AppendUint64(floats, math.Float64bits(float64(rng.IntN(1_000_000))/10_000+float64(i%3)))
	}
	text := bytes.Repeat([]byte("cpu,host=h1 "), 20_000)
	pages = append(pages, floats, text)
	plain, err := kzstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for _, c := range []Compression{CompressDefault, CompressFast} {
		codec, err := codecFor(c)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := range 4 {
			wg.Go(func() {
				var enc, dec []byte
				for round := range 8 {
					p := pages[(g+round)%len(pages)]
					var err error
					if enc, err = codec.Encode(enc, p); err != nil {
						errs <- err
						return
					}
					if dec, err = codec.Decode(dec, enc); err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(dec, p) {
						t.Errorf("level %d: page of %d bytes decodes to %d different bytes", c.zstdLevel(), len(p), len(dec))
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("level %d: %v", c.zstdLevel(), err)
		}
		for _, p := range pages {
			enc, err := codec.Encode(nil, p)
			if err != nil {
				t.Fatal(err)
			}
			got, err := plain.DecodeAll(enc, nil)
			if err != nil || !bytes.Equal(got, p) {
				t.Fatalf("level %d: standalone decoder: %v", c.zstdLevel(), err)
			}
			if bytes.Equal(p, text) && len(enc) > len(p)/20 {
				t.Fatalf("level %d: repeated text compresses to %d of %d bytes", c.zstdLevel(), len(enc), len(p))
			}
		}
	}
	if _, err := codecFor(Compression(7)); err == nil {
		t.Fatal("unknown compression accepted")
	}
	if _, err := Write(&bytes.Buffer{}, testFields, nil, WriteOptions{Compression: 7}); err == nil {
		t.Fatal("Write accepted an unknown compression")
	}
}
