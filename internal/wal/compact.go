package wal

import (
	"encoding/binary"
	"fmt"

	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/row"
)

// Compact entries: how an append's entries are encoded before S2 in a
// stream block of codecS2Compact (docs/format/wal.md, "Compact entries").
// An entry is as appendEntry writes it, but for two fields, each relative
// to the entries before it in the same chunk:
//
//   - the series is uvarint r: 0 and then the key (uvarint length, bytes)
//     for a series the chunk has not had, or r >= 1 for the series of the
//     entry r places back;
//   - the timestamp is the zigzag varint difference from the entry
//     before's (from 0 for the chunk's first).
//
// A write of 10,000 TSBS rows over 4,000 series has each series two or
// three times and a few distinct timestamps: its raw bytes went from 260
// to about 150 a row, so S2 (a sixth of a write's CPU) has less to read.
// The floats stay 8 bytes: finding their decimal form costs about what S2
// saves on them.

// compactState is a chunk's encoding state: where each series last was.
type compactState struct {
	last map[string]int
	n    int
	ts   int64
}

var compactStates = freelist.New[*compactState](16)

func getCompactState() *compactState {
	if st, ok := compactStates.Get(); ok {
		return st
	}
	return &compactState{last: map[string]int{}}
}

func putCompactState(st *compactState) {
	if len(st.last) > 1<<16 {
		return // a rare huge chunk: do not keep its map
	}
	clear(st.last)
	st.n, st.ts = 0, 0
	compactStates.Put(st)
}

// appendCompact appends e, the chunk's next entry, in compact form.
func appendCompact(dst []byte, e *row.Entry, st *compactState) []byte {
	dst = append(dst, byte(e.Op))
	if at, ok := st.last[e.Series]; ok {
		dst = binary.AppendUvarint(dst, uint64(st.n-at))
	} else {
		dst = append(dst, 0)
		dst = binary.AppendUvarint(dst, uint64(len(e.Series)))
		dst = append(dst, e.Series...)
	}
	st.last[e.Series] = st.n
	st.n++
	dst = binary.AppendVarint(dst, e.TS-st.ts)
	st.ts = e.TS
	if e.Op == row.Delete {
		return binary.AppendVarint(dst, e.End)
	}
	return appendFields(dst, e.Fields)
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
		if err := d.rest(&e, op); err != nil {
			return out, err
		}
		out = append(out, e)
	}
	return out, nil
}
