package wal

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/stratadb/strata/internal/addrmemo"
	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/row"
)

// Compact entries: how an append's entries are encoded before S2 in a
// stream block of codecS2Kinds (docs/format/wal.md, "Compact entries").
// An entry is as appendEntry writes it, but for two fields, each relative
// to the entries before it in the same chunk (so a chunk decodes alone),
// floats, and the values' kinds:
//
//   - the series is uvarint r: 0 and then the key (uvarint length, bytes)
//     for a series the chunk has not had (or one the encoder did not find
//     by address: written out again), or r >= 1 for the series of the
//     entry r places back;
//   - the timestamp is the zigzag varint difference from the entry
//     before's (from 0 for the chunk's first);
//   - a float that is a short decimal (m / 10^s, decimal.Mantissa) is kind
//     kindDecimal+s and then m as a zigzag varint: 4 bytes for a
//     percentage with four decimals, not 9;
//   - a put's value count n is uvarint n<<1 | same, and same (1) says its
//     values' kinds (decimal scales included) are the last put's in the
//     chunk: they are not written again, only the payloads. A source's
//     rows mostly have the kinds of the row before, and a kind byte a
//     value was a fifth of a TSBS row's stored bytes (S2 finds no match
//     in a byte between random mantissas).
//
// Blocks of codecS2Compact, which an earlier version wrote, hold the same
// but for the last: every value has its kind (decodeCompactChunk reads
// both).
//
// Each field's scale is carried from one entry to the next in the chunk,
// so a value mostly costs one check; a field whose value is no decimal at
// any scale from its last up is written as a float for the rest of the
// chunk.
//
// A write of 10,000 TSBS rows over 4,000 series has each series two or
// three times, a few distinct timestamps and values with four decimals:
// its raw bytes went from 260 to 109 a row and its stored bytes from 93 to
// 52, and the encoding and S2 (a sixth of a write's CPU) from 6.1 to 2.0 ms.
// Carried kinds took `strata bench ingest`'s requests (two decimals) from
// 44.0 to 35.3 stored bytes a row (docs/format/wal.md).

// kindDecimal+s is the kind of a float written as its mantissa at scale s
// (row kinds are below it).
const kindDecimal = 0x20

// compactState is a chunk's encoding state: the entry that last wrote
// each series' key out, the last entry's ts, and each field's decimal
// scale (by its place in an entry's values; decimal.None once a value was
// no decimal).
type compactState struct {
	// first finds an entry's series key by its address and length
	// (internal/addrmemo), noted with the entry that wrote it out: a
	// write's entries share one string a series (a copy the batch keeps,
	// memtable.ShareKeys), and that costs less than hashing the key. Two
	// strings of one series, or a key whose slot another took, merely
	// write it out again.
	first  addrmemo.Memo
	n      int
	ts     int64
	scales []int8
	// The kinds of the last put (put: there was one), and the put being
	// written's kinds and decimal mantissas.
	kinds []byte
	put   bool
	cur   []byte
	ms    []int64
}

var compactStates = freelist.New[*compactState](16)

// getCompactState returns the state of a new chunk.
func getCompactState() *compactState {
	st, ok := compactStates.Get()
	if !ok {
		st = new(compactState)
	}
	st.first.Begin()
	return st
}

func putCompactState(st *compactState) {
	st.n, st.ts, st.scales, st.kinds, st.put = 0, 0, st.scales[:0], st.kinds[:0], false
	compactStates.Put(st)
}

// appendCompact appends e, the chunk's next entry, in compact form.
func appendCompact(dst []byte, e *row.Entry, st *compactState) []byte {
	dst = appendCompactHead(dst, e, st)
	if e.Op == row.Delete {
		return binary.AppendVarint(dst, e.End)
	}
	for len(st.scales) < len(e.Fields) {
		st.scales = append(st.scales, 0)
		st.ms = append(st.ms, 0)
	}
	kinds := st.cur[:0]
	for j, v := range e.Fields {
		k := byte(v.Kind())
		if v.Kind() == row.Float && st.scales[j] != decimal.None {
			if m, ok := st.mantissa(j, v.Float()); ok {
				k, st.ms[j] = byte(kindDecimal+st.scales[j]), m
			}
		}
		kinds = append(kinds, k)
	}
	st.cur = kinds
	same := st.put && string(kinds) == string(st.kinds)
	n := uint64(len(e.Fields)) << 1
	if same {
		n |= 1
	}
	dst = binary.AppendUvarint(dst, n)
	for j, v := range e.Fields {
		k := kinds[j]
		if !same {
			dst = append(dst, k)
		}
		if k >= kindDecimal {
			dst = binary.AppendVarint(dst, st.ms[j])
		} else {
			dst = appendPayload(dst, v)
		}
	}
	if !same {
		st.kinds, st.put = append(st.kinds[:0], kinds...), true
	}
	return dst
}

// appendCompactHead appends what both compact codecs write first: the
// op, the series (a reference to the chunk's entry that wrote it out, or
// the key) and the ts's difference from the entry before's.
func appendCompactHead(dst []byte, e *row.Entry, st *compactState) []byte {
	dst = append(dst, byte(e.Op))
	addr := unsafe.StringData(e.Series)
	if slot, at, ok := st.first.Find(addr, len(e.Series)); ok {
		dst = binary.AppendUvarint(dst, uint64(st.n-int(at)))
	} else {
		dst = append(dst, 0)
		dst = binary.AppendUvarint(dst, uint64(len(e.Series)))
		dst = append(dst, e.Series...)
		st.first.Note(slot, addr, len(e.Series), uint32(st.n))
	}
	st.n++
	dst = binary.AppendVarint(dst, e.TS-st.ts)
	st.ts = e.TS
	return dst
}

// mantissa returns v's mantissa at field j's scale, raising the scale if
// it must, or ok false (and the field's scale None) if there is none.
func (st *compactState) mantissa(j int, v float64) (int64, bool) {
	for sc := st.scales[j]; sc <= decimal.MaxScale; sc++ {
		if m, ok := decimal.Mantissa(v, sc); ok {
			st.scales[j] = sc
			return m, true
		}
	}
	st.scales[j] = decimal.None
	return 0, false
}

// decodeCompactChunk decodes the entries of one chunk's raw bytes in
// compact form into out, which it returns grown: with kinds carried from
// put to put (codecS2Kinds), or written with every value (codecS2Compact).
func decodeCompactChunk(out []row.Entry, raw []byte, carried bool) ([]row.Entry, error) {
	d := decoder{buf: raw, str: string(raw)}
	first, ts := len(out), int64(0)
	var kinds []byte // the last put's (carried)
	put := false
	for d.off < len(d.buf) {
		var e row.Entry
		op, err := d.byte()
		if err != nil {
			return out, err
		}
		e.Op = row.Op(op)
		r, err := d.uvarint()
		if err != nil {
			return out, err
		}
		switch n := uint64(len(out) - first); {
		case r == 0:
			if e.Series, err = d.string(); err != nil {
				return out, err
			}
		case r <= n:
			e.Series = out[len(out)-int(r)].Series
		default:
			return out, fmt.Errorf("series of the entry %d back, in a chunk of %d so far", r, n)
		}
		delta, err := d.varint()
		if err != nil {
			return out, err
		}
		ts += delta
		e.TS = ts
		if carried && e.Op == row.Put {
			if kinds, err = d.carriedValues(&e, kinds, put); err != nil {
				return out, err
			}
			put = true
		} else if err := d.rest(&e, op, true); err != nil {
			return out, err
		}
		out = append(out, e)
	}
	return out, nil
}

// carriedValues decodes a put's values in a chunk of carried kinds, given
// the last put's kinds (put: there was one), and returns this put's.
func (d *decoder) carriedValues(e *row.Entry, kinds []byte, put bool) ([]byte, error) {
	h, err := d.uvarint()
	if err != nil {
		return kinds, err
	}
	n, same := h>>1, h&1 == 1
	if !same && n > uint64(len(d.buf)-d.off) { // a kind byte a value at least
		return kinds, errShort
	}
	if same && (!put || uint64(len(kinds)) != n) { // as many as the last put's
		return kinds, fmt.Errorf("%d values of the kinds of the put before, which had %d", n, len(kinds))
	}
	if !same {
		kinds = kinds[:0]
	}
	e.Fields = make([]row.Value, n)
	for i := range e.Fields {
		var k byte
		if same {
			k = kinds[i]
		} else {
			if k, err = d.byte(); err != nil {
				return kinds, err
			}
			kinds = append(kinds, k)
		}
		if e.Fields[i], err = d.value(k, true); err != nil {
			return kinds, err
		}
	}
	return kinds, nil
}
