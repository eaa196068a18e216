package prom

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/stratadb/strata/internal/hatracker"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
)

// decodeV1 reads a remote write 1.0 request (prometheus.WriteRequest:
// 1 repeated TimeSeries {1 Label {1 name, 2 value}, 2 Sample {1 value
// (double), 2 timestamp (int64)}, 3 Exemplar, 4 Histogram}, 3 metadata)
// by walking its bytes, as VictoriaMetrics does: labels are read in
// place, samples straight into points, and a series' key is encoded from
// the request's bytes, so a series costs no allocation (prompb's Unmarshal
// made a string of every label name and value, and a slice of every
// series' labels and samples: a third of a write's CPU and most of its
// garbage). It answers exactly as prompb.WriteRequest.Unmarshal followed
// by series would (rwproto.go says how the wire format is read), which
// FuzzDecodeV1 checks against them.
//
// The batcher's points are valid until its release. Their tags' names and
// values are strings of raw's bytes (see wireString): raw must not change
// until then.
func decodeV1(raw []byte) (*batcher, error) { return decodeV1By(raw, nil) }

// decodeV1By is decodeV1 deduplicating HA pairs with ha (batcher.dedup).
func decodeV1By(raw []byte, ha *hatracker.Tracker) (*batcher, error) {
	b := newBatcher()
	b.dedupBy(ha)
	if err := b.walkV1(raw); err != nil {
		b.release()
		return nil, fmt.Errorf("%w: protobuf: %v", errBadWrite, err)
	}
	return b, nil
}

// walkV1 walks a WriteRequest, adding its series as it goes: a malformed
// request is refused whole, so what the series before the malformation
// added is thrown away with the batcher.
func (b *batcher) walkV1(raw []byte) error {
	first := -1 // where the first series starts
	for i := 0; i < len(raw); {
		num, wt, j, err := pbKey(raw, i)
		if err != nil {
			return fmt.Errorf("WriteRequest: %v", err)
		}
		switch num {
		case 1, 3: // timeseries, metadata
			if wt != 2 {
				return fmt.Errorf("WriteRequest: field %d has wire type %d, not 2", num, wt)
			}
			var start int
			if start, i, err = pbBytes(raw, j); err != nil {
				return fmt.Errorf("WriteRequest: %v", err)
			}
			if num == 1 {
				if first < 0 {
					first = start
				}
				err = b.walkTimeSeries(raw[start:i])
				b.reserve(i-first, len(raw)-i)
			} else if err = pbCheck(raw[start:i], pbMetricMetadata); err != nil {
				err = fmt.Errorf("MetricMetadata: %v", err)
			}
		default:
			i, err = pbSkip(raw, j, wt)
		}
		if err != nil {
			return fmt.Errorf("at byte %d: %v", i, err)
		}
	}
	return nil
}

// decodeV2 reads a remote write 2.0 request (io.prometheus.write.v2.Request:
// 4 repeated symbols, 5 repeated TimeSeries {1 label references (packed
// uint32, a name's and a value's symbol each), 2 Sample {1 value, 2
// timestamp, 3 start timestamp}, 3 Histogram, 4 Exemplar, 5 Metadata})
// as decodeV1 reads 1.0, and answers as writev2.Request.Unmarshal followed
// by series would: a series whose references are odd in number or past
// the symbols makes the request malformed (a protobuf error anywhere
// first).
func decodeV2(raw []byte) (*batcher, error) { return decodeV2By(raw, nil) }

// decodeV2By is decodeV2 deduplicating HA pairs with ha (batcher.dedup).
func decodeV2By(raw []byte, ha *hatracker.Tracker) (*batcher, error) {
	b := newBatcher()
	b.dedupBy(ha)
	perr, rerr := b.walkV2(raw)
	if perr != nil || rerr != nil {
		b.release()
		if perr != nil {
			return nil, fmt.Errorf("%w: protobuf: %v", errBadWrite, perr)
		}
		return nil, rerr
	}
	return b, nil
}

// walkV2 walks a Request twice: for its symbols, which may come after the
// series that refer to them, then for its series. perr is a protobuf
// error, rerr the first series' with bad references (the request's
// series are not added past it).
func (b *batcher) walkV2(raw []byte) (perr, rerr error) {
	for i := 0; i < len(raw); {
		num, wt, j, err := pbKey(raw, i)
		if err == nil && (num == 4 || num == 5) && wt != 2 {
			err = fmt.Errorf("field %d has wire type %d, not 2", num, wt)
		}
		if err != nil {
			return fmt.Errorf("Request: at byte %d: %v", i, err), nil
		}
		if num == 4 {
			var start int
			if start, i, err = pbBytes(raw, j); err == nil {
				b.syms = append(b.syms, wireString(raw[start:i]))
			}
		} else {
			i, err = pbSkip(raw, j, wt) // a series: checked next
		}
		if err != nil {
			return fmt.Errorf("Request: at byte %d: %v", i, err), nil
		}
	}
	first := -1 // where the first series starts
	for i := 0; i < len(raw); {
		num, wt, j, _ := pbKey(raw, i) // all read once already
		if num != 5 {
			i, _ = pbSkip(raw, j, wt)
			continue
		}
		start, end, _ := pbBytes(raw, j)
		if first < 0 {
			first = start
		}
		i = end
		err, bad := b.walkTimeSeriesV2(raw[start:end], rerr == nil)
		if err != nil {
			return fmt.Errorf("at byte %d: %v", i, err), nil
		}
		if rerr == nil {
			rerr = bad
		}
		b.reserve(i-first, len(raw)-i)
	}
	return nil, rerr
}

// walkTimeSeriesV2 reads one 2.0 TimeSeries and, if add, adds it. perr
// is a protobuf error; rerr says the series' label references are odd in
// number or past the symbols (then it is not added).
func (b *batcher) walkTimeSeriesV2(m []byte, add bool) (perr, rerr error) {
	b.refs, b.wss = b.refs[:0], b.wss[:0]
	histograms := 0
	for i := 0; i < len(m); {
		num, wt, j, err := pbKey(m, i)
		if err != nil {
			return fmt.Errorf("TimeSeries: %v", err), nil
		}
		switch {
		case num == 1 && wt == 0: // a label reference
			var ref uint64
			ref, i, err = pbUvarint(m, j)
			b.refs = append(b.refs, uint32(ref))
		case num == 1 && wt == 2: // label references, packed
			var end int
			if i, end, err = pbBytes(m, j); err != nil {
				break
			}
			for err == nil && i < end { // NB: the last may end past end
				var ref uint64
				ref, i, err = pbUvarint(m, i)
				b.refs = append(b.refs, uint32(ref))
			}
		case num == 1:
			return fmt.Errorf("TimeSeries: field 1 has wire type %d, not 0 or 2", wt), nil
		case num >= 2 && num <= 5: // samples, histograms, exemplars, metadata
			if wt != 2 {
				return fmt.Errorf("TimeSeries: field %d has wire type %d, not 2", num, wt), nil
			}
			var start int
			if start, i, err = pbBytes(m, j); err != nil {
				break
			}
			sub := m[start:i]
			switch num {
			case 2:
				var s wireSample
				if s, err = readSample(sub, true); err == nil {
					b.wss = append(b.wss, s)
				}
			case 3:
				histograms++
				if err = pbCheck(sub, pbHistogramV2); err != nil {
					err = fmt.Errorf("Histogram: %v", err)
				}
			case 4:
				if err = pbCheck(sub, pbExemplarV2); err != nil {
					err = fmt.Errorf("Exemplar: %v", err)
				}
			case 5:
				if err = pbCheck(sub, pbMetadataV2); err != nil {
					err = fmt.Errorf("Metadata: %v", err)
				}
			}
		default:
			i, err = pbSkip(m, j, wt)
		}
		if err != nil {
			return fmt.Errorf("TimeSeries: %v", err), nil
		}
	}
	if !add {
		return nil, nil
	}
	refs := b.refs
	if len(refs)%2 != 0 {
		return nil, fmt.Errorf("%w: odd number of label references", errBadWrite)
	}
	b.wls = b.wls[:0]
	for k := 0; k < len(refs); k += 2 {
		if int(refs[k]) >= len(b.syms) || int(refs[k+1]) >= len(b.syms) {
			return nil, fmt.Errorf("%w: label reference past the %d symbols", errBadWrite, len(b.syms))
		}
		b.wls = append(b.wls, wireLabel{name: b.syms[refs[k]], value: b.syms[refs[k+1]]})
	}
	b.walkedSeries(b.wls, histograms, b.wss)
	return nil, nil
}

// reserve makes room in the arenas, once they hold the points of the
// first series that had some, for the rest of the request: done bytes of
// series were walked and left bytes are left, so as much again as they
// hold, in proportion (a new batcher's arenas grown by appends were
// allocated five times over, as Go grows a large slice by a quarter).
func (b *batcher) reserve(done, left int) {
	if b.reserved || len(b.points) == 0 {
		return
	}
	b.reserved = true
	more := func(n int) int { return int(int64(n)*int64(left)/int64(max(done, 1))) + n/8 }
	b.points = reserved(b.points, more(len(b.points)))
	b.fields = reserved(b.fields, more(len(b.fields)))
	b.tags = reserved(b.tags, more(len(b.tags)))
	b.keys = reserved(b.keys, more(len(b.keys)))
}

// reserved returns s with room for n more elements.
func reserved[T any](s []T, n int) []T {
	if cap(s)-len(s) >= n {
		return s
	}
	return append(row.Written(make([]T, 0, len(s)+n)), s...)
}

// wireLabel is a label of the request being walked.
type wireLabel struct{ name, value string }

// wireSample is a sample of the series being walked.
type wireSample struct {
	ts int64 // ms
	v  float64
}

// walkTimeSeries reads one TimeSeries and adds it. Its fields may come in
// any order: labels and samples are collected before the series is added.
func (b *batcher) walkTimeSeries(m []byte) error {
	b.wls, b.wss = b.wls[:0], b.wss[:0]
	histograms := 0
	for i := 0; i < len(m); {
		num, wt, j, err := pbKey(m, i)
		if err != nil {
			return fmt.Errorf("TimeSeries: %v", err)
		}
		switch num {
		case 1, 2, 3, 4: // labels, samples, exemplars, histograms
			if wt != 2 {
				return fmt.Errorf("TimeSeries: field %d has wire type %d, not 2", num, wt)
			}
			var start int
			if start, i, err = pbBytes(m, j); err != nil {
				return fmt.Errorf("TimeSeries: %v", err)
			}
			sub := m[start:i]
			switch num {
			case 1:
				var l wireLabel
				if l, err = readLabel(sub); err == nil {
					b.wls = append(b.wls, l)
				}
			case 2:
				var s wireSample
				if s, err = readSample(sub, false); err == nil {
					b.wss = append(b.wss, s)
				}
			case 3:
				if err = pbCheck(sub, pbExemplar); err != nil {
					err = fmt.Errorf("Exemplar: %v", err)
				}
			case 4:
				histograms++
				if err = pbCheck(sub, pbHistogram); err != nil {
					err = fmt.Errorf("Histogram: %v", err)
				}
			}
		default:
			if i, err = pbSkip(m, j, wt); err != nil {
				err = fmt.Errorf("TimeSeries: %v", err)
			}
		}
		if err != nil {
			return err
		}
	}
	b.walkedSeries(b.wls, histograms, b.wss)
	return nil
}

// readLabel reads a Label (a repeated field: the last one counts).
func readLabel(m []byte) (wireLabel, error) {
	// As Prometheus writes one: name and value, each shorter than 128 bytes.
	if len(m) >= 4 && m[0] == 1<<3|2 && m[1] < 0x80 {
		if v := 2 + int(m[1]); v+2 <= len(m) && m[v] == 2<<3|2 && m[v+1] < 0x80 && int(m[v+1]) == len(m)-v-2 {
			return wireLabel{name: wireString(m[2:v]), value: wireString(m[v+2:])}, nil
		}
	}
	var l wireLabel
	for i := 0; i < len(m); {
		num, wt, j, err := pbKey(m, i)
		if err != nil {
			return l, fmt.Errorf("Label: %v", err)
		}
		switch num {
		case 1, 2: // name, value
			if wt != 2 {
				return l, fmt.Errorf("Label: field %d has wire type %d, not 2", num, wt)
			}
			var start int
			if start, i, err = pbBytes(m, j); err != nil {
				return l, fmt.Errorf("Label: %v", err)
			}
			if num == 1 {
				l.name = wireString(m[start:i])
			} else {
				l.value = wireString(m[start:i])
			}
		default:
			if i, err = pbSkip(m, j, wt); err != nil {
				return l, fmt.Errorf("Label: %v", err)
			}
		}
	}
	return l, nil
}

// readSample reads a Sample (a repeated field: the last one counts); a
// 2.0 one (v2) has a start timestamp, which is not kept.
func readSample(m []byte, v2 bool) (wireSample, error) {
	var s wireSample
	for i := 0; i < len(m); {
		num, wt, j, err := pbKey(m, i)
		if err != nil {
			return s, fmt.Errorf("Sample: %v", err)
		}
		switch {
		case num == 1 && wt == 1: // value
			var bits uint64
			bits, i, err = pbFixed64(m, j)
			s.v = math.Float64frombits(bits)
		case num == 2 && wt == 0: // timestamp
			var ts uint64
			ts, i, err = pbUvarint(m, j)
			s.ts = int64(ts)
		case num == 3 && v2 && wt == 0: // start timestamp
			_, i, err = pbUvarint(m, j)
		case num == 1 || num == 2 || num == 3 && v2:
			return s, fmt.Errorf("Sample: field %d has wire type %d", num, wt)
		default:
			i, err = pbSkip(m, j, wt)
		}
		if err != nil {
			return s, fmt.Errorf("Sample: %v", err)
		}
	}
	return s, nil
}

// wireString is the string of a request's bytes, without a copy.
//
// Lifetime: the strings (the points' tag names and values) are valid while
// the request's decompressed body is, which ServeHTTP allocates for each
// request and never writes again once it is decoded. Nothing keeps them
// past the write today: the engine copies what it keeps of a point (the
// memtable its series key, the WAL its fields; a remote region's write is
// marshalled before it returns), and the metrics table's schema is Labels,
// so tag names never become columns. Should something keep one, it keeps
// the whole body alive, never reads changed bytes: a body must not be
// reused for another request while its points may be referenced.
func wireString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// wireLabels are a walked series' labels as sent.
type wireLabels []wireLabel

// labels are ls as labels.Labels, sorted by name: what decoding with
// prompb gave series.
func (ls wireLabels) labels(sb *labels.ScratchBuilder) labels.Labels {
	sb.Reset()
	for _, l := range ls {
		sb.Add(l.name, l.value)
	}
	sb.Sort()
	return sb.Labels()
}

// get is the value of label name ("": none).
func (ls wireLabels) get(name string) string {
	for _, l := range ls {
		if l.name == name {
			return l.value
		}
	}
	return ""
}

// String is the labels as a refusal names them.
func (ls wireLabels) String() string {
	var sb labels.ScratchBuilder
	return ls.labels(&sb).String()
}

// walkedSeries adds a walked series as series adds it: with its labels in
// the order Prometheus sends them (sorted by name, as the spec requires,
// names unique, non-empty and valid, __name__ among them), its tags and
// key come from its labels as they are, with no labels.Labels built. Any
// other series goes through series, which knows every other case's answer
// (unsorted labels are sorted there, a rare slow path).
func (b *batcher) walkedSeries(ls wireLabels, histograms int, samples []wireSample) {
	if b.haCluster != "" && !b.haFirst {
		b.haNote(ls.get)
	}
	if len(samples) == 0 { // series refuses its histograms and stops there
		if histograms > 0 {
			b.refuse(histograms, ls, "native histograms are not supported")
		}
		return
	}
	tags, key, shape, ok := b.appendTags(ls)
	if !ok {
		b.series(ls.labels(&b.sb), histograms, len(samples), func(i int) (int64, float64) { return samples[i].ts, samples[i].v })
		return
	}
	if histograms > 0 {
		b.refuse(histograms, ls, "native histograms are not supported")
	}
	for _, s := range samples {
		if s.ts > math.MaxInt64/1_000_000 || s.ts < math.MinInt64/1_000_000 {
			b.refuse(1, ls, fmt.Sprintf("timestamp %d ms is out of range", s.ts))
			continue
		}
		b.fields = append(b.fields, row.Field{Name: ValueField, Value: row.FloatValue(s.v)})
		f := len(b.fields)
		b.points = append(b.points, row.Point{Tags: tags, Series: key, Shape: shape, TS: s.ts * 1_000_000, Fields: b.fields[f-1 : f : f]})
	}
}

// appendTags appends the tags and the series key of labels ls to the
// batcher's, if ls are as Prometheus sends them (see walkedSeries), and
// returns them and their shape (row.Point.Shape). ok false: they are not,
// and nothing was appended.
func (b *batcher) appendTags(ls wireLabels) (tags []row.Tag, key []byte, shape uint32, ok bool) {
	t0, k0 := len(b.tags), len(b.keys)
	fail := func() ([]row.Tag, []byte, uint32, bool) {
		// NB: names may hold some of ls's now: forgotten, so that the
		// next series gets a shape of its own.
		b.tags, b.keys, b.names = b.tags[:t0], b.keys[:k0], b.names[:0]
		return nil, nil, 0, false
	}
	// same: the names so far are the last series' (which were sorted).
	same, named := len(ls) == len(b.names), false
	for i, l := range ls {
		if i == len(b.names) {
			b.names = append(b.names, seenName{})
		}
		seen := &b.names[i]
		if seen.name != l.name {
			*seen, same = seenName{name: l.name}, false
		}
		if !same && (i == 0 && l.name == "" || i > 0 && l.name <= ls[i-1].name) {
			return fail()
		}
		// A deduplicated request's replica label is no tag either.
		tag := l.value != "" && (b.replica == "" || l.name != b.haReplica)
		if tag != seen.tag {
			seen.tag, same = tag, false
		}
		if !tag {
			continue // no tag
		}
		if !seen.valid {
			if schema.ValidateLabelName(l.name) != nil {
				return fail()
			}
			seen.valid = true
		}
		named = named || l.name == model.MetricNameLabel
		b.tags = append(b.tags, row.Tag{Name: l.name, Value: l.value})
		// The key as row.SeriesEncoder writes it for these sorted tags.
		b.keys = binary.AppendUvarint(b.keys, uint64(len(l.name)))
		b.keys = append(b.keys, l.name...)
		b.keys = binary.AppendUvarint(b.keys, uint64(len(l.value)))
		b.keys = append(b.keys, l.value...)
	}
	if !named {
		return fail()
	}
	if !same || b.shape == 0 {
		if b.shape++; b.shape == 0 {
			b.shape = 1
		}
	}
	b.names = b.names[:len(ls)]
	return b.tags[t0:len(b.tags):len(b.tags)], b.keys[k0:len(b.keys):len(b.keys)], b.shape, true
}

// seenName is what the batcher knows of the label at one position of the
// last series appendTags took: its name, whether its value was not empty
// (it was a tag), whether the name is valid (checked).
type seenName struct {
	name       string
	tag, valid bool
}
