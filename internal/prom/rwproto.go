package prom

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The protobuf wire format as gogo/protobuf's generated code reads it
// (prompb's Unmarshal methods), for the hand-written remote-write
// decoders: they accept exactly the bytes prompb.WriteRequest.Unmarshal
// and writev2.Request.Unmarshal accept (FuzzDecodeV1 and FuzzDecodeV2
// hold them to that), quirks included:
//   - a varint is at most 10 bytes; bits past the 64th are dropped;
//   - a field's number is int32(key>>3), so a key past 2^35 wraps onto a
//     small number, and a number ≤ 0 is an error;
//   - an unknown field is skipped by its wire type, a group (wire types 3
//     and 4) with whatever it nests, the end group's number unchecked;
//   - a known field with another wire type is an error, except that a
//     repeated scalar is read packed (wire type 2) or one at a time;
//   - a packed run of fixed64s or varints is read up to its end and may
//     end inside the bytes that follow it (gogo checks each element
//     against the end of the enclosing message, not of the run): reading
//     goes on from where the last element ended;
//   - strings are bytes: UTF-8 is not checked.
// The messages the decoders do not read (exemplars, native histograms,
// metadata) are checked against their fields' wire types (fieldSpec), as
// their Unmarshal would, so a request prompb refuses is refused whole.

// Errors of the wire format (wrapped into errBadWrite by the decoder).
var (
	errPBTruncated = errors.New("unexpected end of message")
	errPBOverflow  = errors.New("varint longer than 10 bytes")
	errPBEndGroup  = errors.New("end group without a start group")
)

// pbUvarint reads the varint at b[i:] and returns it and the index past it.
func pbUvarint(b []byte, i int) (uint64, int, error) {
	if i < len(b) && b[i] < 0x80 {
		return uint64(b[i]), i + 1, nil
	}
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if i >= len(b) {
			return 0, i, errPBTruncated
		}
		c := b[i]
		i++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, i, nil
		}
	}
	return 0, i, errPBOverflow
}

// pbKey reads the key of the field at b[i:]: its number, its wire type and
// the index of its payload. An end group and a number ≤ 0 are errors (a
// group's end is consumed by pbSkip).
func pbKey(b []byte, i int) (num int32, wt int, next int, err error) {
	if i < len(b) && b[i] < 0x80 && b[i]&7 != 4 && b[i]>>3 != 0 {
		return int32(b[i] >> 3), int(b[i] & 7), i + 1, nil
	}
	return pbKeySlow(b, i)
}

func pbKeySlow(b []byte, i int) (num int32, wt int, next int, err error) {
	key, next, err := pbUvarint(b, i)
	if err != nil {
		return 0, 0, next, err
	}
	num, wt = int32(key>>3), int(key&7)
	switch {
	case wt == 4:
		return 0, 0, next, fmt.Errorf("end group at byte %d outside a group", i)
	case num <= 0:
		return 0, 0, next, fmt.Errorf("illegal field number %d at byte %d", num, i)
	}
	return num, wt, next, nil
}

// pbBytes reads the length of the length-delimited payload at b[i:] and
// returns its bounds.
func pbBytes(b []byte, i int) (start, end int, err error) {
	if i < len(b) && b[i] < 0x80 && int(b[i]) < len(b)-i {
		return i + 1, i + 1 + int(b[i]), nil
	}
	n, i, err := pbUvarint(b, i)
	if err != nil {
		return 0, 0, err
	}
	if n > uint64(len(b)-i) {
		return 0, 0, errPBTruncated
	}
	return i, i + int(n), nil
}

// pbFixed64 reads the little-endian 8 bytes at b[i:].
func pbFixed64(b []byte, i int) (uint64, int, error) {
	if len(b)-i < 8 {
		return 0, i, errPBTruncated
	}
	return binary.LittleEndian.Uint64(b[i:]), i + 8, nil
}

// pbSkip skips the payload at b[i:] of a field of wire type wt (a start
// group: up to its end group) and returns the index past it.
func pbSkip(b []byte, i, wt int) (int, error) {
	depth := 0
	for {
		var err error
		switch wt {
		case 0:
			_, i, err = pbUvarint(b, i)
		case 1:
			_, i, err = pbFixed64(b, i)
		case 2:
			_, i, err = pbBytes(b, i)
		case 3:
			depth++
		case 4:
			if depth == 0 {
				return i, errPBEndGroup
			}
			depth--
		case 5:
			if len(b)-i < 4 {
				return i, errPBTruncated
			}
			i += 4
		default:
			return i, fmt.Errorf("illegal wire type %d", wt)
		}
		if err != nil || depth == 0 {
			return i, err
		}
		if i >= len(b) {
			return i, errPBTruncated // a group without its end
		}
		var key uint64
		if key, i, err = pbUvarint(b, i); err != nil {
			return i, err
		}
		wt = int(key & 7)
	}
}

// fieldKind is how a field of a message the decoder checks but does not
// read is read.
type fieldKind uint8

const (
	unknownField  fieldKind = iota // skipped by its wire type
	varintField                    // wire type 0
	fixed64Field                   // wire type 1
	bytesField                     // wire type 2: string or bytes
	messageField                   // wire type 2, a message of fieldSpec.msg's fields
	varintsField                   // repeated varint: wire type 0, or 2 packed
	fixed64sField                  // repeated fixed64: wire type 1, or 2 packed
)

// fieldSpec is one field of a message the decoder checks, by number.
type fieldSpec struct {
	kind fieldKind
	msg  []fieldSpec
}

// The messages of prometheus.WriteRequest the decoder checks and skips
// (prompb/types.proto), by field number.
var (
	pbLabel = []fieldSpec{1: {kind: bytesField}, 2: {kind: bytesField}}
	// Exemplar: labels, value, timestamp.
	pbExemplar   = []fieldSpec{1: {kind: messageField, msg: pbLabel}, 2: {kind: fixed64Field}, 3: {kind: varintField}}
	pbBucketSpan = []fieldSpec{1: {kind: varintField}, 2: {kind: varintField}}
	// Histogram: count (int, float), sum, schema, zero threshold, zero
	// count (int, float), negative spans, deltas and counts, the same
	// positive, reset hint, timestamp, custom values.
	pbHistogram = []fieldSpec{
		1: {kind: varintField}, 2: {kind: fixed64Field}, 3: {kind: fixed64Field}, 4: {kind: varintField},
		5: {kind: fixed64Field}, 6: {kind: varintField}, 7: {kind: fixed64Field},
		8: {kind: messageField, msg: pbBucketSpan}, 9: {kind: varintsField}, 10: {kind: fixed64sField},
		11: {kind: messageField, msg: pbBucketSpan}, 12: {kind: varintsField}, 13: {kind: fixed64sField},
		14: {kind: varintField}, 15: {kind: varintField}, 16: {kind: fixed64sField},
	}
	// MetricMetadata: type, metric family name, help, unit.
	pbMetricMetadata = []fieldSpec{1: {kind: varintField}, 2: {kind: bytesField}, 4: {kind: bytesField}, 5: {kind: bytesField}}
)

// The messages of io.prometheus.write.v2.Request the decoder checks and
// skips (prompb/io/prometheus/write/v2/types.proto), by field number.
var (
	// Exemplar: label references, value, timestamp.
	pbExemplarV2 = []fieldSpec{1: {kind: varintsField}, 2: {kind: fixed64Field}, 3: {kind: varintField}}
	// Histogram: 1.0's, and its start timestamp (17).
	pbHistogramV2 = append(pbHistogram[:len(pbHistogram):len(pbHistogram)], fieldSpec{kind: varintField})
	// Metadata: type, help and unit references.
	pbMetadataV2 = []fieldSpec{1: {kind: varintField}, 3: {kind: varintField}, 4: {kind: varintField}}
)

// pbCheck checks that b is a message of fields spec as its generated
// Unmarshal would.
func pbCheck(b []byte, spec []fieldSpec) error {
	for i := 0; i < len(b); {
		num, wt, j, err := pbKey(b, i)
		if err != nil {
			return err
		}
		var f fieldSpec
		if int(num) < len(spec) {
			f = spec[num]
		}
		switch f.kind {
		case unknownField:
			i, err = pbSkip(b, j, wt)
		case varintField, fixed64Field, bytesField:
			if want := wireTypes[f.kind]; wt != want {
				return fmt.Errorf("field %d has wire type %d, not %d", num, wt, want)
			}
			i, err = pbSkip(b, j, wt) // reads the one value
		case messageField:
			if wt != 2 {
				return fmt.Errorf("field %d has wire type %d, not 2", num, wt)
			}
			var start int
			if start, i, err = pbBytes(b, j); err == nil {
				err = pbCheck(b[start:i], f.msg)
			}
		case varintsField, fixed64sField:
			elem := wireTypes[f.kind]
			if wt != elem && wt != 2 {
				return fmt.Errorf("field %d has wire type %d, not %d or 2", num, wt, elem)
			}
			if wt == elem {
				i, err = pbSkip(b, j, wt)
				break
			}
			var end int
			if i, end, err = pbBytes(b, j); err != nil {
				break
			}
			for err == nil && i < end { // NB: the last element may end past end
				i, err = pbSkip(b, i, elem)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// wireTypes are the wire types of a field kind's values.
var wireTypes = [...]int{varintField: 0, fixed64Field: 1, bytesField: 2, messageField: 2, varintsField: 0, fixed64sField: 1}
