package page

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/parquet-go/bitpack"
)

// DeltaCursor decodes a DELTA_BINARY_PACKED page (Parquet's encoding of
// timestamps and of decimal mantissas) from any value on. A value is the
// first value plus the deltas before it, so reading the end of a page
// still walks its start; but a miniblock wholly before the values asked
// for is only summed, not written out, and one of bit width 0 (a series
// sampled at a steady interval) costs nothing at all. parquet-go decodes
// every page whole: a narrow query used a few hundred of the page's 8,192
// values.
//
// The cursor moves forward a miniblock at a time and keeps the values of
// the last one it wrote out, so consecutive ranges (the runs of a page's
// series, in order) decode the page once.
type DeltaCursor struct {
	data             []byte // the page's values section
	perMini, minis   int    // values per miniblock, miniblocks per block
	total            int    // values in the page
	first            int64
	src              []byte // the next block header or miniblock
	pos              int    // index of the next value to decode
	last             int64  // the value at pos-1
	minDelta         int64  // the current block's
	widths           []byte // the current block's miniblock bit widths
	mini             int    // the current block's next miniblock (minis: none left)
	held             []int64
	heldFrom, heldTo int // held holds values [heldFrom, heldTo)
	deltas           []int64
}

// maxPerMini bounds a miniblock's values (the writers' are 32 or 64), so
// a corrupt header cannot ask for a huge buffer.
const maxPerMini = 1 << 12

// Reset starts the cursor on a page's values section, which must have
// bitpack.PaddingInt64 bytes of capacity past its end, and checks that
// its header says it holds n values.
func (c *DeltaCursor) Reset(data []byte, n int) error {
	c.data = data
	var vals [3]uint64
	src := data
	for i := range vals {
		v, k := binary.Uvarint(src)
		if k <= 0 {
			return fmt.Errorf("%w: delta header: bad varint", ErrCorrupt)
		}
		vals[i], src = v, src[k:]
	}
	first, k := binary.Varint(src)
	if k <= 0 {
		return fmt.Errorf("%w: delta header: bad first value", ErrCorrupt)
	}
	block, minis, total := vals[0], vals[1], vals[2]
	if block == 0 || minis == 0 || block%minis != 0 || block/minis%8 != 0 || block/minis > maxPerMini || total != uint64(n) {
		return fmt.Errorf("%w: delta header: block %d, %d miniblocks, %d values for %d", ErrCorrupt, block, minis, total, n)
	}
	c.perMini, c.minis, c.total, c.first = int(block/minis), int(minis), int(total), first
	c.src, c.pos, c.mini, c.heldFrom, c.heldTo = src[k:], 0, c.minis, 0, 0
	if cap(c.held) < c.perMini {
		c.held, c.deltas = make([]int64, c.perMini), make([]int64, c.perMini)
	}
	return nil
}

// AppendRange appends values [a, b) of the page to dst, as uint64 bits.
func (c *DeltaCursor) AppendRange(dst []uint64, a, b int) ([]uint64, error) {
	if a < 0 || b > c.total || a > b {
		return dst, fmt.Errorf("sst: delta range [%d, %d) of %d values", a, b, c.total)
	}
	dst = slices.Grow(dst, b-a)
	if a < c.heldTo && a >= c.heldFrom {
		to := min(b, c.heldTo)
		dst = appendInts(dst, c.held[a-c.heldFrom:to-c.heldFrom])
		a = to
	}
	if a == b {
		return dst, nil
	}
	if a < c.pos { // behind the cursor: from the page's start again
		if err := c.Reset(c.data, c.total); err != nil {
			return dst, err
		}
	}
	for c.pos < b {
		if c.pos == 0 {
			c.last, c.pos = c.first, 1
			c.held[0], c.heldFrom, c.heldTo = c.first, 0, 1
			if a == 0 {
				dst = append(dst, uint64(c.first))
			}
			continue
		}
		if c.mini == c.minis {
			if err := c.nextBlock(); err != nil {
				return dst, err
			}
		}
		w := uint(c.widths[c.mini])
		n := min(c.perMini, c.total-c.pos)
		if w > 64 {
			return dst, fmt.Errorf("%w: delta miniblock of bit width %d", ErrCorrupt, w)
		}
		// A miniblock takes perMini values' bits, padded; the last one of
		// a page may be cut at its last value's byte.
		size := min(c.perMini*int(w)/8, len(c.src))
		if size < (n*int(w)+7)/8 {
			return dst, fmt.Errorf("%w: delta miniblock truncated at value %d", ErrCorrupt, c.pos)
		}
		body := c.src[:size]
		c.src, c.mini = c.src[size:], c.mini+1
		deltas := c.deltas[:n]
		if w != 0 {
			if cap(body)-len(body) < bitpack.PaddingInt64 {
				return dst, fmt.Errorf("sst: delta page without padding")
			}
			bitpack.Unpack(deltas, body, w)
		}
		if c.pos+n <= a { // only the sum is needed
			s := c.minDelta * int64(n)
			if w != 0 {
				for _, d := range deltas {
					s += d
				}
			}
			c.last += s
			c.pos += n
			continue
		}
		held, v := c.held[:n], c.last
		if w == 0 {
			for i := range held {
				v += c.minDelta
				held[i] = v
			}
		} else {
			for i, d := range deltas {
				v += c.minDelta + d
				held[i] = v
			}
		}
		c.heldFrom, c.heldTo = c.pos, c.pos+n
		c.last, c.pos = v, c.pos+n
		dst = appendInts(dst, held[max(a, c.heldFrom)-c.heldFrom:min(b, c.heldTo)-c.heldFrom])
	}
	return dst, nil
}

// nextBlock reads the next block's header: its least delta and its
// miniblocks' bit widths.
func (c *DeltaCursor) nextBlock() error {
	md, k := binary.Varint(c.src)
	if k <= 0 || len(c.src)-k < c.minis {
		return fmt.Errorf("%w: delta block header truncated at value %d", ErrCorrupt, c.pos)
	}
	c.minDelta, c.widths, c.src, c.mini = md, c.src[k:k+c.minis], c.src[k+c.minis:], 0
	return nil
}

func appendInts(dst []uint64, vs []int64) []uint64 {
	return append(dst, IntBits(vs)...)
}
