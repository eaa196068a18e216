package row

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
)

// Tag is one tag of a series.
type Tag struct {
	Name, Value string
}

// EncodeSeries returns the series key of a tag set: the tags sorted by name,
// each as uvarint(len(name)) name uvarint(len(value)) value. Tags with empty
// values are left out (as in InfluxDB, an empty tag is no tag). Keys compare
// bytewise, which is the order of rows in memtables and SSTs. tags is sorted
// in place. Duplicate names are an error.
func EncodeSeries(dst []byte, tags []Tag) ([]byte, error) {
	if !slices.IsSortedFunc(tags, cmpTag) {
		slices.SortFunc(tags, cmpTag)
	}
	for i, t := range tags {
		if i > 0 && tags[i-1].Name == t.Name {
			return dst, errors.New("tag " + t.Name + " appears twice")
		}
		dst = appendTag(dst, &tags[i])
	}
	return dst, nil
}

// appendTag appends one tag of a series key (none for an empty value).
func appendTag(dst []byte, t *Tag) []byte {
	if t.Value == "" {
		return dst
	}
	dst = binary.AppendUvarint(dst, uint64(len(t.Name)))
	dst = append(dst, t.Name...)
	dst = binary.AppendUvarint(dst, uint64(len(t.Value)))
	return append(dst, t.Value...)
}

func cmpTag(a, b Tag) int { return strings.Compare(a.Name, b.Name) }

// SeriesEncoder encodes the series keys of a run of tag sets, as
// EncodeSeries does, without sorting them in place: the tag sets of a
// batch mostly repeat one list of names (one source, one shape), so it
// sorts a list of names once and reuses the order while the names repeat.
// (Sorting each point's tags was half of encoding its key.)
type SeriesEncoder struct {
	names []string // the last list of names, as given
	order []int    // indexes of names in sorted order
	dup   string   // a name names holds twice
}

// Append appends the series key of tags to dst.
func (e *SeriesEncoder) Append(dst []byte, tags []Tag) ([]byte, error) {
	if !e.same(tags) {
		e.learn(tags)
	}
	if e.dup != "" {
		return dst, errors.New("tag " + e.dup + " appears twice")
	}
	for _, i := range e.order {
		dst = appendTag(dst, &tags[i])
	}
	return dst, nil
}

func (e *SeriesEncoder) same(tags []Tag) bool {
	if len(tags) != len(e.names) || e.order == nil {
		return false
	}
	for i := range tags {
		if tags[i].Name != e.names[i] {
			return false
		}
	}
	return true
}

func (e *SeriesEncoder) learn(tags []Tag) {
	e.names, e.order, e.dup = e.names[:0], make([]int, len(tags)), ""
	for i := range tags {
		e.names = append(e.names, tags[i].Name)
		e.order[i] = i
	}
	slices.SortStableFunc(e.order, func(a, b int) int { return strings.Compare(e.names[a], e.names[b]) })
	for k := 1; k < len(e.order); k++ {
		if n := e.names[e.order[k]]; n == e.names[e.order[k-1]] {
			e.dup = n
			break
		}
	}
}

// ErrBadSeries: a series key does not decode.
var ErrBadSeries = errors.New("row: malformed series key")

// DecodeSeries returns the tags of a series key, appended to dst.
func DecodeSeries(dst []Tag, key string) ([]Tag, error) {
	for len(key) > 0 {
		var t Tag
		var ok bool
		if t.Name, key, ok = cutString(key); !ok {
			return dst, ErrBadSeries
		}
		if t.Value, key, ok = cutString(key); !ok {
			return dst, ErrBadSeries
		}
		dst = append(dst, t)
	}
	return dst, nil
}

func cutString(s string) (string, string, bool) {
	n, w := binary.Uvarint([]byte(s[:min(len(s), binary.MaxVarintLen64)]))
	if w <= 0 || uint64(len(s)-w) < n {
		return "", s, false
	}
	return s[w : w+int(n)], s[w+int(n):], true
}

// SeriesTag returns the value of tag name in a series key ("" if absent).
func SeriesTag(key, name string) string {
	for len(key) > 0 {
		n, rest, ok := cutString(key)
		if !ok {
			return ""
		}
		v, rest, ok := cutString(rest)
		if !ok {
			return ""
		}
		if n == name {
			return v
		}
		key = rest
	}
	return ""
}

// FormatSeries renders a series key as name=value,name=value.
func FormatSeries(key string) string {
	tags, err := DecodeSeries(nil, key)
	if err != nil {
		return "<malformed series>"
	}
	var b strings.Builder
	for i, t := range tags {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(t.Name)
		b.WriteByte('=')
		b.WriteString(t.Value)
	}
	return b.String()
}

// TagIn is a set filter on a series: its tag Name is one of Values (""
// for a series without the tag).
type TagIn struct {
	Name   string
	Values []string
}

// InsertSeriesTag appends to dst the series key of key's tags and t, t
// in its place by name: the key EncodeSeries gives the tags and t, made
// without decoding key. key must not hold a tag named t.Name.
func InsertSeriesTag(dst, key []byte, t Tag) ([]byte, error) {
	rest := string(key)
	for len(rest) > 0 {
		n, after, ok := cutString(rest)
		if !ok {
			return dst, ErrBadSeries
		}
		if n > t.Name {
			break
		}
		if n == t.Name {
			return dst, errors.New("tag " + t.Name + " appears twice")
		}
		if _, after, ok = cutString(after); !ok {
			return dst, ErrBadSeries
		}
		rest = after
	}
	at := len(key) - len(rest)
	dst = append(dst, key[:at]...)
	dst = appendTag(dst, &t)
	return append(dst, key[at:]...), nil
}

// RemoveSeriesTag returns key without its tag name (key itself if it has
// none, or does not decode).
func RemoveSeriesTag(key, name string) string {
	rest := key
	for len(rest) > 0 {
		n, after, ok := cutString(rest)
		if !ok {
			return key
		}
		_, next, ok := cutString(after)
		if !ok {
			return key
		}
		if n == name {
			at := len(key) - len(rest)
			return key[:at] + next
		}
		if n > name {
			return key
		}
		rest = next
	}
	return key
}
