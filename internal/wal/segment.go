// Package wal is the write-ahead log in the object store: streams
// (stream.go), each a sequence of segment objects written with
// create-if-absent at consecutive numbers, a write acknowledged only once
// its segment exists. A region writes through its datanode's stream, or
// through a stream of its own (region.Options.Stream). A new owner of a
// region replays every stream its manifest names and seals each with a
// fence segment, so a former owner's next append finds the number taken
// and stops acknowledging. Earlier versions gave each region a log of its
// own; it is still read (legacy.go). The formats are specified in
// docs/format/wal.md.
package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/walstream"
)

// ErrCorrupt: a segment does not decode or fails its checksum (a
// stream's segment or a legacy region WAL's: one error, walstream's).
var ErrCorrupt = walstream.ErrCorrupt

// An entry is encoded the same in both formats (docs/format/wal.md): a
// stream block of codecRaw holds entries as appendEntry writes them, and
// the compact codecs (compact.go) differ only in a few fields.

func appendEntry(dst []byte, e *row.Entry) []byte {
	dst = append(dst, byte(e.Op))
	dst = binary.AppendUvarint(dst, uint64(len(e.Series)))
	dst = append(dst, e.Series...)
	dst = binary.AppendVarint(dst, e.TS)
	if e.Op == row.Delete {
		return binary.AppendVarint(dst, e.End)
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.Fields)))
	for _, v := range e.Fields {
		dst = appendValue(dst, v)
	}
	return dst
}

// appendValue appends a value's kind and payload.
func appendValue(dst []byte, v row.Value) []byte {
	return appendPayload(append(dst, byte(v.Kind())), v)
}

// appendPayload appends a value's payload: what follows its kind.
func appendPayload(dst []byte, v row.Value) []byte {
	switch v.Kind() {
	case row.Float:
		dst = binary.LittleEndian.AppendUint64(dst, v.Bits())
	case row.Int:
		dst = binary.AppendVarint(dst, v.Int())
	case row.Uint:
		dst = binary.AppendUvarint(dst, v.Uint())
	case row.Bool:
		dst = append(dst, byte(v.Bits()))
	case row.String:
		dst = binary.AppendUvarint(dst, uint64(len(v.Str())))
		dst = append(dst, v.Str()...)
	}
	return dst
}

// encodedSize estimates appendEntry's output length.
func encodedSize(e *row.Entry) int {
	n := 1 + 10 + len(e.Series) + 10 + 10
	for _, v := range e.Fields {
		n += 10 + len(v.Str())
	}
	return n
}

type decoder struct {
	buf []byte
	str string // the same bytes as buf, to slice strings from without copying
	off int
}

var errShort = errors.New("truncated")

func (d *decoder) byte() (byte, error) {
	if d.off >= len(d.buf) {
		return 0, errShort
	}
	d.off++
	return d.buf[d.off-1], nil
}

func (d *decoder) uvarint() (uint64, error) {
	v, n := binary.Uvarint(d.buf[d.off:])
	if n <= 0 {
		return 0, errShort
	}
	d.off += n
	return v, nil
}

func (d *decoder) varint() (int64, error) {
	v, n := binary.Varint(d.buf[d.off:])
	if n <= 0 {
		return 0, errShort
	}
	d.off += n
	return v, nil
}

func (d *decoder) string() (string, error) {
	n, err := d.uvarint()
	if err != nil {
		return "", err
	}
	if n > uint64(len(d.buf)-d.off) {
		return "", errShort
	}
	s := d.str[d.off : d.off+int(n)]
	d.off += int(n)
	return s, nil
}

func (d *decoder) entry(e *row.Entry) error {
	op, err := d.byte()
	if err != nil {
		return err
	}
	e.Op = row.Op(op)
	if e.Series, err = d.string(); err != nil {
		return err
	}
	if e.TS, err = d.varint(); err != nil {
		return err
	}
	return d.rest(e, op, false)
}

// rest decodes what follows an entry's timestamp: a tombstone's end, or a
// put's field values (compact: floats may be decimals, compact.go).
func (d *decoder) rest(e *row.Entry, op byte, compact bool) error {
	var err error
	switch e.Op {
	case row.Delete:
		e.End, err = d.varint()
		return err
	case row.Put:
	default:
		return fmt.Errorf("unknown op %d", op)
	}
	n, err := d.uvarint()
	if err != nil {
		return err
	}
	if n > uint64(len(d.buf)-d.off) {
		return errShort
	}
	e.Fields = make([]row.Value, n)
	for i := range e.Fields {
		k, err := d.byte()
		if err != nil {
			return err
		}
		if e.Fields[i], err = d.value(k, compact); err != nil {
			return err
		}
	}
	return nil
}

// value decodes the payload of a value of kind k (compact: k may be a
// decimal's, compact.go).
func (d *decoder) value(k byte, compact bool) (row.Value, error) {
	if compact && k >= kindDecimal && k <= kindDecimal+decimal.MaxScale {
		m, err := d.varint()
		if err != nil {
			return row.Value{}, err
		}
		return row.FloatValue(decimal.Float(m, int8(k-kindDecimal))), nil
	}
	switch row.Kind(k) {
	case row.Null:
		return row.Value{}, nil
	case row.Float:
		if len(d.buf)-d.off < 8 {
			return row.Value{}, errShort
		}
		d.off += 8
		return row.FloatValue(math.Float64frombits(binary.LittleEndian.Uint64(d.buf[d.off-8:]))), nil
	case row.Int:
		v, err := d.varint()
		return row.IntValue(v), err
	case row.Uint:
		v, err := d.uvarint()
		return row.UintValue(v), err
	case row.Bool:
		b, err := d.byte()
		return row.BoolValue(b != 0), err
	case row.String:
		s, err := d.string()
		return row.StringValue(s), err
	}
	return row.Value{}, fmt.Errorf("unknown value kind %d", k)
}
