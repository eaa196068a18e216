// Package row is Strata's in-memory data model: typed field values, the
// series key that orders rows, and the sorted entry streams that the
// memtable, SSTs and merges exchange.
//
// Entries of a stream are ordered by (series key, timestamp, sequence
// descending). A delete entry (a range tombstone) sorts at its start time.
package row

import (
	"fmt"
	"math"
	"strconv"
)

// Kind is a field value's type. The zero Kind is null.
type Kind uint8

const (
	Null Kind = iota
	Float
	Int
	Uint
	String
	Bool
)

var kindNames = [...]string{Null: "null", Float: "float64", Int: "int64", Uint: "uint64", String: "string", Bool: "bool"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseKind maps a schema type name ("float64", "int64", ...) to its Kind.
func ParseKind(s string) (Kind, bool) {
	for k, n := range kindNames {
		if n == s && k != int(Null) {
			return Kind(k), true
		}
	}
	return Null, false
}

// Value is one field value. The zero Value is null.
type Value struct {
	kind Kind
	bits uint64
	str  string
}

func FloatValue(f float64) Value { return Value{kind: Float, bits: math.Float64bits(f)} }
func IntValue(i int64) Value     { return Value{kind: Int, bits: uint64(i)} }
func UintValue(u uint64) Value   { return Value{kind: Uint, bits: u} }

// NumberValue is the value of kind k (Float, Int or Uint) whose payload
// (Bits) is bits.
func NumberValue(k Kind, bits uint64) Value { return Value{kind: k, bits: bits} }

func StringValue(s string) Value { return Value{kind: String, str: s} }
func BoolValue(b bool) Value {
	v := Value{kind: Bool}
	if b {
		v.bits = 1
	}
	return v
}

func (v Value) Kind() Kind     { return v.kind }
func (v Value) IsNull() bool   { return v.kind == Null }
func (v Value) Float() float64 { return math.Float64frombits(v.bits) }
func (v Value) Int() int64     { return int64(v.bits) }
func (v Value) Uint() uint64   { return v.bits }
func (v Value) Str() string    { return v.str }
func (v Value) Bool() bool     { return v.bits != 0 }
func (v Value) Bits() uint64   { return v.bits }

// Equal reports whether two values have the same kind and value. Floats
// compare by bits, so NaN equals NaN.
func (v Value) Equal(o Value) bool { return v.kind == o.kind && v.bits == o.bits && v.str == o.str }

// Size is the value's approximate memory footprint in bytes.
func (v Value) Size() int { return 32 + len(v.str) }

func (v Value) String() string {
	switch v.kind {
	case Float:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case Int:
		return strconv.FormatInt(v.Int(), 10)
	case Uint:
		return strconv.FormatUint(v.bits, 10)
	case String:
		return strconv.Quote(v.str)
	case Bool:
		return strconv.FormatBool(v.Bool())
	default:
		return "null"
	}
}

// Op is what an entry does.
type Op uint8

const (
	// Put writes a row at (Series, TS).
	Put Op = iota
	// Delete is a range tombstone: it hides every row of Series with
	// TS <= ts <= End and a lower sequence.
	Delete
)

// Entry is one row version or tombstone.
type Entry struct {
	Series string // encoded series key (see EncodeSeries)
	TS     int64  // timestamp in ns; for a Delete, the first deleted ts
	End    int64  // Delete only: the last deleted ts (inclusive)
	Seq    uint64
	Op     Op
	// Fields holds values by position; what a position means is up to the
	// stream (the region schema's field ordinals, or a scan's projection).
	// It may be shorter than the schema: missing positions are null.
	Fields []Value
}

// Field returns the value at position i, null past the end.
func (e *Entry) Field(i int) Value {
	if i < len(e.Fields) {
		return e.Fields[i]
	}
	return Value{}
}

// Size is the entry's approximate memory footprint, series key excluded.
func (e *Entry) Size() int {
	n := 48 + 24
	for _, v := range e.Fields {
		n += v.Size()
	}
	return n
}

// Less orders entries by (series, ts, seq descending).
func Less(a, b *Entry) bool {
	if a.Series != b.Series {
		return a.Series < b.Series
	}
	if a.TS != b.TS {
		return a.TS < b.TS
	}
	return a.Seq > b.Seq
}

func (e Entry) String() string {
	if e.Op == Delete {
		return fmt.Sprintf("delete{%s [%d,%d] seq=%d}", FormatSeries(e.Series), e.TS, e.End, e.Seq)
	}
	return fmt.Sprintf("put{%s ts=%d seq=%d %v}", FormatSeries(e.Series), e.TS, e.Seq, e.Fields)
}

// Iterator streams entries in order. Entry's result is valid until the next
// call to Next, but the Fields slice it holds stays valid after that: an
// iterator does not reuse the backing array of Fields it has returned
// (scans keep whole batches of entries without copying them), unless it
// documents otherwise (sst.Filter.ReuseFields, for compaction, whose
// writer copies). Err is the first error; Close releases resources.
type Iterator interface {
	Next() bool
	Entry() *Entry
	Err() error
	Close() error
}

// SliceIter iterates over a slice of entries already in stream order.
type SliceIter struct {
	Entries []Entry
	pos     int
}

func (s *SliceIter) Next() bool    { s.pos++; return s.pos <= len(s.Entries) }
func (s *SliceIter) Entry() *Entry { return &s.Entries[s.pos-1] }
func (s *SliceIter) Err() error    { return nil }
func (s *SliceIter) Close() error  { return nil }
