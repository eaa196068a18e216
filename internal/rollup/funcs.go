package rollup

import (
	"math"

	"github.com/prometheus/prometheus/util/kahansum"
)

// The range functions, as Prometheus computes them (promql/functions.go).

func sumOverTime(vs []float64) float64 {
	var sum, c float64
	for _, v := range vs {
		sum, c = kahansum.Inc(v, sum, c)
	}
	if math.IsInf(sum, 0) {
		return sum
	}
	return sum + c
}

// avgOverTime is Prometheus' average: a Kahan sum divided by the count,
// unless the sum overflows, when it starts again with an incremental mean
// (avgIncremental).
func avgOverTime(vs []float64) float64 {
	sum, c := vs[0], 0.
	for _, f := range vs[1:] {
		// kahansum.Inc, written out: Prometheus keeps it from being
		// inlined (so that no multiplication around it is fused with its
		// additions); there is none here, and the calls were more than
		// half of the average's time.
		t := sum + f
		if t > math.MaxFloat64 || t < -math.MaxFloat64 {
			return avgIncremental(vs)
		}
		if math.Abs(sum) >= math.Abs(f) {
			c += (sum - t) + f
		} else {
			c += (f - t) + sum
		}
		sum = t
	}
	count := float64(len(vs))
	return sum/count + c/count
}

// avgOverTime2 is avgOverTime of a and of b, their Kahan sums computed
// side by side. Without avgOverTime's test for an overflow at each
// addition: a running sum that overflows stays infinite or turns NaN, so a
// finite sum at the end means there was none, and a window whose sum is
// not finite is computed again by avgOverTime.
func avgOverTime2(a, b []float64) (float64, float64) {
	n := min(len(a), len(b))
	sa, ca, sb, cb := a[0], 0., b[0], 0.
	for i := 1; i < n; i++ {
		fa, fb := a[i], b[i]
		ta, tb := sa+fa, sb+fb
		if math.Abs(sa) >= math.Abs(fa) {
			ca += (sa - ta) + fa
		} else {
			ca += (fa - ta) + sa
		}
		if math.Abs(sb) >= math.Abs(fb) {
			cb += (sb - tb) + fb
		} else {
			cb += (fb - tb) + sb
		}
		sa, sb = ta, tb
	}
	return avgFinish(a, n, sa, ca), avgFinish(b, n, sb, cb)
}

// avgFinish goes on with avgOverTime2's sum and compensation of vs from
// vs[from] on, and returns the average.
func avgFinish(vs []float64, from int, sum, c float64) float64 {
	for _, f := range vs[from:] {
		t := sum + f
		if math.Abs(sum) >= math.Abs(f) {
			c += (sum - t) + f
		} else {
			c += (f - t) + sum
		}
		sum = t
	}
	if math.IsInf(sum, 0) || math.IsNaN(sum) {
		return avgOverTime(vs)
	}
	count := float64(len(vs))
	return sum/count + c/count
}

// avgIncremental is Prometheus' avg_over_time as it is written
// (promql/functions.go), for windows whose sum overflows.
func avgIncremental(vs []float64) float64 {
	var (
		sum, count      = vs[0], 1.
		mean, kahanC    float64
		incrementalMean bool
	)
	for i, f := range vs[1:] {
		count = float64(i + 2)
		if !incrementalMean {
			newSum, newC := kahansum.Inc(f, sum, kahanC)
			if !math.IsInf(newSum, 0) {
				sum, kahanC = newSum, newC
				continue
			}
			incrementalMean = true
			mean = sum / (count - 1)
			kahanC /= (count - 1)
		}
		q := (count - 1) / count
		mean, kahanC = kahansum.Inc(f/count, q*mean, q*kahanC)
	}
	if incrementalMean {
		return mean + kahanC
	}
	return sum/count + kahanC/count
}

// minOverTime and maxOverTime are Prometheus' compareOverTime with its
// comparisons written in: a NaN gives way to any later value.
func minOverTime(vs []float64) float64 {
	m := vs[0]
	for _, v := range vs {
		if v < m || math.IsNaN(m) {
			m = v
		}
	}
	return m
}

func maxOverTime(vs []float64) float64 {
	m := vs[0]
	for _, v := range vs {
		if v > m || math.IsNaN(m) {
			m = v
		}
	}
	return m
}
