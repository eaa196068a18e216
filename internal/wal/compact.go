package wal

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/stratadb/strata/internal/decimal"

	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/row"
)

// Compact entries: how an append's entries are encoded before S2 in a
// stream block of codecS2Compact (docs/format/wal.md, "Compact entries").
// An entry is as appendEntry writes it, but for two fields, each relative
// to the entries before it in the same chunk (so a chunk decodes alone),
// and floats:
//
//   - the series is uvarint r: 0 and then the key (uvarint length, bytes)
//     for a series the chunk has not had, or r >= 1 for the series of the
//     entry r places back;
//   - the timestamp is the zigzag varint difference from the entry
//     before's (from 0 for the chunk's first);
//   - a float that is a short decimal (m / 10^s, decimal.Mantissa) is kind
//     kindDecimal+s and then m as a zigzag varint: 4 bytes for a
//     percentage with four decimals, not 9.
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

// kindDecimal+s is the kind of a float written as its mantissa at scale s
// (row kinds are below it).
const kindDecimal = 0x20

// compactState is a chunk's encoding state: where each series first was
// (a reference to the first, not the last, costs a byte or so more and a
// hash less), the last entry's ts, and each field's decimal scale (by its
// place in an entry's values; decimal.None once a value was no decimal).
type compactState struct {
	// first is keyed by the address of an entry's series key (and holds
	// its length): a write's entries share one string a series (the
	// memtable's, memtable.ShareKeys), and hashing the address is cheaper
	// than the key. Two strings of one series merely both write it out.
	first  map[*byte]firstEntry
	n      int
	ts     int64
	scales []int8
}

// firstEntry is the entry of a chunk a series key first was in, and the
// key's length.
type firstEntry struct{ at, n int }

var compactStates = freelist.New[*compactState](16)

func getCompactState() *compactState {
	if st, ok := compactStates.Get(); ok {
		return st
	}
	return &compactState{first: map[*byte]firstEntry{}}
}

func putCompactState(st *compactState) {
	if len(st.first) > 1<<16 {
		return // a rare huge chunk: do not keep its map
	}
	clear(st.first)
	st.n, st.ts, st.scales = 0, 0, st.scales[:0]
	compactStates.Put(st)
}

// appendCompact appends e, the chunk's next entry, in compact form.
func appendCompact(dst []byte, e *row.Entry, st *compactState) []byte {
	dst = append(dst, byte(e.Op))
	addr := unsafe.StringData(e.Series)
	if f, ok := st.first[addr]; ok && f.n == len(e.Series) {
		dst = binary.AppendUvarint(dst, uint64(st.n-f.at))
	} else {
		dst = append(dst, 0)
		dst = binary.AppendUvarint(dst, uint64(len(e.Series)))
		dst = append(dst, e.Series...)
		if !ok {
			st.first[addr] = firstEntry{at: st.n, n: len(e.Series)}
		}
	}
	st.n++
	dst = binary.AppendVarint(dst, e.TS-st.ts)
	st.ts = e.TS
	if e.Op == row.Delete {
		return binary.AppendVarint(dst, e.End)
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.Fields)))
	for len(st.scales) < len(e.Fields) {
		st.scales = append(st.scales, 0)
	}
	for j, v := range e.Fields {
		if v.Kind() == row.Float && st.scales[j] != decimal.None {
			if m, ok := st.mantissa(j, v.Float()); ok {
				dst = append(dst, byte(kindDecimal+st.scales[j]))
				dst = binary.AppendVarint(dst, m)
				continue
			}
		}
		dst = appendValue(dst, v)
	}
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
// compact form into out, which it returns grown.
func decodeCompactChunk(out []row.Entry, raw []byte) ([]row.Entry, error) {
	d := decoder{buf: raw, str: string(raw)}
	first, ts := len(out), int64(0)
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
		if err := d.rest(&e, op, true); err != nil {
			return out, err
		}
		out = append(out, e)
	}
	return out, nil
}
