// Package rwload is a Prometheus remote-write load generator in the shape
// of prometheus-community's avalanche, and the checker that proves a server
// stored what it was sent: Generator describes the data, Run sends it
// (remote write 1.0 or 2.0, snappy-compressed, from several shards), and
// Verify counts it back through the server's Prometheus query API.
//
// The data: Names metric names ("<prefix>_<id>", ids zero-padded), each
// exported by Series targets, so a scrape is Names×Series series, each
// with a sample at the scrape's timestamp. A series' labels are __name__,
// instance and job (one target each), Labels label_key_k labels whose
// values have a cardinality that grows with k, and series_id, which churn
// bumps: a churned series ends and a new one (the next series_id) takes its
// place at that scrape.
//
// Every sample is a pure function of (seed, series, series_id, scrape), so
// shards encode their share in any order without shared state, and two
// runs with one seed send the same requests.
package rwload

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// Shape is what a run sends.
type Shape struct {
	// Prefix starts every metric name (default "avalanche_metric_mmmmm").
	Prefix string
	// Names is the number of metric names; Series the series of each name
	// (one a target); Labels the label_key_k labels of each series.
	Names, Series, Labels int
	// Scrapes is the number of samples of each series slot; Interval the
	// data time between them, from Start on.
	Scrapes  int
	Interval time.Duration
	Start    time.Time
	// Churn is the fraction of the Names×Series series replaced at each
	// scrape after the first (rounded to whole series).
	Churn float64
	// NaNFraction is the fraction of samples whose value is NaN (not a
	// staleness marker).
	NaNFraction float64
	// StaleMarkers sends a staleness marker for each churned-out series at
	// the scrape that replaced it, as Prometheus does when a series goes.
	StaleMarkers bool
	// Batch is the most samples (staleness markers included) a request
	// holds.
	Batch int
	Seed  uint64
}

// DefaultPrefix is the metric-name prefix when Shape.Prefix is empty.
const DefaultPrefix = "avalanche_metric_mmmmm"

// maxSeries bounds Names×Series: the churn permutation multiplies two
// indexes below it in an int64.
const maxSeries = 1 << 31

// metricName is a Prometheus metric name, which the checker's selectors
// name bare.
var metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

// ErrBadShape: the shape cannot be generated.
var ErrBadShape = errors.New("rwload: bad shape")

// Generator computes a shape's series and samples.
type Generator struct {
	shape   Shape
	names   []string
	width   int      // digits of a metric name's id
	lnames  []string // the label names after __name__, sorted
	targets [][]string
	// total series slots (Names×Series) and how many churn each scrape;
	// churn walks the slots in the order perm(p) = (a·p + b) mod total.
	total, churn, a, aInv, b int64
}

// NewGenerator validates a shape and precomputes its names and labels.
func NewGenerator(s Shape) (*Generator, error) {
	if s.Prefix == "" {
		s.Prefix = DefaultPrefix
	}
	switch {
	case s.Names <= 0 || s.Series <= 0 || s.Labels < 0 || s.Scrapes <= 0 || s.Batch <= 0:
		return nil, fmt.Errorf("%w: names, series, scrapes and batch must be positive, labels not negative", ErrBadShape)
	case s.Interval <= 0 && s.Scrapes > 1:
		return nil, fmt.Errorf("%w: the interval must be positive", ErrBadShape)
	case !(s.Churn >= 0 && s.Churn <= 1) || !(s.NaNFraction >= 0 && s.NaNFraction <= 1):
		return nil, fmt.Errorf("%w: churn and the NaN fraction must be within [0, 1]", ErrBadShape)
	case !metricName.MatchString(s.Prefix):
		return nil, fmt.Errorf("%w: prefix %q is not a metric name", ErrBadShape, s.Prefix)
	case int64(s.Names)*int64(s.Series) > maxSeries:
		return nil, fmt.Errorf("%w: names×series is over %d", ErrBadShape, maxSeries)
	}
	g := &Generator{shape: s, total: int64(s.Names) * int64(s.Series)}
	g.churn = int64(math.Round(s.Churn * float64(g.total)))
	g.width = len(strconv.Itoa(s.Names - 1))
	g.names = make([]string, s.Names)
	for i := range g.names {
		g.names[i] = fmt.Sprintf("%s_%0*d", s.Prefix, g.width, i)
	}
	keys := make([]string, s.Labels)
	for k := range keys {
		keys[k] = "label_key_" + strconv.Itoa(k)
	}
	slices.Sort(keys) // label_key_10 sorts before label_key_2
	g.lnames = slices.Concat([]string{"instance", "job"}, keys, []string{"series_id"})
	g.targets = make([][]string, s.Series)
	for j := range g.targets {
		vals := make([]string, 0, len(g.lnames)-1)
		vals = append(vals, fmt.Sprintf("10.%d.%d.%d:9100", j>>16&255, j>>8&255, j&255), "avalanche")
		for _, key := range keys {
			k, _ := strconv.Atoi(key[len("label_key_"):])
			card := cardinalities[k%len(cardinalities)]
			vals = append(vals, "value_"+strconv.FormatUint(g.hash(tagLabel, uint64(k), uint64(j))%card, 10))
		}
		g.targets[j] = vals
	}
	g.a, g.b = 1, 0
	if g.total > 1 {
		g.b = int64(g.hash(tagPerm, 0, 0) % uint64(g.total))
		for g.a = 1 + int64(g.hash(tagPerm, 1, 0)%uint64(g.total-1)); gcd(g.a, g.total) != 1; g.a++ {
		}
	}
	g.aInv = modInverse(g.a, g.total)
	return g, nil
}

// cardinalities are label_key_k's distinct values (at most one a target),
// repeating from k = 8: a realistic mix of few-valued labels (env,
// region) and many-valued ones (pod).
var cardinalities = []uint64{2, 3, 5, 10, 20, 50, 100, 1000}

// timestamp is scrape s's sample time in milliseconds.
func (g *Generator) timestamp(s int) int64 {
	return g.shape.Start.Add(time.Duration(s) * g.shape.Interval).UnixMilli()
}

// Series is how many series the run creates: every slot's first, and
// round(Churn × slots) more at every scrape after the first.
func (g *Generator) Series() int64 { return g.total + g.churn*int64(g.shape.Scrapes-1) }

// Samples is how many samples the run sends, NaN samples included and
// staleness markers not: each slot has one at each scrape.
func (g *Generator) Samples() int64 { return g.total * int64(g.shape.Scrapes) }

// StaleMarkers is how many staleness markers the run sends.
func (g *Generator) StaleMarkers() int64 {
	if !g.shape.StaleMarkers {
		return 0
	}
	return g.churn * int64(g.shape.Scrapes-1)
}

// generation is slot x's series_id at scrape s: how many times churn
// replaced it in scrapes 1..s. Scrape s churns the walk's positions
// [(s-1)·churn, s·churn) mod total, so x (at position p) was churned once
// for every k ≡ p (mod total) in [0, s·churn).
func (g *Generator) generation(x int64, s int) int64 {
	n := g.churn * int64(s)
	p := mulMod(((x-g.b)%g.total+g.total)%g.total, g.aInv, g.total)
	if n <= p {
		return 0
	}
	return (n-1-p)/g.total + 1
}

// churned lists the slots scrape s (≥ 1) replaces, sorted.
func (g *Generator) churned(s int) []int64 {
	out := make([]int64, 0, g.churn)
	for k := g.churn * int64(s-1); k < g.churn*int64(s); k++ {
		out = append(out, (mulMod(k%g.total, g.a, g.total)+g.b)%g.total)
	}
	slices.Sort(out)
	return out
}

// Hash domains, so no two uses of the hash share a stream.
const (
	tagLabel uint64 = iota + 1
	tagPerm
	tagNaN
	tagValue
	tagRate
)

func (g *Generator) hash(tag, a, b uint64) uint64 {
	return mix(mix(mix(g.shape.Seed^tag<<56)^a) ^ b)
}

// value is slot x's sample at scrape s (generation gen): NaN with
// probability NaNFraction; otherwise a gauge (even names) in [0, 100) or
// a counter (odd names) that grows by a per-series rate each scrape.
func (g *Generator) value(x, gen int64, s int) float64 {
	key := mix(uint64(x)) + uint64(gen)
	if g.shape.NaNFraction > 0 && float64(g.hash(tagNaN, key, uint64(s))>>11)/(1<<53) < g.shape.NaNFraction {
		return math.NaN()
	}
	if !isCounter(int(x / int64(g.shape.Series))) {
		return float64(g.hash(tagValue, key, uint64(s))%10000) / 100
	}
	return float64(s+1) * float64(1+g.hash(tagRate, key, 0)%100)
}

// isCounter reports whether metric name i is a counter (else a gauge).
func isCounter(i int) bool { return i%2 == 1 }

// mix is SplitMix64's finalizer.
func mix(v uint64) uint64 {
	v += 0x9e3779b97f4a7c15
	v = (v ^ v>>30) * 0xbf58476d1ce4e5b9
	v = (v ^ v>>27) * 0x94d049bb133111eb
	return v ^ v>>31
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// mulMod is a·b mod m for a, b < m ≤ maxSeries.
func mulMod(a, b, m int64) int64 { return a * b % m }

// modInverse is a⁻¹ mod m (gcd(a, m) = 1).
func modInverse(a, m int64) int64 {
	if m == 1 {
		return 0
	}
	t, newT, r, newR := int64(0), int64(1), m, a
	for newR != 0 {
		q := r / newR
		t, newT = newT, t-q*newT
		r, newR = newR, r-q*newR
	}
	if t < 0 {
		t += m
	}
	return t
}
