package page

import (
	"unsafe"

	"github.com/parquet-go/parquet-go"
)

// FloatBits is fs as their IEEE 754 bits, sharing fs's memory.
func FloatBits(fs []float64) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(fs))), len(fs))
}

// IntBits is is as uint64s, sharing is's memory.
func IntBits(is []int64) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(is))), len(is))
}

// Ints is bits as int64s, sharing bits' memory.
func Ints(bits []uint64) []int64 {
	return unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(bits))), len(bits))
}

// plainInt64s is a PLAIN page's 64-bit values (little endian, as every
// platform Strata builds for is), sharing b's memory.
func plainInt64s(b []byte) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}

// ByteArrayValue is s as a BYTE_ARRAY value without a copy: the value
// points into s, which must outlive it, and parquet-go never writes to a
// value's bytes.
func ByteArrayValue(s string) parquet.Value {
	return parquet.ByteArrayValue(unsafe.Slice(unsafe.StringData(s), len(s)))
}
