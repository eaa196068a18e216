package row

import "math"

// NoTimestamp marks a point without a timestamp; such points are rejected.
const NoTimestamp = math.MinInt64

// Point is one row to write.
type Point struct {
	Tags   []Tag
	TS     int64 // ns since the epoch
	Fields []Field
}

// Field is one named field value of a Point.
type Field struct {
	Name  string
	Value Value
}
