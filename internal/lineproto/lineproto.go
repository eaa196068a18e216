// Package lineproto parses InfluxDB line protocol:
//
//	measurement[,tag=value...] field=value[,field=value...] [timestamp]
//
// with InfluxDB's escaping rules (measurement: `\,` and `\ `; tag keys, tag
// values and field keys: `\,`, `\=` and `\ `; string field values: `\"` and
// `\\`), field types float (`1`, `1.5`, `-2e3`), integer (`1i`), unsigned
// (`1u`), string (`"x"`) and boolean (`t`, `T`, `true`, `True`, `TRUE` and the
// same for false), comment lines starting with `#`, and timestamps in a
// chosen precision (default nanoseconds; a point without one gets the
// request's time).
package lineproto

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/stratadb/strata/internal/row"
)

// Precision is the unit of timestamps.
type Precision int64

// Precisions, as nanoseconds per unit.
const (
	Nanosecond  Precision = 1
	Microsecond Precision = 1e3
	Millisecond Precision = 1e6
	Second      Precision = 1e9
	Minute      Precision = 60e9
	Hour        Precision = 3600e9
)

// ParsePrecision accepts InfluxDB's names: "ns"/"n", "us"/"u"/"µ", "ms",
// "s", and 1.x's "m" and "h". The empty string is nanoseconds.
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "", "n", "ns":
		return Nanosecond, nil
	case "u", "us", "µ", "µs":
		return Microsecond, nil
	case "ms":
		return Millisecond, nil
	case "s":
		return Second, nil
	case "m":
		return Minute, nil
	case "h":
		return Hour, nil
	}
	return 0, fmt.Errorf("lineproto: unknown precision %q (want ns, us, ms, s, m or h)", s)
}

// Batch is one request's valid lines: Points[i] was line Lines[i]
// (1-based) of measurement Measurements[i].
type Batch struct {
	Points       []row.Point
	Measurements []string
	Lines        []int
}

// Len is the number of points.
func (b *Batch) Len() int { return len(b.Points) }

// LineError is a malformed line.
type LineError struct {
	Line   int    // 1-based
	Text   string // the line, cut to 256 bytes
	Reason string
}

func (e *LineError) Error() string {
	return fmt.Sprintf("line %d: %s: %q", e.Line, e.Reason, e.Text)
}

// ErrSyntax is wrapped by every *LineError.
var ErrSyntax = errors.New("lineproto: syntax error")

func (e *LineError) Unwrap() error { return ErrSyntax }

// Parser parses requests. It interns measurement, tag and field names and
// reuses its memory between Parse calls; it is not safe for concurrent use.
type Parser struct {
	names map[string]string
	// shape holds the names of the last line by position (measurement,
	// tag keys, field keys): the lines of a request mostly repeat it, and
	// comparing with it is cheaper than a map lookup.
	shape []string
	clean []bool // shape[i] has no byte that ends or escapes a token
	buf   []byte
	// The request's tag values back to back, and where each tag's ends
	// (by its index in tags): the values are cut from it when the request
	// is parsed.
	vals []byte
	ends []int
	// The batch Parse returns, and the arenas its points' Tags and Fields
	// are cut from: rewound by the next Parse, so a steady stream of
	// requests writes into the same memory (fresh slabs were a third of
	// a write's allocations, and their stores a tenth of its CPU).
	batch  Batch
	tags   []row.Tag
	fields []row.Field
	// The shape of the last valid line (see row.Point.Shape): its id, and
	// whether the names of the line being parsed all matched shape.
	shapeID uint32
	last    row.Point
	miss    bool
	// tagSets holds the tag sets of earlier lines by their text (from the
	// first ',' after the measurement to the space before the fields),
	// parsed, with their series keys: a source sends the same series
	// request after request, and a line whose tag text is known skips
	// reading its tags and encoding its key. segs is each point's tag
	// text, to be added once its values are set (nil: known or not kept).
	tagSets map[string]*tagSet
	segs    [][]byte
	seg     []byte // the tag text parseLine read, for Parse
	// The known tag set of the last line, if it had one: its successor
	// (tagSet.next) is tried before the map, as sources send their series
	// in the same order request after request.
	prev *tagSet
}

// tagSet is a parsed tag set: its tags (names interned, values owned) and
// its series key (row.EncodeSeries), which points share and must not
// change.
type tagSet struct {
	tags []row.Tag
	key  []byte
	text string // the tag text it is known by (no backslash)
	// next is the known tag set of the line that followed one of this
	// set the last time: a line's tag text is compared with it before
	// it is looked up, which costs a hash and a scan for its end.
	next *tagSet
}

// maxTagSets bounds the tag sets a parser keeps (it forgets them all at
// once when full).
const maxTagSets = 1 << 16

// NewParser returns a parser.
func NewParser() *Parser {
	return &Parser{names: map[string]string{}, tagSets: map[string]*tagSet{}}
}

// stopSet marks the bytes that end a token (stop) and the escape byte
// (escape), so scanning looks up each byte once.
type stopSet [256]uint8

const (
	stop   = 1
	escape = 2
)

func stops(chars string) *stopSet {
	s := stopSet{'\\': escape}
	for i := range len(chars) {
		s[chars[i]] = stop
	}
	return &s
}

var (
	stopMeasurement = stops(", ")
	stopTagKey      = stops("=, ")
	stopTagValue    = stops(", ")
	stopFieldKey    = stops("= ,")
	stopEquals      = stops("=") // after a key known from the last line
)

// internAt interns the name at position i of a line.
func (p *Parser) internAt(i int, b []byte) string {
	if i < len(p.shape) && p.shape[i] == string(b) {
		return p.shape[i]
	}
	s := p.intern(b)
	p.knownAt(i, s)
	return s
}

// knownAt records s, an interned name, at position i of the line (as
// internAt does for a name read).
func (p *Parser) knownAt(i int, s string) {
	if i < len(p.shape) && p.shape[i] == s {
		return
	}
	p.miss = true
	clean := !strings.ContainsAny(s, ",= \\")
	if i < len(p.shape) {
		p.shape[i], p.clean[i] = s, clean
	} else if i == len(p.shape) && i < 1024 {
		p.shape, p.clean = append(p.shape, s), append(p.clean, clean)
	}
}

// shaped returns the name at position i of the last line, and what
// follows it, if rest starts with it and then a byte of end: then a scan
// would find the same name (it has no byte that ends or escapes a token),
// and a line like the last one is read without scanning and comparing
// its names byte by byte twice.
func (p *Parser) shaped(i int, rest []byte, end *stopSet) (string, []byte, bool) {
	if i >= len(p.shape) || !p.clean[i] {
		return "", rest, false
	}
	s := p.shape[i]
	if len(rest) <= len(s) || end[rest[len(s)]] != stop || string(rest[:len(s)]) != s {
		return "", rest, false
	}
	return s, rest[len(s):], true
}

func (p *Parser) intern(b []byte) string {
	if s, ok := p.names[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(p.names) < 100_000 {
		p.names[s] = s
	}
	return s
}

var newline = []byte{'\n'}

// Parse parses data. Points without a timestamp get now. It returns the
// valid lines' points and every malformed line's error: callers decide
// whether a request with errors is written in part.
//
// The batch, and its points' Tags and Fields, and their tags' values are
// the parser's memory: they are valid until its next Parse (callers keep
// the parser until they are done with the points, and copy what they keep
// of a tag's value, as a series key does). Names and string field values
// are strings of their own. A point of a tag set the parser has seen
// before shares the kept set's Tags and series key (row.Point.Series)
// with other points: neither may be changed.
func (p *Parser) Parse(data []byte, precision Precision, now time.Time) (*Batch, []*LineError) {
	var errs []*LineError
	// A point a line: sized once, not grown by doubling (a tenth of the
	// parse for a 10,000-line request); the arenas are sized from the
	// first valid line (reserve).
	lines := bytes.Count(data, newline) + 1
	b := &p.batch
	b.Points, b.Measurements, b.Lines = grow(b.Points, lines), grow(b.Measurements, lines), grow(b.Lines, lines)
	b.Points, b.Measurements, b.Lines = b.Points[:0], b.Measurements[:0], b.Lines[:0]
	p.tags, p.fields, p.vals, p.ends = p.tags[:0], p.fields[:0], p.vals[:0], p.ends[:0]
	clear(p.segs)
	p.segs = grow(p.segs, lines)[:0]
	p.shapeID++ // the last point's memory is this request's now
	lineNo := 0
	defaultTS := now.UnixNano()
	defaultTS -= defaultTS % int64(precision)
	for len(data) > 0 {
		lineNo++
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		for len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		line = trimSpace(line, true)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		nt, nf, nv := len(p.tags), len(p.fields), len(p.vals)
		p.miss = false
		m, pt, reason := p.parseLine(line, precision, defaultTS)
		if reason != "" {
			p.shapeID++ // the names it left in shape are not the last point's
			p.tags, p.fields, p.vals, p.ends = p.tags[:nt], p.fields[:nf], p.vals[:nv], p.ends[:nt]
			text := line
			if len(text) > 256 {
				text = text[:256]
			}
			errs = append(errs, &LineError{Line: lineNo, Text: string(text), Reason: reason})
			continue
		}
		if len(b.Points) == 0 {
			tags := len(pt.Tags)
			if pt.Series != nil {
				tags = 0 // a known tag set: the arena holds no tags of its lines
			}
			p.reserve(lines, tags, len(pt.Fields))
		}
		pt.Shape = p.shapeOf(&pt)
		b.Points = append(b.Points, pt)
		p.segs = append(p.segs, p.seg)
		b.Measurements = append(b.Measurements, m)
		b.Lines = append(b.Lines, lineNo)
	}
	p.setTagValues()
	if len(p.tags) == 0 {
		// Every line's tag set was known: a source that keeps its series
		// needs no tag arena, which the first request of new series left
		// (a few MiB a parser, kept for nothing).
		p.tags, p.ends = nil, nil
	}
	return b, errs
}

// reserve makes room in the arenas for a request of lines like its first
// valid one (tags tags and fields fields), if the last request did not.
func (p *Parser) reserve(lines, tags, fields int) {
	if n := lines * tags; cap(p.tags) < n {
		p.tags = append(row.Written(make([]row.Tag, 0, n)), p.tags...)
		p.ends = append(make([]int, 0, n), p.ends...)
	}
	if n := lines * fields; cap(p.fields) < n {
		p.fields = append(row.Written(make([]row.Field, 0, n)), p.fields...)
	}
}

// setTagValues gives the points their tag values, cut from the parser's
// buffer of them, which the next Parse overwrites: copied into a string a
// request, the values were a twentieth of a write's CPU, mostly faulting
// in the fresh memory. Tags are numbered in the order the valid lines put
// them into the arena, which is the points' order (an arena that grew
// left earlier points' tags in the old array: they are reached through
// the points).
func (p *Parser) setTagValues() {
	all, k, start := unsafe.String(unsafe.SliceData(p.vals), len(p.vals)), 0, 0
	for i := range p.batch.Points {
		pt := &p.batch.Points[i]
		if pt.Series != nil {
			continue // a known tag set's
		}
		for j := range pt.Tags {
			pt.Tags[j].Value = all[start:p.ends[k]]
			start = p.ends[k]
			k++
		}
		if seg := p.segs[i]; seg != nil {
			p.keep(seg, pt)
		}
	}
}

// keep adds the tag set of pt, whose text is seg, to the known ones, and
// gives pt the kept copy and its series key (unless the key does not
// encode: the writer reports that).
func (p *Parser) keep(seg []byte, pt *row.Point) {
	if ts, ok := p.tagSets[string(seg)]; ok { // twice in one request
		pt.Tags, pt.Series = ts.tags, ts.key
		return
	}
	key, err := row.EncodeSeries(nil, pt.Tags)
	if err != nil {
		return
	}
	if len(p.tagSets) >= maxTagSets {
		// Forgotten all at once; no set of them is the last line's
		// (this runs after the request is parsed), so none is reached
		// through a successor either.
		clear(p.tagSets)
		p.prev = nil
	}
	ts := &tagSet{tags: make([]row.Tag, len(pt.Tags)), key: key[:len(key):len(key)], text: string(seg)}
	for j, tg := range pt.Tags {
		ts.tags[j] = row.Tag{Name: tg.Name, Value: strings.Clone(tg.Value)}
	}
	p.tagSets[ts.text] = ts
	pt.Tags, pt.Series = ts.tags, ts.key
}

// shapeOf returns the shape id of a point just parsed: the last valid
// line's if every name of this one matched the names at its position in
// that line (p.miss false), with as many tags and fields and the same
// field kinds; otherwise a new one.
func (p *Parser) shapeOf(pt *row.Point) uint32 {
	same := !p.miss && p.shapeID != 0 && len(pt.Tags) == len(p.last.Tags) && len(pt.Fields) == len(p.last.Fields)
	for i := 0; same && i < len(pt.Fields); i++ {
		same = pt.Fields[i].Value.Kind() == p.last.Fields[i].Value.Kind()
	}
	if !same {
		if p.shapeID++; p.shapeID == 0 {
			p.shapeID = 1
		}
	}
	p.last = *pt
	return p.shapeID
}

// grow returns s with room for n elements, reallocated only if it has
// too little. Its contents are not kept.
func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s
	}
	return row.Written(make([]T, 0, n))
}

// scan returns the bytes up to the first unescaped byte of stop (or the
// end), unescaped, and the rest starting at that byte.
func (p *Parser) scan(b []byte, set *stopSet) (tok []byte, rest []byte, escaped bool) {
	for i := 0; i < len(b); i++ {
		switch set[b[i]] {
		case 0:
		case escape:
			if i+1 < len(b) {
				escaped = true
				i++
			}
		default:
			return p.unescape(b[:i], escaped), b[i:], escaped
		}
	}
	return p.unescape(b, escaped), nil, escaped
}

// trimSpace drops leading spaces (and tabs, if tabs).
func trimSpace(b []byte, tabs bool) []byte {
	for len(b) > 0 && (b[0] == ' ' || tabs && b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// unescape removes the backslash of `\,`, `\=`, `\ ` (other backslashes
// stay, as in InfluxDB).
func (p *Parser) unescape(b []byte, escaped bool) []byte {
	if !escaped {
		return b
	}
	out := p.buf[:0]
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+1 < len(b) && (b[i+1] == ',' || b[i+1] == '=' || b[i+1] == ' ') {
			i++
		}
		out = append(out, b[i])
	}
	p.buf = out
	return out
}

// parseLine parses one line into a point whose Tags and Fields are
// appended to the parser's arenas, and returns its measurement.
func (p *Parser) parseLine(line []byte, precision Precision, defaultTS int64) (string, row.Point, string) {
	var pt row.Point
	m, rest, ok := p.shaped(0, line, stopMeasurement)
	if !ok {
		var tok []byte
		tok, rest, _ = p.scan(line, stopMeasurement)
		if len(tok) == 0 {
			return "", pt, "missing measurement"
		}
		m = p.internAt(0, tok)
	}
	pos := 1
	nt := len(p.tags)
	// Tags: a known tag text, or read one by one (and known from the end
	// of the request on, if it has no escapes).
	p.seg = nil
	prev := p.prev
	p.prev = nil
	if len(rest) > 0 && rest[0] == ',' {
		var known *tagSet
		if prev != nil && prev.next != nil {
			// The same text, and then the space a scan would stop at (the
			// text has no byte a scan would stop at or unescape before).
			if t := prev.next.text; len(rest) > len(t) && rest[len(t)] == ' ' && string(rest[:len(t)]) == t {
				known = prev.next
			}
		}
		if known == nil {
			if end := bytes.IndexByte(rest, ' '); end > 0 && bytes.IndexByte(rest[:end], '\\') < 0 {
				if known = p.tagSets[string(rest[:end])]; known == nil {
					p.seg = rest[:end]
				} else if prev != nil {
					prev.next = known
				}
			}
		}
		if known != nil {
			for _, tg := range known.tags {
				p.knownAt(pos, tg.Name)
				pos++
			}
			pt.Tags, pt.Series, rest = known.tags, known.key, rest[len(known.text):]
			p.prev = known
		}
	}
	for len(rest) > 0 && rest[0] == ',' {
		name, after, ok := p.shaped(pos, rest[1:], stopEquals)
		if ok {
			rest = after
		} else {
			var key []byte
			key, rest, _ = p.scan(rest[1:], stopTagKey)
			if len(key) == 0 {
				return "", pt, "missing tag key"
			}
			if len(rest) == 0 || rest[0] != '=' {
				return "", pt, fmt.Sprintf("missing tag value for %q", key)
			}
			name = p.internAt(pos, key)
		}
		pos++
		var val []byte
		val, rest, _ = p.scan(rest[1:], stopTagValue)
		if len(val) == 0 {
			return "", pt, fmt.Sprintf("missing tag value for %q", name)
		}
		p.vals = append(p.vals, val...)
		p.ends = append(p.ends, len(p.vals))
		p.tags = append(p.tags, row.Tag{Name: name})
	}
	if len(p.tags) > nt { // their values are set once the request is parsed
		pt.Tags = p.tags[nt:len(p.tags):len(p.tags)]
	}
	nf := len(p.fields)
	if len(rest) == 0 || rest[0] != ' ' {
		return "", pt, "missing fields"
	}
	rest = trimSpace(rest, false)
	// Fields.
	for {
		name, after, ok := p.shaped(pos, rest, stopEquals)
		if ok {
			rest = after
		} else {
			var key []byte
			key, rest, _ = p.scan(rest, stopFieldKey)
			if len(key) == 0 {
				return "", pt, "missing field key"
			}
			if len(rest) == 0 || rest[0] != '=' {
				return "", pt, fmt.Sprintf("missing value for field %q", key)
			}
			name = p.internAt(pos, key)
		}
		pos++
		rest = rest[1:]
		var v row.Value
		var reason string
		v, rest, reason = parseValue(rest)
		if reason != "" {
			return "", pt, fmt.Sprintf("field %q: %s", name, reason)
		}
		p.fields = append(p.fields, row.Field{Name: name, Value: v})
		if len(rest) == 0 || rest[0] == ' ' {
			break
		}
		if rest[0] != ',' {
			return "", pt, fmt.Sprintf("field %q: unexpected %q after the value", name, rest[0])
		}
		rest = rest[1:]
	}
	pt.Fields = p.fields[nf:len(p.fields):len(p.fields)]
	// Timestamp.
	rest = trimSpace(rest, false)
	if len(rest) == 0 {
		pt.TS = defaultTS
		return m, pt, ""
	}
	ts, err := strconv.ParseInt(string(rest), 10, 64)
	if err != nil {
		return "", pt, fmt.Sprintf("bad timestamp %q", rest)
	}
	if precision != Nanosecond {
		if ts > math.MaxInt64/int64(precision) || ts < math.MinInt64/int64(precision)+1 {
			return "", pt, fmt.Sprintf("timestamp %d out of range at this precision", ts)
		}
		ts *= int64(precision)
	}
	if ts == row.NoTimestamp {
		return "", pt, "timestamp out of range"
	}
	pt.TS = ts
	return m, pt, ""
}

// parseValue parses one field value.
func parseValue(b []byte) (row.Value, []byte, string) {
	if len(b) == 0 {
		return row.Value{}, b, "missing value"
	}
	if b[0] == '"' {
		var s []byte
		escaped := false
		for i := 1; i < len(b); i++ {
			switch b[i] {
			case '\\':
				if i+1 < len(b) && (b[i+1] == '"' || b[i+1] == '\\') {
					escaped = true
					i++
				}
			case '"':
				raw := b[1:i]
				if escaped {
					s = make([]byte, 0, len(raw))
					for j := 0; j < len(raw); j++ {
						if raw[j] == '\\' && j+1 < len(raw) && (raw[j+1] == '"' || raw[j+1] == '\\') {
							j++
						}
						s = append(s, raw[j])
					}
				} else {
					s = raw
				}
				return row.StringValue(string(s)), b[i+1:], ""
			}
		}
		return row.Value{}, nil, "unterminated string"
	}
	if f, n, ok := decimalToken(b); ok {
		return row.FloatValue(f), b[n:], ""
	}
	end := 0
	for end < len(b) && b[end] != ',' && b[end] != ' ' {
		end++
	}
	tok, rest := b[:end], b[end:]
	if len(tok) == 0 {
		return row.Value{}, rest, "missing value"
	}
	switch string(tok) {
	case "t", "T", "true", "True", "TRUE":
		return row.BoolValue(true), rest, ""
	case "f", "F", "false", "False", "FALSE":
		return row.BoolValue(false), rest, ""
	}
	switch last := tok[len(tok)-1]; last {
	case 'i':
		n, err := strconv.ParseInt(string(tok[:len(tok)-1]), 10, 64)
		if err != nil {
			return row.Value{}, rest, fmt.Sprintf("bad integer %q", tok)
		}
		return row.IntValue(n), rest, ""
	case 'u':
		n, err := strconv.ParseUint(string(tok[:len(tok)-1]), 10, 64)
		if err != nil {
			return row.Value{}, rest, fmt.Sprintf("bad unsigned integer %q", tok)
		}
		return row.UintValue(n), rest, ""
	}
	f, err := strconv.ParseFloat(string(tok), 64)
	if err != nil || !isNumber(tok) {
		return row.Value{}, rest, fmt.Sprintf("bad value %q", tok)
	}
	return row.FloatValue(f), rest, ""
}

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// decimal parses the form most float fields take, [-]digits[.digits]
// with at most 19 digits, when its value is an integer of at most 2^53
// over a power of ten up to 10^22: one IEEE division of two exact values
// is then correctly rounded, so it gives strconv.ParseFloat's result
// bit for bit (which takes the same path, after more general scanning:
// half of its time). ok is false for anything else.
func decimal(b []byte) (float64, bool) {
	f, n, ok := decimalToken(b)
	return f, ok && n == len(b)
}

// decimalToken is decimal for a field value ended by ',' or ' ' or the
// end of b, and returns its length too: it scans the value once, where
// finding its end and then parsing it took two passes.
func decimalToken(b []byte) (f float64, n int, ok bool) {
	i := 0
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		i++
	}
	var mant uint64
	start := i
	for i < len(b) && b[i]-'0' <= 9 {
		mant = mant*10 + uint64(b[i]-'0')
		i++
	}
	digits, scale := i-start, 0
	if i < len(b) && b[i] == '.' {
		i++
		fstart := i
		for i < len(b) && b[i]-'0' <= 9 {
			mant = mant*10 + uint64(b[i]-'0')
			i++
		}
		scale = i - fstart
		digits += scale
	}
	if i < len(b) && b[i] != ',' && b[i] != ' ' || digits == 0 || digits > 19 || mant > 1<<53 || scale >= len(pow10) {
		return 0, 0, false
	}
	f = float64(mant) / pow10[scale]
	if neg {
		f = -f
	}
	return f, i, true
}

// isNumber rejects the forms strconv accepts but line protocol does not
// (inf, nan, hex, underscores).
func isNumber(b []byte) bool {
	for _, c := range b {
		if (c < '0' || c > '9') && strings.IndexByte(".-+eE", c) < 0 {
			return false
		}
	}
	return true
}
