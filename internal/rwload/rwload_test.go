package rwload

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// sample is one decoded sample: its series' labels as name=value pairs
// in order, and the value's bits (so NaNs compare).
type sample struct {
	series string
	t      int64
	v      uint64
}

// counts are the encoder's tallies of a run.
type counts struct{ samples, nans, stale, series int }

// sent encodes every job of every scrape and decodes each request back
// with Prometheus' own types; it returns the samples in send order, the
// requests' sizes (samples and markers) and the encoder's tallies.
func sent(t *testing.T, g *Generator, p Protocol) (out []sample, sizes []int, tally counts) {
	t.Helper()
	enc := newEncoder(g, p)
	counter := map[string]bool{}
	for i := range g.shape.Names {
		counter[g.names[i]] = isCounter(i)
	}
	for s := range g.shape.Scrapes {
		for _, j := range g.jobs(s) {
			err := enc.encode(j, func(r request) error {
				raw, err := snappy.Decode(nil, r.body)
				if err != nil {
					t.Fatal(err)
				}
				before := len(out)
				if p == V1 {
					var req prompb.WriteRequest
					if err := req.Unmarshal(raw); err != nil {
						t.Fatal(err)
					}
					for _, ts := range req.Timeseries {
						var b strings.Builder
						for _, l := range ts.Labels {
							b.WriteString(l.Name + "=" + l.Value + ",")
						}
						for _, smp := range ts.Samples {
							out = append(out, sample{b.String(), smp.Timestamp, math.Float64bits(smp.Value)})
						}
					}
				} else {
					var req writev2.Request
					if err := req.Unmarshal(raw); err != nil {
						t.Fatal(err)
					}
					for _, ts := range req.Timeseries {
						var b strings.Builder
						for i := 0; i < len(ts.LabelsRefs); i += 2 {
							b.WriteString(req.Symbols[ts.LabelsRefs[i]] + "=" + req.Symbols[ts.LabelsRefs[i+1]] + ",")
						}
						want := writev2.Metadata_METRIC_TYPE_GAUGE
						if counter[req.Symbols[ts.LabelsRefs[1]]] {
							want = writev2.Metadata_METRIC_TYPE_COUNTER
						}
						if ts.Metadata.Type != want {
							t.Fatalf("%s: metadata type %v, want %v", b.String(), ts.Metadata.Type, want)
						}
						for _, smp := range ts.Samples {
							out = append(out, sample{b.String(), smp.Timestamp, math.Float64bits(smp.Value)})
						}
					}
				}
				if n := len(out) - before; n != r.samples+r.stale {
					t.Fatalf("a request decodes to %d samples, the encoder counted %d and %d markers", n, r.samples, r.stale)
				}
				sizes = append(sizes, len(out)-before)
				tally.samples += r.samples
				tally.nans += r.nans
				tally.stale += r.stale
				tally.series += r.series
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return out, sizes, tally
}

func newGen(t *testing.T, s Shape) *Generator {
	t.Helper()
	g, err := NewGenerator(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Remote write 1.0 and 2.0 carry the same samples: decoded with
// Prometheus' own types, the two runs' samples are equal, label for label
// and bit for bit.
func TestV1AndV2DecodeToTheSameSamples(t *testing.T) {
	g := newGen(t, Shape{Names: 4, Series: 7, Labels: 12, Scrapes: 5, Interval: 15 * time.Second, Start: t0,
		Churn: 0.25, NaNFraction: 0.1, StaleMarkers: true, Batch: 10, Seed: 3})
	v1, _, t1 := sent(t, g, V1)
	v2, _, t2 := sent(t, g, V2)
	if len(v1) == 0 || !slices.Equal(v1, v2) {
		t.Fatalf("v1 and v2 differ: %d and %d samples", len(v1), len(v2))
	}
	if t1 != t2 {
		t.Fatalf("tallies differ: %+v and %+v", t1, t2)
	}
}

// A generator is a function of its shape: one seed sends the same bytes
// twice, another seed other values (and label values) for the same
// series slots.
func TestGeneratorIsDeterministicBySeed(t *testing.T) {
	shape := Shape{Names: 3, Series: 20, Labels: 5, Scrapes: 4, Interval: time.Minute, Start: t0, Churn: 0.2, NaNFraction: 0.2, StaleMarkers: true, Batch: 7, Seed: 42}
	a, _, _ := sent(t, newGen(t, shape), V2)
	b, _, _ := sent(t, newGen(t, shape), V2)
	if !slices.Equal(a, b) {
		t.Fatal("one seed, two runs: the samples differ")
	}
	shape.Seed = 43
	c, _, _ := sent(t, newGen(t, shape), V2)
	if len(c) != len(a) || slices.Equal(a, c) {
		t.Fatalf("seeds 42 and 43 sent the same samples (%d and %d)", len(a), len(c))
	}
}

// The counts the checker expects are exact: every slot has a sample each
// scrape; each scrape after the first replaces round(churn × slots) series,
// each new series starting there and each replaced one getting a
// staleness marker there and nothing after; every sample's timestamp is
// its scrape's; requests never exceed the batch; labels are sorted.
func TestCountsChurnAndBatches(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shape Shape
	}{
		{"no churn", Shape{Names: 10, Series: 10, Labels: 15, Scrapes: 3, Batch: 2000}},
		{"churn, markers, NaN", Shape{Names: 13, Series: 11, Labels: 3, Scrapes: 6, Churn: 0.1, NaNFraction: 0.05, StaleMarkers: true, Batch: 17}},
		{"churn past every slot", Shape{Names: 2, Series: 5, Labels: 1, Scrapes: 5, Churn: 0.7, StaleMarkers: true, Batch: 3}},
		{"churn everything, one per request", Shape{Names: 3, Series: 2, Labels: 0, Scrapes: 4, Churn: 1, StaleMarkers: true, Batch: 1}},
		{"one series", Shape{Names: 1, Series: 1, Labels: 2, Scrapes: 3, Churn: 1, Batch: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.shape.Interval, tc.shape.Start, tc.shape.Seed = 15*time.Second, t0, 7
			g := newGen(t, tc.shape)
			slots := int64(tc.shape.Names * tc.shape.Series)
			if want := int64(math.Round(tc.shape.Churn * float64(slots))); g.churn != want {
				t.Fatalf("churn per scrape %d, want %d", g.churn, want)
			}
			got, sizes, tally := sent(t, g, V1)
			for _, n := range sizes {
				if n > tc.shape.Batch || n == 0 {
					t.Fatalf("a request of %d samples (batch %d)", n, tc.shape.Batch)
				}
			}
			first := map[string]int64{} // series → its first sample's time
			last := map[string]int64{}
			stale := map[string]int64{}
			newAt := map[int64]int64{}
			var samples, nans int64
			for _, s := range got {
				if (s.t-t0.UnixMilli())%15000 != 0 || s.t < t0.UnixMilli() || s.t > g.timestamp(tc.shape.Scrapes-1) {
					t.Fatalf("%s at %d: not a scrape's timestamp", s.series, s.t)
				}
				if value.IsStaleNaN(math.Float64frombits(s.v)) {
					if _, ok := stale[s.series]; ok {
						t.Fatalf("%s: two staleness markers", s.series)
					}
					stale[s.series] = s.t
					continue
				}
				samples++
				if math.IsNaN(math.Float64frombits(s.v)) {
					nans++
				}
				if _, ok := first[s.series]; !ok {
					first[s.series] = s.t
					newAt[s.t]++
				}
				last[s.series] = max(last[s.series], s.t)
			}
			if samples != g.Samples() || int(samples) != tally.samples || int(nans) != tally.nans {
				t.Fatalf("%d samples (%d NaN); the generator expects %d, the encoder counted %d (%d NaN)", samples, nans, g.Samples(), tally.samples, tally.nans)
			}
			if int64(len(first)) != g.Series() || int64(tally.series) != g.Series() {
				t.Fatalf("%d series, the encoder counted %d; the generator expects %d", len(first), tally.series, g.Series())
			}
			if int64(len(stale)) != g.StaleMarkers() || int64(tally.stale) != g.StaleMarkers() {
				t.Fatalf("%d staleness markers, the encoder counted %d; the generator expects %d", len(stale), tally.stale, g.StaleMarkers())
			}
			if newAt[g.timestamp(0)] != slots {
				t.Fatalf("first scrape: %d series, want %d", newAt[g.timestamp(0)], slots)
			}
			for s := 1; s < tc.shape.Scrapes; s++ {
				if newAt[g.timestamp(s)] != g.churn {
					t.Fatalf("scrape %d: %d new series, want %d", s, newAt[g.timestamp(s)], g.churn)
				}
			}
			for series, at := range stale {
				if l, ok := last[series]; !ok || l >= at {
					t.Fatalf("%s: staleness marker at %d, last sample at %d", series, at, l)
				}
			}
			if tc.shape.NaNFraction == 0 && nans != 0 {
				t.Fatalf("%d NaN samples without a NaN fraction", nans)
			}
			if tc.shape.NaNFraction > 0 && nans == 0 {
				t.Fatal("no NaN sample")
			}
			for series := range first {
				pairs := strings.Split(strings.TrimSuffix(series, ","), ",")
				names := make([]string, len(pairs))
				for i, p := range pairs {
					names[i], _, _ = strings.Cut(p, "=")
				}
				if len(names) != tc.shape.Labels+4 || !slices.IsSorted(names) || names[0] != "__name__" {
					t.Fatalf("labels %v: want __name__, instance, job, %d label_key_*, series_id, sorted", names, tc.shape.Labels)
				}
			}
		})
	}
}

// Counters only grow within a series; NaN aside, gauges stay in [0, 100).
func TestCountersGrow(t *testing.T) {
	g := newGen(t, Shape{Names: 2, Series: 3, Labels: 1, Scrapes: 6, Interval: time.Second, Start: t0, Batch: 4, Seed: 9})
	got, _, _ := sent(t, g, V1)
	prev := map[string]float64{}
	for _, s := range got {
		v := math.Float64frombits(s.v)
		if strings.HasPrefix(s.series, "__name__="+g.names[1]+",") {
			if v <= prev[s.series] {
				t.Fatalf("counter %s went from %v to %v", s.series, prev[s.series], v)
			}
			prev[s.series] = v
		} else if v < 0 || v >= 100 {
			t.Fatalf("gauge %s = %v", s.series, v)
		}
	}
}

// The checker's queries name every metric exactly once, one selector a
// name, in chunks within their bounds.
func TestCountQueriesNameEveryMetricOnce(t *testing.T) {
	for _, tc := range []struct {
		names, series, scrapes int
		maxSeries, maxSamples  int64
		maxLen, chunks         int
	}{
		{1, 1, 1, 1, 1, 1, 1},
		{1000, 10, 10, 20_000, 5_000_000, 12 << 10, 5},
		{1000, 10, 10, 20_000, 5_000_000, 1 << 20, 1},
		{1000, 10, 10, 1_000, 5_000_000, 1 << 20, 10},
		{1000, 10, 10, 20_000, 10_000, 1 << 20, 10},
	} {
		g := newGen(t, Shape{Prefix: "p", Names: tc.names, Series: tc.series, Scrapes: tc.scrapes, Interval: time.Second, Batch: 1})
		series, samples := g.countQueries(9001, tc.maxSeries, tc.maxSamples, tc.maxLen)
		if len(series) != tc.chunks || len(samples) != tc.chunks {
			t.Fatalf("%+v: %d and %d chunks, want %d", tc, len(series), len(samples), tc.chunks)
		}
		seen := map[string]int{}
		for i := range series {
			if tc.maxLen > 1 && len(samples[i]) > tc.maxLen {
				t.Fatalf("a query of %d bytes", len(samples[i]))
			}
			terms := strings.Split(samples[i], " + ")
			if cs := strings.Split(series[i], " + "); len(cs) != len(terms) {
				t.Fatalf("chunk %d: %d series terms, %d samples terms", i, len(cs), len(terms))
			}
			for j, term := range terms {
				var name string
				if _, err := fmt.Sscanf(term, "(sum(count_over_time(%s", &name); err != nil {
					t.Fatalf("term %q: %v", term, err)
				}
				name, _, _ = strings.Cut(name, "[")
				if want := fmt.Sprintf("(sum(count_over_time(%s[9001ms])) or vector(0))", name); term != want {
					t.Fatalf("term %q, want %q", term, want)
				}
				if want := fmt.Sprintf("(count(count_over_time(%s[9001ms])) or vector(0))", name); strings.Split(series[i], " + ")[j] != want {
					t.Fatalf("series term %q, want %q", strings.Split(series[i], " + ")[j], want)
				}
				seen[name]++
			}
		}
		for i := range tc.names {
			if seen[g.names[i]] != 1 {
				t.Fatalf("%s in %d chunks", g.names[i], seen[g.names[i]])
			}
		}
		if len(seen) != tc.names {
			t.Fatalf("%d names queried, want %d", len(seen), tc.names)
		}
	}
}

func TestEndpoints(t *testing.T) {
	for _, tc := range []struct{ in, write, base string }{
		{"http://h:8086/api/v1/write", "http://h:8086/api/v1/write", "http://h:8086"},
		{"http://h:8428", "http://h:8428/api/v1/write", "http://h:8428"},
		{"https://h/", "https://h/api/v1/write", "https://h"},
		{"http://h/prom/api/v1/write", "http://h/prom/api/v1/write", "http://h/prom"},
	} {
		w, b, err := Endpoints(tc.in)
		if err != nil || w != tc.write || b != tc.base {
			t.Fatalf("%s: %q %q %v; want %q %q", tc.in, w, b, err, tc.write, tc.base)
		}
	}
	if _, _, err := Endpoints("localhost:8086"); err == nil {
		t.Fatal("an address without a scheme was taken")
	}
}

func TestBadShapesAndProtocols(t *testing.T) {
	for _, s := range []Shape{
		{Names: 0, Series: 1, Scrapes: 1, Batch: 1},
		{Names: 1, Series: 1, Scrapes: 2, Batch: 1},
		{Names: 1, Series: 1, Scrapes: 1, Batch: 0},
		{Names: 1, Series: 1, Scrapes: 1, Batch: 1, Churn: 1.5},
		{Names: 1, Series: 1, Scrapes: 1, Batch: 1, NaNFraction: math.NaN()},
		{Names: 1 << 16, Series: 1 << 16, Scrapes: 1, Batch: 1},
		{Prefix: "a-b", Names: 1, Series: 1, Scrapes: 1, Batch: 1},
	} {
		if _, err := NewGenerator(s); !errors.Is(err, ErrBadShape) {
			t.Fatalf("%+v: %v", s, err)
		}
	}
	for in, want := range map[string]Protocol{"1": V1, "1.0": V1, "2.0": V2, "2": V2} {
		if p, err := ParseProtocol(in); err != nil || p != want {
			t.Fatalf("%s: %v %v", in, p, err)
		}
	}
	if _, err := ParseProtocol("3.0"); err == nil {
		t.Fatal("3.0 parsed")
	}
	if V2.ContentType() != "application/x-protobuf;proto=io.prometheus.write.v2.Request" || V1.Version() != "0.1.0" || V2.String() != "2.0" {
		t.Fatal("protocol headers")
	}
}

// Quantile leaves the times in the order taken: the report's first
// request is the first, not the fastest.
func TestQuantileKeepsTheOrder(t *testing.T) {
	ds := []time.Duration{90, 1, 3, 2}
	if got := Quantile(ds, 0.5); got != 3 {
		t.Fatalf("median %d, want 3", got)
	}
	if got := Quantile(ds, 0.99); got != 90 {
		t.Fatalf("p99 of 4 %d, want the slowest, 90", got)
	}
	if !slices.Equal(ds, []time.Duration{90, 1, 3, 2}) {
		t.Fatalf("times reordered: %v", ds)
	}
}
