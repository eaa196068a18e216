package sst

import (
	"fmt"
	"math"
	"sync"

	"github.com/parquet-go/parquet-go"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/sst/internal/page"
)

// batch is a run of a row group's entries, copied from the stream: the
// entries without their fields, and the fields column by column (so an
// iterator's Fields need not outlive its next chunk; see
// Filter.ReuseFields). The merging goroutine fills batches; the workers,
// on other cores, turn them into Parquet values and encode them.
//
// A field is kept compact: a tag and, for a float, int or uint of its
// column's kind (nearly every value), its 64-bit payload, which the
// worker stamps onto its column's template value. A batch crosses cores
// once, and at 9 bytes a value instead of a parquet.Value's 24, moving
// batches between the merge and the workers costs a third of what it did
// (docs/design-decisions.md, "SST encoding: the merge copies, workers
// encode").
type batch struct {
	entries []row.Entry
	tags    [][]uint8         // tags[j][i]: how field j of entries[i] is kept
	bits    [][]uint64        // payload of a tagStamp value
	other   [][]parquet.Value // a tagOther value; allocated on first use
}

// Tags of a batch's field values.
const (
	tagNull  uint8 = iota // null (or absent)
	tagStamp              // bits[j][i] stamped onto the column's template
	tagOther              // other[j][i], built through the API
)

// batchRows is the size of a batch; a row group is sent to its worker in
// batches of it.
const batchRows = 4096

func (b *batch) add(e *row.Entry, c *batchColumns) {
	i := len(b.entries)
	ent := *e
	ent.Fields = nil
	b.entries = append(b.entries, ent)
	fs := e.Fields
	if e.Op == row.Delete {
		fs = nil
	}
	for j := range c.fields {
		if j >= len(fs) {
			b.tags[j][i] = tagNull
			continue
		}
		v := &fs[j]
		switch k := v.Kind(); {
		case k == row.Null:
			b.tags[j][i] = tagNull
		case k == c.kinds[j] && k != row.Bool && k != row.String:
			b.tags[j][i], b.bits[j][i] = tagStamp, v.Bits()
		default:
			b.addOther(j, i, fieldValue(*v, c.fields[j], c.defs[j]))
		}
	}
}

func (b *batch) addOther(j, i int, v parquet.Value) {
	if b.other[j] == nil {
		b.other[j] = make([]parquet.Value, batchRows)
	}
	b.tags[j][i], b.other[j][i] = tagOther, v
}

// values writes field j of entries[lo:lo+len(out)] as Parquet values into
// out.
func (b *batch) values(j, lo int, c *batchColumns, out []parquet.Value) error {
	tags, bits := b.tags[j][lo:lo+len(out)], b.bits[j][lo:lo+len(out)]
	st, null, required := c.stamps[j], c.nulls[j], c.defs[j] == 0
	if scale := c.scales[j]; scale >= 0 {
		return b.decimals(j, lo, c, out, scale)
	}
	for i, t := range tags {
		switch {
		case t == tagNull:
			// In a required column, null is the zero value: only
			// tombstones may have it.
			if required && b.entries[lo+i].Op != row.Delete {
				e := &b.entries[lo+i]
				return fmt.Errorf("%w: field %q of %q at %d", ErrUnexpectedNull, c.names[j], e.Series, e.TS)
			}
			out[i] = null
		case t == tagOther:
			out[i] = b.other[j][lo+i]
		case page.CanStamp():
			st.Put(&out[i], bits[i])
		case c.kinds[j] == row.Float:
			out[i] = parquet.DoubleValue(math.Float64frombits(bits[i])).Level(0, int(c.defs[j]), c.fields[j])
		default:
			out[i] = parquet.Int64Value(int64(bits[i])).Level(0, int(c.defs[j]), c.fields[j])
		}
	}
	return nil
}

// decimals is values for a float field written as decimals at scale: the
// column's values are the mantissas.
func (b *batch) decimals(j, lo int, c *batchColumns, out []parquet.Value, scale int8) error {
	tags, bits := b.tags[j][lo:lo+len(out)], b.bits[j][lo:lo+len(out)]
	st, null, def := c.stamps[j], c.nulls[j], int(c.defs[j])
	for i, t := range tags {
		switch t {
		case tagNull:
			if def == 0 && b.entries[lo+i].Op != row.Delete {
				e := &b.entries[lo+i]
				return fmt.Errorf("%w: field %q of %q at %d", ErrUnexpectedNull, c.names[j], e.Series, e.TS)
			}
			out[i] = null
		case tagStamp:
			v := math.Float64frombits(bits[i])
			m, ok := decimal.Mantissa(v, scale)
			if !ok {
				return &NotDecimalField{Field: j, what: fmt.Sprintf("field %q value %v at scale %d", c.names[j], v, scale)}
			}
			if page.CanStamp() {
				st.Put(&out[i], uint64(m))
			} else {
				out[i] = parquet.Int64Value(m).Level(0, def, c.fields[j])
			}
		default: // a value not of the field's kind
			return &NotDecimalField{Field: j, what: fmt.Sprintf("field %q has a value that is not a float", c.names[j])}
		}
	}
	return nil
}

// batchPool recycles batches between the writer and its workers.
type batchPool struct {
	mu     sync.Mutex
	free   []*batch
	fields int
}

func (p *batchPool) get() *batch {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b
	}
	b := &batch{entries: make([]row.Entry, 0, batchRows), tags: make([][]uint8, p.fields), bits: make([][]uint64, p.fields), other: make([][]parquet.Value, p.fields)}
	for j := range b.tags {
		b.tags[j] = make([]uint8, batchRows)
		b.bits[j] = make([]uint64, batchRows)
	}
	return b
}

func (p *batchPool) put(b *batch) {
	// NB: entries and other keep their series keys and strings until
	// overwritten: a few batches' worth, for one Write. Clearing 4096
	// entries at every put cost 1% of a compaction's CPU.
	b.entries = b.entries[:0]
	p.mu.Lock()
	p.free = append(p.free, b)
	p.mu.Unlock()
}

// batchColumns are the leaf column indexes a batch is written to.
type batchColumns struct {
	series, ts, seq, del int
	fields               []int
	names                []string        // of each field
	kinds                []row.Kind      // of each field
	scales               []int8          // of each field written as decimals, decimal.None for others
	defs                 []byte          // each field's definition level for a value: 0 if required
	stamps               []page.Stamper  // of each field's column
	nulls                []parquet.Value // the null of each field's column (a required column's: its zero value)
}

// newBatchColumns is the columns of fields in sch: required[j] says field
// j's column is required, scales[j] >= 0 that it holds decimals.
func newBatchColumns(sch *parquet.Schema, fields []schema.Field, required []bool, scales []int8) batchColumns {
	col := func(name string) int {
		leaf, _ := sch.Lookup(name)
		return leaf.ColumnIndex
	}
	n := len(fields)
	c := batchColumns{series: col(ColSeries), ts: col(ColTS), seq: col(ColSeq), del: col(ColDeleteEnd),
		fields: make([]int, n), names: make([]string, n), kinds: make([]row.Kind, n), scales: scales,
		defs: make([]byte, n), stamps: make([]page.Stamper, n), nulls: make([]parquet.Value, n)}
	for i, f := range fields {
		c.fields[i], c.names[i], c.kinds[i] = col(f.Name), f.Name, f.Kind
		if !required[i] {
			c.defs[i] = 1
		}
		stored := f.Kind // as the column holds it
		if scales[i] >= 0 {
			stored = row.Int
		}
		c.nulls[i] = fieldValue(row.Value{}, c.fields[i], c.defs[i])
		if required[i] {
			c.nulls[i] = fieldValue(zeroOf(stored), c.fields[i], 0)
		}
		tmpl := fieldValue(row.FloatValue(0), c.fields[i], c.defs[i])
		if stored == row.Int || stored == row.Uint {
			tmpl = fieldValue(row.IntValue(0), c.fields[i], c.defs[i])
		}
		c.stamps[i] = page.StamperOf(tmpl)
	}
	return c
}

// writeChunk is how many rows of a column are written at once: a page
// overshoots its target size by at most that many values. A variable so
// that tests can cut pages at row counts the reader's chunks do not share.
var writeChunk = 1024

// write appends b to rg column by column, writeChunk rows at a time,
// through buf (of writeChunk values).
//
// NB: values of required columns (series, ts, seq) carry no levels: a
// required column buffer reads only the value. Optional columns need the
// definition level, which Level sets.
func (c batchColumns) write(rg *parquet.ConcurrentRowGroupWriter, b *batch, buf []parquet.Value) error {
	chunk := len(buf)
	cws := rg.ColumnWriters()
	put := func(col int, n int) error {
		_, err := cws[col].WriteRowValues(buf[:n])
		return err
	}
	for lo := 0; lo < len(b.entries); lo += chunk {
		es := b.entries[lo:min(lo+chunk, len(b.entries))]
		n := len(es)
		for i := range es {
			buf[i] = page.ByteArrayValue(es[i].Series)
		}
		if err := put(c.series, n); err != nil {
			return err
		}
		for i := range es {
			buf[i] = parquet.Int64Value(es[i].TS)
		}
		if err := put(c.ts, n); err != nil {
			return err
		}
		for i := range es {
			buf[i] = parquet.Int64Value(int64(es[i].Seq))
		}
		if err := put(c.seq, n); err != nil {
			return err
		}
		null := parquet.Value{}.Level(0, 0, c.del)
		for i := range es {
			if es[i].Op == row.Delete {
				buf[i] = parquet.Int64Value(es[i].End).Level(0, 1, c.del)
			} else {
				buf[i] = null
			}
		}
		if err := put(c.del, n); err != nil {
			return err
		}
		for j, col := range c.fields {
			if err := b.values(j, lo, &c, buf[:n]); err != nil {
				return err
			}
			if err := put(col, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// fieldValue is v as a value of column col, whose values have definition
// level def (0 in a required column).
func fieldValue(v row.Value, col int, def byte) parquet.Value {
	var pv parquet.Value
	switch v.Kind() {
	case row.Null:
		return pv.Level(0, 0, col)
	case row.Float:
		pv = parquet.DoubleValue(v.Float())
	case row.Int:
		pv = parquet.Int64Value(v.Int())
	case row.Uint:
		pv = parquet.Int64Value(int64(v.Uint()))
	case row.Bool:
		pv = parquet.BooleanValue(v.Bool())
	case row.String:
		pv = parquet.ByteArrayValue([]byte(v.Str()))
	}
	return pv.Level(0, int(def), col)
}

// zeroOf is the zero value of kind k: what a tombstone holds in a required
// column.
func zeroOf(k row.Kind) row.Value {
	switch k {
	case row.Float:
		return row.FloatValue(0)
	case row.Int:
		return row.IntValue(0)
	case row.Uint:
		return row.UintValue(0)
	case row.Bool:
		return row.BoolValue(false)
	}
	return row.StringValue("")
}
