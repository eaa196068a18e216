package rwload

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// Protocol is a remote-write protocol version.
type Protocol int

// The remote-write protocols: 1.0 (prometheus.WriteRequest) and 2.0
// (io.prometheus.write.v2.Request, labels by reference into a symbols
// table).
const (
	V1 Protocol = 1
	V2 Protocol = 2
)

// ParseProtocol reads "1.0" or "2.0" (or "1", "2").
func ParseProtocol(s string) (Protocol, error) {
	switch s {
	case "1", "1.0":
		return V1, nil
	case "2", "2.0":
		return V2, nil
	}
	return 0, fmt.Errorf("rwload: unknown remote-write protocol %q (want 1.0 or 2.0)", s)
}

func (p Protocol) String() string { return strconv.Itoa(int(p)) + ".0" }

// ContentType is the protocol's Content-Type header.
func (p Protocol) ContentType() string {
	if p == V2 {
		return "application/x-protobuf;proto=io.prometheus.write.v2.Request"
	}
	return "application/x-protobuf"
}

// Version is the protocol's X-Prometheus-Remote-Write-Version header.
func (p Protocol) Version() string {
	if p == V2 {
		return "2.0.0"
	}
	return "0.1.0"
}

// A job is one shard's share of a scrape: the samples of slots [lo, hi)
// and the staleness markers of those among them the scrape churned out.
// Prometheus hashes a series to one shard, so a series' samples leave in
// order; the jobs of a scrape cut the slots the same way every scrape,
// and job k goes to shard k mod shards.
type job struct {
	scrape int
	lo, hi int64
	stale  []int64
}

// jobs cuts scrape s into jobs of at most Batch slots.
func (g *Generator) jobs(s int) []job {
	var churned []int64
	if s > 0 && g.shape.StaleMarkers {
		churned = g.churned(s)
	}
	batch := int64(g.shape.Batch)
	out := make([]job, 0, (g.total+batch-1)/batch)
	for lo := int64(0); lo < g.total; lo += batch {
		hi := min(lo+batch, g.total)
		i, _ := slices.BinarySearch(churned, lo)
		j, _ := slices.BinarySearch(churned, hi)
		out = append(out, job{scrape: s, lo: lo, hi: hi, stale: churned[i:j]})
	}
	return out
}

// A request is one encoded remote-write body and what it holds.
type request struct {
	body []byte // snappy-compressed protobuf
	// samples counts the samples (NaN included, staleness markers not),
	// nans the NaN samples, stale the staleness markers, and series the
	// samples that are their series' first.
	samples, nans, stale, series int
}

// encoder turns jobs into requests, reusing its buffers: one a shard.
type encoder struct {
	g     *Generator
	proto Protocol

	v1        prompb.WriteRequest
	v1labels  []prompb.Label
	v1samples []prompb.Sample

	v2        writev2.Request
	syms      writev2.SymbolsTable
	refs      []uint32
	v2samples []writev2.Sample

	raw, body []byte
}

func newEncoder(g *Generator, p Protocol) *encoder {
	return &encoder{g: g, proto: p, syms: writev2.NewSymbolTable()}
}

// genNames caches the series_id values of the first generations.
var genNames = func() []string {
	out := make([]string, 64)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}()

func genName(gen int64) string {
	if gen < int64(len(genNames)) {
		return genNames[gen]
	}
	return strconv.FormatInt(gen, 10)
}

// encode emits job j as requests of at most Batch samples and markers:
// its slots' samples, then its staleness markers. A request's body is
// valid until emit returns.
func (e *encoder) encode(j job, emit func(request) error) error {
	g := e.g
	slots := int(j.hi - j.lo)
	items := slots + len(j.stale)
	for from := 0; from < items; from += g.shape.Batch {
		to := min(from+g.shape.Batch, items)
		e.reset(to - from)
		var r request
		ts := g.timestamp(j.scrape)
		for it := from; it < to; it++ {
			var x, gen int64
			var v float64
			if it < slots {
				x = j.lo + int64(it)
				gen = g.generation(x, j.scrape)
				v = g.value(x, gen, j.scrape)
				r.samples++
				if math.IsNaN(v) {
					r.nans++
				}
				if j.scrape == 0 || g.churn > 0 && g.generation(x, j.scrape-1) != gen {
					r.series++
				}
			} else {
				x = j.stale[it-slots]
				gen = g.generation(x, j.scrape) - 1
				v = math.Float64frombits(value.StaleNaN)
				r.stale++
			}
			e.add(x, gen, ts, v)
		}
		body, err := e.finish()
		if err != nil {
			return err
		}
		r.body = body
		if err := emit(r); err != nil {
			return err
		}
	}
	return nil
}

// reset starts a request of n series, sizing the arenas so that slices
// cut from them stay valid until finish.
func (e *encoder) reset(n int) {
	per := len(e.g.lnames) + 1
	if e.proto == V2 {
		e.syms.Reset()
		e.v2.Timeseries = e.v2.Timeseries[:0]
		e.refs = slices.Grow(e.refs[:0], 2*per*n)
		e.v2samples = slices.Grow(e.v2samples[:0], n)
		return
	}
	e.v1.Timeseries = e.v1.Timeseries[:0]
	e.v1labels = slices.Grow(e.v1labels[:0], per*n)
	e.v1samples = slices.Grow(e.v1samples[:0], n)
}

// add appends slot x's series (generation gen) with one sample.
func (e *encoder) add(x, gen int64, ts int64, v float64) {
	g := e.g
	name := int(x / int64(g.shape.Series))
	target := g.targets[x%int64(g.shape.Series)]
	if e.proto == V2 {
		start := len(e.refs)
		e.refs = append(e.refs, e.syms.Symbolize("__name__"), e.syms.Symbolize(g.names[name]))
		for k, val := range target {
			e.refs = append(e.refs, e.syms.Symbolize(g.lnames[k]), e.syms.Symbolize(val))
		}
		e.refs = append(e.refs, e.syms.Symbolize("series_id"), e.syms.Symbolize(genName(gen)))
		e.v2samples = append(e.v2samples, writev2.Sample{Value: v, Timestamp: ts})
		typ := writev2.Metadata_METRIC_TYPE_GAUGE
		if isCounter(name) {
			typ = writev2.Metadata_METRIC_TYPE_COUNTER
		}
		e.v2.Timeseries = append(e.v2.Timeseries, writev2.TimeSeries{
			LabelsRefs: e.refs[start:len(e.refs):len(e.refs)],
			Samples:    e.v2samples[len(e.v2samples)-1 : len(e.v2samples) : len(e.v2samples)],
			Metadata:   writev2.Metadata{Type: typ},
		})
		return
	}
	start := len(e.v1labels)
	e.v1labels = append(e.v1labels, prompb.Label{Name: "__name__", Value: g.names[name]})
	for k, val := range target {
		e.v1labels = append(e.v1labels, prompb.Label{Name: g.lnames[k], Value: val})
	}
	e.v1labels = append(e.v1labels, prompb.Label{Name: "series_id", Value: genName(gen)})
	e.v1samples = append(e.v1samples, prompb.Sample{Value: v, Timestamp: ts})
	e.v1.Timeseries = append(e.v1.Timeseries, prompb.TimeSeries{
		Labels:  e.v1labels[start:len(e.v1labels):len(e.v1labels)],
		Samples: e.v1samples[len(e.v1samples)-1 : len(e.v1samples) : len(e.v1samples)],
	})
}

// finish marshals and compresses the request.
func (e *encoder) finish() ([]byte, error) {
	var err error
	if e.proto == V2 {
		e.v2.Symbols = e.syms.Symbols()
		e.raw, err = e.v2.OptimizedMarshal(e.raw)
	} else {
		n := e.v1.Size()
		e.raw = slices.Grow(e.raw[:0], n)[:n]
		n, err = e.v1.MarshalToSizedBuffer(e.raw)
		e.raw = e.raw[len(e.raw)-n:]
	}
	if err != nil {
		return nil, fmt.Errorf("rwload: marshal: %w", err)
	}
	e.body = snappy.Encode(e.body[:cap(e.body)], e.raw)
	return e.body, nil
}
