// Package tsbs describes the TSBS "cpu-only" workload shape that Strata's
// benchmarks and `strata bench ingest` use: hosts with 10 tags each, and
// 10 float fields per row, one row per host every 10 seconds.
package tsbs

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/stratadb/strata/internal/row"
)

// Interval is the time between a host's rows.
const Interval = 10_000_000_000 // 10 s in ns

// Fields are the cpu measurement's fields.
var Fields = []string{"usage_user", "usage_system", "usage_idle", "usage_nice", "usage_iowait",
	"usage_irq", "usage_softirq", "usage_steal", "usage_guest", "usage_guest_nice"}

var regions = []string{"us-east-1", "us-west-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-1", "ap-southeast-2", "ap-northeast-1", "sa-east-1"}

// Tags returns host h's 10 tags, in the order TSBS writes them.
func Tags(h int) []row.Tag {
	r := regions[h%len(regions)]
	return []row.Tag{
		{Name: "hostname", Value: "host_" + strconv.Itoa(h)},
		{Name: "region", Value: r},
		{Name: "datacenter", Value: r + string(rune('a'+h%3))},
		{Name: "rack", Value: strconv.Itoa(h % 100)},
		{Name: "os", Value: []string{"Ubuntu16.10", "Ubuntu16.04LTS", "Ubuntu15.10"}[h%3]},
		{Name: "arch", Value: []string{"x64", "x86"}[h%2]},
		{Name: "team", Value: []string{"SF", "NYC", "LON", "CHI"}[h%4]},
		{Name: "service", Value: strconv.Itoa(h % 20)},
		{Name: "service_version", Value: strconv.Itoa(h % 2)},
		{Name: "service_environment", Value: []string{"production", "staging", "test"}[h%3]},
	}
}

// LineTags returns host h's tags as a line-protocol tag set starting with
// a comma (the values need no escaping).
func LineTags(h int) string {
	var b strings.Builder
	for _, t := range Tags(h) {
		b.WriteByte(',')
		b.WriteString(t.Name)
		b.WriteByte('=')
		b.WriteString(t.Value)
	}
	return b.String()
}

// Value is field f of row k: a deterministic pseudo-random percentage with
// four decimals (TSBS's are random walks over 0-100 at full precision;
// these compress about as badly).
func Value(k, f int) float64 {
	x := uint64(k)*0x9e3779b97f4a7c15 + uint64(f)*0xbf58476d1ce4e5b9
	x ^= x >> 31
	x *= 0x94d049bb133111eb
	x ^= x >> 29
	return float64(x%1_000_000) / 10_000
}

// Point is row k of the workload, given every host's tags: host
// k%len(tags) (its tags copied: encoding a series key sorts them in
// place), its 10 fields, at start + k/len(tags) intervals (nanoseconds).
func Point(tags [][]row.Tag, k int, start int64) row.Point {
	fs := make([]row.Field, len(Fields))
	for f, name := range Fields {
		fs[f] = row.Field{Name: name, Value: row.FloatValue(Value(k, f))}
	}
	return row.Point{Tags: slices.Clone(tags[k%len(tags)]), TS: start + int64(k/len(tags))*Interval, Fields: fs}
}

// Walk generates the values `strata bench ingest` loads: per host and
// field a random walk over 0–100 with steps drawn from N(0, 1), written
// with two decimals (WalkText). Hosts report in turn: row i is host
// i%hosts. The same seed gives the same values.
type Walk struct {
	rng  *rand.Rand
	vals [][]float64
}

// NewWalk starts the walks of hosts hosts from seed.
func NewWalk(hosts int, seed uint64) *Walk {
	w := &Walk{rng: rand.New(rand.NewPCG(seed, 7)), vals: make([][]float64, hosts)}
	for h := range w.vals {
		w.vals[h] = make([]float64, len(Fields))
		for j := range w.vals[h] {
			w.vals[h][j] = w.rng.Float64() * 100
		}
	}
	return w
}

// Next steps host h's walks (the next row, which must be host i%hosts of
// row i) and returns its field values at full precision; the slice is
// the walk's own, valid until h's next step. A row's stored values are
// WalkText of these.
func (w *Walk) Next(h int) []float64 {
	vs := w.vals[h]
	for j := range vs {
		vs[j] = min(100, max(0, vs[j]+w.rng.NormFloat64()))
	}
	return vs
}

// WalkText is how a walk's value is written: two decimals.
func WalkText(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// WalkValue is the value a server stores for v: WalkText parsed.
func WalkValue(v float64) float64 {
	f, _ := strconv.ParseFloat(WalkText(v), 64)
	return f
}

// WalkInt is how TSBS itself writes a walk's value: truncated to an
// integer (line protocol "58i"; its cpu-only generator's toPointAllInt64).
func WalkInt(v float64) int64 { return int64(v) }
