package sst

import (
	"math"
	"unsafe"

	"github.com/parquet-go/parquet-go"
)

// Building a parquet.Value for an optional column takes two calls:
// DoubleValue and Level, which is not inlined (it range-checks the levels).
// Compaction and flushes build one per field value, tens of millions per
// file, so a column's non-null values are instead stamped from a template
// value of that column: only the 64-bit payload differs between them.
//
// rawValue mirrors parquet.Value's layout (parquet-go v0.32: a pointer,
// the 64-bit payload, then kind, levels and column index). The mirror is
// checked once, at start-up, against values built through the API; if
// the layout ever differs, stamping is off and every value is built
// through the API.
type rawValue struct {
	ptr  *byte
	u64  uint64
	kind int8
	def  byte
	rep  byte
	col  uint16
}

var stampOK = checkStamp()

func checkStamp() bool {
	if unsafe.Sizeof(rawValue{}) != unsafe.Sizeof(parquet.Value{}) {
		return false
	}
	for _, c := range []struct {
		col int
		f   float64
		i   int64
	}{{0, 1.5, -7}, {3, math.Inf(-1), math.MaxInt64}, {200, -0.0001, math.MinInt64}} {
		d := parquet.DoubleValue(c.f).Level(0, 1, c.col)
		if stamp(parquet.DoubleValue(0).Level(0, 1, c.col), math.Float64bits(c.f)) != d || d.Double() != c.f {
			return false
		}
		i := parquet.Int64Value(c.i).Level(0, 1, c.col)
		if stamp(parquet.Int64Value(0).Level(0, 1, c.col), uint64(c.i)) != i || i.Int64() != c.i {
			return false
		}
	}
	return true
}

// stamp returns tmpl with its payload replaced by bits.
func stamp(tmpl parquet.Value, bits uint64) parquet.Value {
	var v parquet.Value
	stampInto(&v, tmpl, bits)
	return v
}

// stampInto sets *dst to tmpl with its payload replaced by bits.
//
// NB: it copies tmpl whole, then stores the payload alone. Copying through
// a rawValue instead (load, modify, store) compiles to overlapping 16-byte
// moves through the stack that defeat store-to-load forwarding: that cost
// 12 ns a value, a tenth of a compaction's CPU.
func stampInto(dst *parquet.Value, tmpl parquet.Value, bits uint64) {
	*dst = tmpl
	(*rawValue)(unsafe.Pointer(dst)).u64 = bits
}
