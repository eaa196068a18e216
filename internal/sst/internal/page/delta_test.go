package page

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go/encoding/delta"
)

// deltaValues is a random sequence of one of the shapes pages hold:
// steady steps (width-0 miniblocks), small noise, series boundaries (one
// large jump), and extremes that need 64-bit deltas.
func deltaValues(rng *rand.Rand, n int) []int64 {
	vs := make([]int64, n)
	v := rng.Int64()
	shape := rng.IntN(4)
	for i := range vs {
		switch shape {
		case 0:
			v += 10_000_000_000
		case 1:
			v += rng.Int64N(2000) - 1000
		case 2:
			v += 10
			if rng.IntN(300) == 0 {
				v = rng.Int64()
			}
		default:
			v = []int64{math.MinInt64, math.MaxInt64, 0, -1, rng.Int64()}[rng.IntN(5)]
		}
		vs[i] = v
	}
	return vs
}

// TestDeltaCursorMatchesParquet: ranges of pages that parquet-go encodes
// decode to the values it was given, read forward as ReadColumns reads
// them, backward, and repeated; a truncated page is corruption, never a
// panic.
func TestDeltaCursorMatchesParquet(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>7))
	var enc delta.BinaryPackedEncoding
	var c DeltaCursor
	for round := range 300 {
		n := []int{1, 2, 31, 32, 33, 127, 128, 129, 1000, 8192}[rng.IntN(10)]
		vs := deltaValues(rng, n)
		data, err := enc.EncodeInt64(nil, vs)
		if err != nil {
			t.Fatal(err)
		}
		data = slices.Grow(data, Padding)
		if err := c.Reset(data, n); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		// Forward in stretches, as a page's runs are read, then at random.
		var got []uint64
		for a := 0; a < n; {
			b := min(n, a+1+rng.IntN(300))
			if got, err = c.AppendRange(got[:0], a, b); err != nil {
				t.Fatalf("round %d: [%d, %d): %v", round, a, b, err)
			}
			for k, v := range got {
				if int64(v) != vs[a+k] {
					t.Fatalf("round %d: value %d of %d is %d, want %d", round, a+k, n, int64(v), vs[a+k])
				}
			}
			a = b
		}
		for range 20 {
			a := rng.IntN(n + 1)
			b := a + rng.IntN(n-a+1)
			if got, err = c.AppendRange(got[:0], a, b); err != nil {
				t.Fatalf("round %d: [%d, %d): %v", round, a, b, err)
			}
			if len(got) != b-a {
				t.Fatalf("round %d: [%d, %d) gave %d values", round, a, b, len(got))
			}
			for k, v := range got {
				if int64(v) != vs[a+k] {
					t.Fatalf("round %d: [%d, %d): value %d is %d, want %d", round, a, b, a+k, int64(v), vs[a+k])
				}
			}
		}
		if _, err := c.AppendRange(nil, 0, n+1); err == nil {
			t.Fatalf("round %d: a range past the page's end was read", round)
		}
		if err := c.Reset(data, n+1); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("round %d: a header of %d values for %d rows: %v", round, n, n+1, err)
		}
		// Cut short: an error, from reset or from reading, or (when only a
		// last miniblock's Padding is cut) the values; never a panic. The
		// cut is copied, so what lay past it cannot be read.
		k := rng.IntN(len(data))
		cut := append(make([]byte, 0, k+Padding), data[:k]...)
		if err := c.Reset(cut, n); err == nil {
			if got, err = c.AppendRange(got[:0], 0, n); err == nil {
				for i, v := range got {
					if int64(v) != vs[i] {
						t.Fatalf("round %d: %d of %d bytes decoded value %d as %d, want %d", round, k, len(data), i, int64(v), vs[i])
					}
				}
			}
		}
	}
}
