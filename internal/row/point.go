package row

import "math"

// NoTimestamp marks a point without a timestamp; such points are rejected.
const NoTimestamp = math.MinInt64

// Point is one row to write.
type Point struct {
	Tags   []Tag
	TS     int64 // ns since the epoch
	Fields []Field
	// Shape, if not zero, says that points of a batch with the same Shape
	// have the same tag names and the same field names and kinds, in the
	// same order (a parser knows it from comparing names it reads anyway);
	// checks of a point's columns then compare one number. Zero: unknown.
	Shape uint32
	// Series, if not nil, is the series key of Tags (EncodeSeries), as a
	// parser that has seen the tag set before knows it: writers use it
	// rather than encode the key again. Shared: never to be changed.
	Series []byte
}

// Field is one named field value of a Point.
type Field struct {
	Name  string
	Value Value
}

// SameShape reports whether p has exactly prev's tag names and field
// names and kinds, in the same order (false if prev is nil): then p's
// columns need no checks of their own, and a forwarded batch sends them
// once (batches from one source usually repeat one shape).
func SameShape(p, prev *Point) bool {
	if prev == nil || len(p.Tags) != len(prev.Tags) || len(p.Fields) != len(prev.Fields) {
		return false
	}
	if p.Shape != 0 && p.Shape == prev.Shape {
		return true
	}
	for i := range p.Tags {
		if p.Tags[i].Name != prev.Tags[i].Name {
			return false
		}
	}
	for i := range p.Fields {
		if p.Fields[i].Name != prev.Fields[i].Name || p.Fields[i].Value.Kind() != prev.Fields[i].Value.Kind() {
			return false
		}
	}
	return true
}
