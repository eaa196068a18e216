package decimal

import (
	"math"
	"math/rand"
	"testing"

	"github.com/stratadb/strata/internal/testseed"
)

// TestMantissa: every decimal m / 10^s under the limit is found at its
// scale and at every higher one the limit allows, with the same value back
// to the bit; numbers that are no such decimal are refused.
func TestMantissa(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewSource(seed))
	for range 200_000 {
		s := int8(rng.Intn(MaxScale + 1))
		m := rng.Int63n(limit) - limit/2
		if rng.Intn(2) == 0 {
			m = rng.Int63n(2_000_001) - 1_000_000 // short ones, as most samples are
		}
		v := Float(m, s)
		got, ok := Mantissa(v, s)
		if !ok || got != m {
			t.Fatalf("Mantissa(%v, %d) = %d, %v; want %d", v, s, got, ok, m)
		}
		if math.Float64bits(Float(got, s)) != math.Float64bits(v) {
			t.Fatalf("Float(%d, %d) != %v", got, s, v)
		}
		for up := s + 1; up <= MaxScale && Rescale(abs(m), s, up); up++ {
			mu, ok := Mantissa(v, up)
			if !ok || math.Float64bits(Float(mu, up)) != math.Float64bits(v) {
				t.Fatalf("%v (mantissa %d at %d) not found at scale %d", v, m, s, up)
			}
		}
	}
	for _, v := range []float64{1.0 / 3, math.Pi, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), 1e300, 5e-324, float64(limit)} {
		for s := int8(0); s <= MaxScale; s++ {
			if m, ok := Mantissa(v, s); ok {
				t.Fatalf("Mantissa(%v, %d) = %d: want none", v, s, m)
			}
		}
	}
	if m, ok := Mantissa(57.1234, 4); !ok || m != 571234 {
		t.Fatalf("Mantissa(57.1234, 4) = %d, %v", m, ok)
	}
	if _, ok := Mantissa(57.1234, 3); ok {
		t.Fatal("57.1234 has a mantissa at scale 3")
	}
}

func abs(m int64) int64 {
	if m < 0 {
		return -m
	}
	return m
}

// TestScan: the scale found is the least that holds every value given,
// and None once a value has no mantissa or the largest would pass the limit.
func TestScan(t *testing.T) {
	for _, c := range []struct {
		vals []float64
		want int8
	}{
		{nil, 0},
		{[]float64{1, 2, 300}, 0},
		{[]float64{1, 2.5, 0.25, 3}, 2},
		{[]float64{57.1234, 0.5, 99.9999}, 4},
		{[]float64{-1.5, -0.001}, 3},
		{[]float64{0.1, 1.0 / 3}, None},
		{[]float64{1.0 / 3, 0.1}, None},
		{[]float64{2e14, 0.5}, None}, // 2e15 at scale 1: over the limit
		{[]float64{1e14, 0.5}, 1},    // 1e15: under it
		{[]float64{0.5, 2e14}, None}, // either order
		{[]float64{1e15 + 1, 3}, 0},  // under 2^50 at scale 0
		{[]float64{2e15}, None},      // over it
		{[]float64{math.Copysign(0, -1)}, None},
	} {
		var s Scan
		for _, v := range c.vals {
			s.Add(v)
		}
		if got := s.Scale(); got != c.want {
			t.Errorf("Scan(%v) = %d, want %d", c.vals, got, c.want)
		}
		if s.Scale() == None {
			continue
		}
		for _, v := range c.vals {
			if _, ok := Mantissa(v, s.Scale()); !ok {
				t.Errorf("Scan(%v) = %d, but %v has no mantissa there", c.vals, s.Scale(), v)
			}
		}
	}
}

// TestFloatsInto converts as Float does, one value at a time.
func TestFloatsInto(t *testing.T) {
	src := []uint64{0, 571234, uint64(1<<64 - 5), 1}
	dst := make([]uint64, len(src))
	FloatsInto(dst, src, 4)
	for i, m := range src {
		if want := math.Float64bits(Float(int64(m), 4)); dst[i] != want {
			t.Errorf("FloatsInto[%d] = %x, want %x", i, dst[i], want)
		}
	}
	Floats(src, 4)
	for i := range src {
		if src[i] != dst[i] {
			t.Errorf("Floats[%d] = %x, want %x", i, src[i], dst[i])
		}
	}
}

// TestMantissaAsRounded: Mantissa answers as it did when it rounded with
// math.Round (ties away from zero), for decimals, values half an integer
// away from one at some scale, and random doubles.
func TestMantissaAsRounded(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewSource(seed))
	byRound := func(v float64, scale int8) (int64, bool) {
		x := v * pow10[scale]
		if !(x > -limit && x < limit) {
			return 0, false
		}
		m := int64(math.Round(x))
		return m, math.Float64bits(float64(m)/pow10[scale]) == math.Float64bits(v)
	}
	for i := range 300_000 {
		var v float64
		switch i % 3 {
		case 0:
			v = Float(rng.Int63n(2_000_001)-1_000_000, int8(rng.Intn(MaxScale+1)))
		case 1: // (k + 1/2) / 10^s: a tie at scale s
			v = (float64(rng.Int63n(1<<20)-1<<19) + 0.5) / pow10[rng.Intn(MaxScale+1)]
		default:
			v = rng.NormFloat64() * math.Pow(10, float64(rng.Intn(30)-15))
		}
		for s := int8(0); s <= MaxScale; s++ {
			m, ok := Mantissa(v, s)
			wm, wok := byRound(v, s)
			if ok != wok || ok && m != wm {
				t.Fatalf("Mantissa(%v, %d) = %d, %v; with math.Round %d, %v", v, s, m, ok, wm, wok)
			}
		}
	}
}
