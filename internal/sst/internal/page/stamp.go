package page

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
// the 64-bit payload, then kind, levels and column index, which with their
// padding fill one more word). The mirror is checked once, at start-up,
// against values built through the API; if the layout ever differs,
// stamping is off and every value is built through the API.
type rawValue struct {
	ptr  *byte
	u64  uint64
	meta uint64 // kind, levels, column index
}

var stampOK = checkStamp()

// CanStamp reports whether Stampers may be used: this parquet-go's Value
// has the layout rawValue mirrors. If not, build every value through the
// API.
func CanStamp() bool { return stampOK }

func checkStamp() bool {
	if unsafe.Sizeof(rawValue{}) != unsafe.Sizeof(parquet.Value{}) {
		return false
	}
	// Stamped over a value with a pointer, too: put must clear it.
	old := parquet.ByteArrayValue([]byte("x")).Level(0, 1, 9)
	for _, c := range []struct {
		col int
		f   float64
		i   int64
	}{{0, 1.5, -7}, {3, math.Inf(-1), math.MaxInt64}, {200, -0.0001, math.MinInt64}} {
		dt, it := parquet.DoubleValue(0).Level(0, 1, c.col), parquet.Int64Value(0).Level(0, 1, c.col)
		if (*rawValue)(unsafe.Pointer(&dt)).ptr != nil || (*rawValue)(unsafe.Pointer(&it)).ptr != nil {
			return false
		}
		d, got := parquet.DoubleValue(c.f).Level(0, 1, c.col), old
		StamperOf(dt).Put(&got, math.Float64bits(c.f))
		if got != d || got.Double() != c.f || got.Column() != c.col || got.DefinitionLevel() != 1 {
			return false
		}
		i := parquet.Int64Value(c.i).Level(0, 1, c.col)
		got = old
		StamperOf(it).Put(&got, uint64(c.i))
		if got != i || got.Int64() != c.i || got.Column() != c.col {
			return false
		}
	}
	return true
}

// Stamper stamps non-null values of one column: it holds the column's
// template value's last word (kind, levels, column index).
type Stamper uint64

// StamperOf is the Stamper of tmpl's column, tmpl a float or int value
// (whose pointer is nil).
func StamperOf(tmpl parquet.Value) Stamper {
	return Stamper((*rawValue)(unsafe.Pointer(&tmpl)).meta)
}

// Put sets *dst to the column's value with payload bits.
//
// NB: three word stores. Copying a template parquet.Value instead compiles
// to overlapping 16-byte moves through the stack, whose reloads defeat
// store-to-load forwarding: that cost 8-12 ns a value, a tenth of a
// compaction's CPU.
func (s Stamper) Put(dst *parquet.Value, bits uint64) {
	r := (*rawValue)(unsafe.Pointer(dst))
	r.ptr = nil
	r.u64 = bits
	r.meta = uint64(s)
}
