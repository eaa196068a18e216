// Package decimal finds the float64s that are short decimals, m / 10^s
// for an integer m, and converts between the two exactly.
//
// Most stored samples are such numbers (counters, percentages with a few
// digits, values parsed from text), and an SST column of them is written
// as its mantissas m at one scale s: Parquet's DECIMAL over INT64, delta
// bit-packed, which is about half the bytes of zstd over the doubles and
// decodes several times faster (docs/design-decisions.md, "Floats that are
// decimals").
package decimal

import (
	"math"
	"slices"
)

// MaxScale is the largest scale used: a mantissa below 2^53 has at most
// 16 digits, and Parquet's INT64 decimals hold 18.
const MaxScale = 15

// None is the scale of a column that is not written as decimals.
const None int8 = -1

// limit bounds a mantissa's magnitude. Below 2^53 every integer is a
// float64; below 2^50, v * 10^s is within a quarter of m for the float64 v
// nearest m / 10^s, so a decimal's mantissa is found at its own scale and at
// every higher one under the limit, and converting back and forth never
// changes a mantissa (what Scan and Rescale rely on).
const limit = 1 << 50

var pow10 = func() (p [MaxScale + 1]float64) {
	p[0] = 1
	for i := 1; i <= MaxScale; i++ {
		p[i] = p[i-1] * 10 // exact: 10^15 < 2^53
	}
	return p
}()

// Mantissa returns m with Float(m, scale) == v to the bit, if there is one
// below 2^50 in magnitude. -0, infinities and NaNs have none.
func Mantissa(v float64, scale int8) (int64, bool) {
	x := v * pow10[scale]
	if !(x > -limit && x < limit) {
		return 0, false
	}
	// Rounded to the nearest integer by adding and taking away 1.5 * 2^52
	// (exact for |x| < 2^51), twice as fast as math.Round, whose ties
	// away from zero it need not match: when v is the decimal m / 10^s,
	// x is within a quarter of m, far from a tie.
	const magic = 0x1.8p52
	m := int64((x + magic) - magic)
	// Both operands are exact and IEEE division rounds correctly, so this
	// is the float64 nearest m / 10^scale: v itself, if v is that decimal.
	return m, math.Float64bits(float64(m)/pow10[scale]) == math.Float64bits(v)
}

// Float is the float64 nearest m / 10^scale.
func Float(m int64, scale int8) float64 { return float64(m) / pow10[scale] }

// Floats converts mantissas at scale into float64 bits, in place.
func Floats(vals []uint64, scale int8) { FloatsInto(vals, vals, scale) }

// FloatsInto sets dst[i] to the float64 bits of mantissa src[i] at scale
// (len(dst) >= len(src)).
func FloatsInto(dst, src []uint64, scale int8) {
	d := pow10[scale]
	dst = dst[:len(src)]
	for i, m := range src {
		dst[i] = math.Float64bits(float64(int64(m)) / d)
	}
}

// AppendFloats appends the float64 bits of mantissas src at scale to dst.
func AppendFloats(dst, src []uint64, scale int8) []uint64 {
	n := len(dst)
	dst = slices.Grow(dst, len(src))[:n+len(src)]
	FloatsInto(dst[n:], src, scale)
	return dst
}

// Scan finds the least scale at which every value it is given has a
// mantissa below 2^50: the zero Scan has seen nothing (scale 0).
type Scan struct {
	scale  int8
	none   bool
	maxAbs float64
}

// Add takes the next value.
func (s *Scan) Add(v float64) {
	if s.none {
		return
	}
	if _, ok := Mantissa(v, s.scale); ok {
		s.maxAbs = max(s.maxAbs, math.Abs(v))
		return
	}
	for sc := s.scale + 1; sc <= MaxScale; sc++ {
		if _, ok := Mantissa(v, sc); ok {
			// The earlier values are decimals at sc too, if they stay
			// below the limit there.
			s.maxAbs = max(s.maxAbs, math.Abs(v))
			if s.maxAbs*pow10[sc] >= limit {
				break
			}
			s.scale = sc
			return
		}
	}
	s.none = true
}

// Scale is the scale found, or None.
func (s *Scan) Scale() int8 {
	if s.none {
		return None
	}
	return s.scale
}

// Rescale reports whether mantissas at scale from, none above maxAbs in
// magnitude, stay below 2^50 at scale to (to >= from).
func Rescale(maxAbs int64, from, to int8) bool {
	return float64(maxAbs)*pow10[to-from] < limit
}
