// Package sst writes and reads a region's immutable sorted files: Parquet
// (github.com/parquet-go/parquet-go), zstd-compressed, rows in (series, ts,
// seq desc) order, row groups of up to 100k rows with min/max statistics.
// The column layout is specified in docs/format/sst.md.
package sst

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/parquet-go/parquet-go"

	"github.com/parquet-go/parquet-go/format"
	"github.com/stratadb/strata/internal/decimal"

	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/sst/internal/page"
)

// Reserved column names.
const (
	ColSeries    = "__series"
	ColTS        = "__ts"
	ColSeq       = "__seq"
	ColDeleteEnd = "__delete_end"
)

// DefaultRowGroupRows is the row group size.
const DefaultRowGroupRows = 100_000

// The format's version: 2 is 1 with float fields written as decimals
// (WriteOptions.Decimals), which a reader of 1 would take for integers. A
// file without such a column is written as 1.
const (
	formatKey           = "strata.sst.format"
	formatValue         = "1"
	formatDecimalsValue = "2"
)

// WriteOptions configure an SST.
type WriteOptions struct {
	RowGroupRows int64 // default DefaultRowGroupRows
	// Parallel is how many row groups are encoded at once (default 1).
	// Each holds its rows in memory while it is encoded.
	Parallel int
	// Compression is the zstd level (default CompressDefault). Flushes use
	// CompressFast: their files are short-lived inputs of compaction, and
	// the faster level lets flushes keep up with ingest.
	Compression Compression
	// PageBytes is the uncompressed size a page is cut at (default
	// DefaultPageBytes).
	PageBytes int
	// NoNulls[j] promises that field j has a value in every put (what a
	// memtable or the inputs' statistics show): its column is then
	// written required, without definition levels, which is cheaper to
	// write and to read. A tombstone holds the column's zero value there,
	// which readers ignore. Write fails with ErrUnexpectedNull if a put
	// breaks the promise. Fields past its end may be null.
	NoNulls []bool
	// SeriesIndex asks for the file's series index (Meta.SeriesIndex):
	// the bytes of its companion object.
	SeriesIndex bool
	// Decimals[j] >= 0 writes float field j as decimals at that scale:
	// each value's mantissa (package decimal), in an INT64 DECIMAL column,
	// delta bit-packed and not compressed. Write fails with ErrNotDecimal
	// if a value has none at the scale. Fields past its end, and those at
	// decimal.None, are written as doubles.
	Decimals []int8
}

// ErrNotDecimal: a value of a field written as decimals has no mantissa at
// the field's scale (WriteOptions.Decimals).
var ErrNotDecimal = errors.New("sst: value not a decimal at its column's scale")

// NotDecimalField is an ErrNotDecimal, naming the field.
type NotDecimalField struct {
	Field int // ordinal
	what  string
}

func (e *NotDecimalField) Error() string { return fmt.Sprintf("%v: %s", ErrNotDecimal, e.what) }

func (e *NotDecimalField) Unwrap() error { return ErrNotDecimal }

// ErrUnexpectedNull: a put has no value for a field that WriteOptions.NoNulls
// said always has one.
var ErrUnexpectedNull = errors.New("sst: null in a field written without nulls")

// Meta describes a written SST.
type Meta struct {
	Rows       int64 // puts and tombstones
	Tombstones int64
	// MinTS and MaxTS bound every put and every tombstone range.
	MinTS, MaxTS   int64
	MinSeq, MaxSeq uint64
	Size           int64
	// Series is how many distinct series the file holds, and SeriesIndex
	// its series index (with WriteOptions.SeriesIndex).
	Series      int
	SeriesIndex []byte
}

func leafFor(k row.Kind) parquet.Node {
	switch k {
	case row.Float:
		return parquet.Leaf(parquet.DoubleType)
	case row.Int:
		return parquet.Int(64)
	case row.Uint:
		return parquet.Uint(64)
	case row.Bool:
		return parquet.Leaf(parquet.BooleanType)
	default:
		return parquet.Encoded(parquet.String(), &parquet.RLEDictionary)
	}
}

// decimalScale is the scale of an INT64 DECIMAL leaf: a float field
// written as decimals.
func decimalScale(col *parquet.Column) (int8, bool) {
	t := col.Type()
	if t.Kind() != parquet.Int64 {
		return 0, false
	}
	lt := t.LogicalType()
	if lt == nil {
		return 0, false
	}
	d, ok := lt.Value.(*format.DecimalType)
	if !ok {
		return 0, false
	}
	return int8(min(max(d.Scale, -1), 127)), true
}

// kindOf maps a Parquet leaf back to a field kind.
func kindOf(col *parquet.Column) (row.Kind, bool) {
	t := col.Type()
	switch t.Kind() {
	case parquet.Double:
		return row.Float, true
	case parquet.Boolean:
		return row.Bool, true
	case parquet.ByteArray:
		return row.String, true
	case parquet.Int64:
		if lt := t.LogicalType(); lt != nil {
			if it, ok := lt.Value.(*format.IntType); ok && !it.IsSigned {
				return row.Uint, true
			}
		}
		return row.Int, true
	}
	return row.Null, false
}

// fieldNode is the Parquet node of a field column: required if it has no
// nulls, optional otherwise. A variable so that tests can write files the
// way other writers might.
var fieldNode = func(k row.Kind, required bool) parquet.Node {
	if required {
		return leafFor(k)
	}
	return parquet.Optional(leafFor(k))
}

// decimalNode is the column of a float field written as decimals at scale:
// its mantissas delta bit-packed, not compressed (zstd finds little more
// in them, and skipping it is what makes these pages fast to read).
func decimalNode(scale int8, required bool) parquet.Node {
	n := parquet.Compressed(parquet.Encoded(parquet.Decimal(int(scale), 18, parquet.Int64Type), &parquet.DeltaBinaryPacked), &parquet.Uncompressed)
	if required {
		return n
	}
	return parquet.Optional(n)
}

// buildSchema is the schema of a file of fields; required[j] makes field
// j's column required, and scales[j] >= 0 a float field's decimal.
func buildSchema(fields []schema.Field, required []bool, scales []int8) *parquet.Schema {
	g := parquet.Group{
		ColSeries:    parquet.Encoded(parquet.Leaf(parquet.ByteArrayType), &parquet.RLEDictionary),
		ColTS:        parquet.Encoded(parquet.Timestamp(parquet.Nanosecond), &parquet.DeltaBinaryPacked),
		ColSeq:       parquet.Encoded(parquet.Uint(64), &parquet.DeltaBinaryPacked),
		ColDeleteEnd: parquet.Optional(parquet.Int(64)),
	}
	for j, f := range fields {
		if scales[j] >= 0 {
			g[f.Name] = decimalNode(scales[j], required[j])
			continue
		}
		g[f.Name] = fieldNode(f.Kind, required[j])
	}
	return parquet.NewSchema("strata", g)
}

// Write encodes the entries of it (whose Fields are by position in fields)
// as an SST into w. It returns ErrEmpty if it yields nothing.
func Write(w io.Writer, fields []schema.Field, it row.Iterator, opts WriteOptions) (Meta, error) {
	if opts.RowGroupRows <= 0 {
		opts.RowGroupRows = DefaultRowGroupRows
	}
	codec, err := codecFor(opts.Compression)
	if err != nil {
		return Meta{}, err
	}
	required := make([]bool, len(fields))
	copy(required, opts.NoNulls)
	scales := make([]int8, len(fields))
	for j, f := range fields {
		scales[j] = decimal.None
		if j < len(opts.Decimals) && f.Kind == row.Float && opts.Decimals[j] >= 0 {
			if opts.Decimals[j] > decimal.MaxScale {
				return Meta{}, fmt.Errorf("sst: field %q: decimal scale %d over %d", f.Name, opts.Decimals[j], decimal.MaxScale)
			}
			scales[j] = opts.Decimals[j]
		}
	}
	sch := buildSchema(fields, required, scales)
	version := formatValue
	if slices.ContainsFunc(scales, func(s int8) bool { return s >= 0 }) {
		version = formatDecimalsValue
	}
	col := func(name string) int {
		leaf, _ := sch.Lookup(name)
		return leaf.ColumnIndex
	}
	cSeries, cTS, cSeq, cDel := col(ColSeries), col(ColTS), col(ColSeq), col(ColDeleteEnd)
	cFields := make([]int, len(fields))
	kinds := make([]row.Kind, len(fields))
	for i, f := range fields {
		cFields[i], kinds[i] = col(f.Name), f.Kind
	}
	cw := &countingWriter{w: w}
	wopts := []parquet.WriterOption{
		sch,
		parquet.Compression(codec),
		parquet.KeyValueMetadata(formatKey, version),
		parquet.CreatedBy("strata", "1", ""),
	}
	wopts = append(wopts, parquet.PageBufferSize(cmp.Or(opts.PageBytes, DefaultPageBytes)))
	pw := parquet.NewWriter(cw, wopts...)
	// The calling goroutine only copies entries into small batches; each
	// row group has a worker that turns its batches into column values,
	// encodes and compresses them. Up to Parallel row groups are encoded at
	// once and committed to the file in order. Batches are recycled, so
	// memory is the row groups in flight, whatever the file's size: their
	// batches (about 16 MiB for 100k rows of ten fields) and their encoded
	// pages.
	//
	// NB: a row group's queue holds all its batches, so the caller can move
	// on to the next row group while a worker still compresses this one:
	// with a shorter queue the caller waits for the one worker it feeds,
	// and the other workers idle (measured: 12% slower compactions).
	parallel := max(1, opts.Parallel)
	pool := &batchPool{fields: len(fields)}
	queued := max(2, int(opts.RowGroupRows/batchRows)+1)
	cols := batchColumns{series: cSeries, ts: cTS, seq: cSeq, del: cDel, fields: cFields, names: make([]string, len(fields)), kinds: kinds, scales: scales,
		defs: make([]byte, len(fields)), stamps: make([]page.Stamper, len(fields)), nulls: make([]parquet.Value, len(fields))}
	for i, k := range kinds {
		cols.names[i] = fields[i].Name
		if !required[i] {
			cols.defs[i] = 1
		}
		stored := k // as the column holds it
		if scales[i] >= 0 {
			stored = row.Int
		}
		cols.nulls[i] = fieldValue(row.Value{}, cFields[i], cols.defs[i])
		if required[i] {
			cols.nulls[i] = fieldValue(zeroOf(stored), cFields[i], 0)
		}
		tmpl := fieldValue(row.FloatValue(0), cFields[i], cols.defs[i])
		if stored == row.Int || stored == row.Uint {
			tmpl = fieldValue(row.IntValue(0), cFields[i], cols.defs[i])
		}
		cols.stamps[i] = page.StamperOf(tmpl)
	}
	// A committer goroutine writes encoded row groups to w in order, so
	// the calling goroutine (the merge, usually the critical path) never
	// waits on w. encoding holds a slot per row group being encoded; up to
	// backlog encoded row groups (a few MiB each) may wait to be written.
	const backlog = 2
	encoding := make(chan struct{}, parallel)
	commits := make(chan *groupWriter, parallel+backlog)
	committed := make(chan error, 1)
	var failed atomic.Bool
	go func() {
		var err error
		for g := range commits {
			e := <-g.done
			if err == nil && e != nil {
				err = fmt.Errorf("sst: encode row group: %w", e)
			}
			if err == nil {
				if _, e := g.rg.Commit(); e != nil {
					err = fmt.Errorf("sst: write row group: %w", e)
				}
			}
			if err != nil {
				failed.Store(true)
			}
		}
		committed <- err
	}()
	var cur *groupWriter // receiving batches
	finish := func() error {
		if cur != nil {
			close(cur.in)
			cur = nil
		}
		close(commits)
		return <-committed
	}
	fail := func(err error) (Meta, error) {
		if cerr := finish(); cerr != nil && err == nil {
			err = cerr
		}
		return Meta{}, err
	}
	var b *batch
	var groupRows int64
	var m Meta
	var series seriesIndex
	m.MinTS, m.MaxTS = math.MaxInt64, math.MinInt64
	m.MinSeq = math.MaxUint64
	for it.Next() {
		if cur == nil {
			encoding <- struct{}{}
			if failed.Load() {
				return fail(nil)
			}
			cur = startGroup(pw.BeginRowGroup(), cols, pool, queued, encoding)
			commits <- cur
		}
		if b == nil {
			b = pool.get()
		}
		e := it.Entry()
		hi := e.TS
		if e.Op == row.Delete {
			hi = e.End
			m.Tombstones++
		}
		if opts.SeriesIndex {
			series.add(e.Series)
		}
		b.add(e, &cols)
		m.Rows++
		m.MinTS, m.MaxTS = min(m.MinTS, e.TS), max(m.MaxTS, hi)
		m.MinSeq, m.MaxSeq = min(m.MinSeq, e.Seq), max(m.MaxSeq, e.Seq)
		groupRows++
		if len(b.entries) == batchRows || groupRows == opts.RowGroupRows {
			cur.in <- b
			b = nil
		}
		if groupRows == opts.RowGroupRows {
			close(cur.in)
			cur, groupRows = nil, 0
		}
	}
	if err := it.Err(); err != nil {
		return fail(err)
	}
	if m.Rows == 0 {
		return fail(ErrEmpty)
	}
	if b != nil {
		cur.in <- b
	}
	if err := finish(); err != nil {
		return Meta{}, err
	}
	if err := pw.Close(); err != nil {
		return Meta{}, fmt.Errorf("sst: close writer: %w", err)
	}
	m.Size = cw.n
	if opts.SeriesIndex {
		m.Series = series.count
		if m.SeriesIndex, err = series.encode(opts.Compression); err != nil {
			return Meta{}, err
		}
	}
	return m, nil
}

// ErrEmpty: there was nothing to write.
var ErrEmpty = errors.New("sst: no rows")

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

// groupWriter encodes one row group from the batches sent on in; done
// reports the outcome once in is closed and everything is encoded.
type groupWriter struct {
	rg   *parquet.ConcurrentRowGroupWriter
	in   chan *batch
	done chan error
}

// startGroup starts a row group's worker; it frees its slot in encoding
// once the row group is encoded.
func startGroup(rg *parquet.ConcurrentRowGroupWriter, cols batchColumns, pool *batchPool, queued int, encoding chan struct{}) *groupWriter {
	g := &groupWriter{rg: rg, in: make(chan *batch, queued), done: make(chan error, 1)}
	go func() {
		var err error
		buf := make([]parquet.Value, writeChunk)
		for b := range g.in {
			if err == nil {
				err = cols.write(rg, b, buf)
			}
			pool.put(b)
		}
		if err == nil {
			err = rg.Flush()
		}
		<-encoding
		g.done <- err
	}()
	return g
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

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// DefaultPageBytes cuts pages at 64 KiB, not parquet-go's 256 KiB: a
// query for a few series decodes a page of each column it reads per series
// and file, and at 256 KiB a page of values holds 32,768 rows (of a dozen
// series at a 10 s interval over 12 h). A variable for benchmarks
// (STRATA_BENCH_PAGE_KB); docs/design-decisions.md, "Pages of 64 KiB".
var DefaultPageBytes = 64 << 10

// WholeFileLimit: SSTs up to this size are read with one GET; larger ones
// with ranged GETs through a 1 MiB read buffer, which bounds a scan's memory
// per open file. A variable so tests can exercise the ranged path.
var WholeFileLimit int64 = 4 << 20

// Reader is an open SST.
type Reader struct {
	key   string
	file  *parquet.File
	cols  map[string]int      // leaf column index by name
	kinds map[string]row.Kind // field kinds
	ra    io.ReaderAt         // what file reads from: whole bytes, or a *rangeReader
	// pages is what scans read pages from: ra, or a ranged file's blocks
	// through the cache that opened it.
	pages io.ReaderAt
	// numeric[c]: leaf column c is a top-level Double or Int64 column,
	// which the iterator reads from pages' values directly (colStream).
	numeric []bool
	// optional[c]: leaf column c may hold nulls.
	optional []bool
	// scales[c]: the scale of leaf column c, a float field written as
	// decimals; decimal.None for every other column.
	scales []int8
	// groups summarises each row group's statistics, read once at open:
	// every scan consults them, and parquet-go parses a chunk's bounds
	// from its statistics on each call.
	groups []groupStats
	// groupFirst[g] is row group g's first row; its last element is the
	// file's row count.
	groupFirst []int64
	// seqLo, seqHi bound the rows' sequence numbers (seqKnown: the
	// statistics say).
	seqLo, seqHi uint64
	seqKnown     bool
}

// groupStats is what a row group's statistics say about its rows.
type groupStats struct {
	bounded    bool  // the timestamp statistics are there: minTS, maxTS hold
	minTS      int64 // least timestamp
	maxTS      int64 // greatest timestamp or tombstone end
	tombstones bool  // __delete_end is not null in every row
}

// excludes reports whether the group's statistics rule out f's range.
func (g *groupStats) excludes(f Filter) bool { return g.bounded && !f.Overlaps(g.minTS, g.maxTS) }

// Open opens the SST at key, whose size is size.
func Open(ctx context.Context, store objstore.Bucket, key string, size int64) (*Reader, error) {
	var ra io.ReaderAt
	// The page index is read: series-filtered scans seek each column to
	// the matching rows through its offset index.
	opts := []parquet.FileOption{parquet.SkipBloomFilters(true)}
	if size <= WholeFileLimit {
		data, err := store.Get(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("sst: read %s: %w", key, err)
		}
		if int64(len(data)) != size {
			return nil, fmt.Errorf("%w: %s is %d bytes, the manifest says %d", ErrCorrupt, key, len(data), size)
		}
		ra = bytes.NewReader(data)
	} else {
		rr := &rangeReader{ctx: ctx, store: store, key: key, size: size}
		if err := rr.readTail(size); err != nil {
			return nil, err
		}
		// The reader outlives this call in the cache, shared by scans:
		// its reads must not end with the context that opened it. Scans
		// stop on their own context between batches instead.
		rr.ctx = context.WithoutCancel(ctx)
		ra = rr
		// Pages are read through a buffer: a seek refills it whole, from
		// the cache's blocks, and a narrow query seeks for each series.
		// 32 KiB holds a few pages of a field (256 KiB cost a sixth of an
		// 8-host query in copying); the cache reads ahead instead.
		opts = append(opts, parquet.ReadBufferSize(32<<10))
	}
	f, err := parquet.OpenFile(ra, size, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %w", ErrCorrupt, key, err)
	}
	if v, _ := f.Lookup(formatKey); v != formatValue && v != formatDecimalsValue {
		return nil, fmt.Errorf("%w: %s has format %q, want %q or %q", ErrCorrupt, key, v, formatValue, formatDecimalsValue)
	}
	r := &Reader{key: key, file: f, cols: map[string]int{}, kinds: map[string]row.Kind{}, ra: ra, pages: ra,
		numeric: make([]bool, len(f.Schema().Columns())), optional: make([]bool, len(f.Schema().Columns())), scales: make([]int8, len(f.Schema().Columns()))}
	for c := range r.scales {
		r.scales[c] = decimal.None
	}
	for _, leaf := range f.Root().Columns() {
		r.cols[leaf.Name()] = leaf.Index()
		if c := leaf.Index(); c >= 0 && c < len(r.numeric) {
			k := leaf.Type().Kind()
			r.numeric[c] = (k == parquet.Double || k == parquet.Int64) && leaf.MaxRepetitionLevel() == 0 && leaf.MaxDefinitionLevel() <= 1
			r.optional[c] = leaf.MaxDefinitionLevel() > 0
		}
		switch leaf.Name() {
		case ColSeries, ColTS, ColSeq, ColDeleteEnd:
			continue
		}
		k, ok := kindOf(leaf)
		if !ok {
			return nil, fmt.Errorf("%w: %s: column %q has unsupported type %s", ErrCorrupt, key, leaf.Name(), leaf.Type())
		}
		if scale, ok := decimalScale(leaf); ok {
			if c := leaf.Index(); c < 0 || c >= len(r.scales) || !r.numeric[c] || scale < 0 || scale > decimal.MaxScale {
				return nil, fmt.Errorf("%w: %s: column %q is an unsupported decimal %s", ErrCorrupt, key, leaf.Name(), leaf.Type())
			}
			r.scales[leaf.Index()], k = scale, row.Float
		}
		r.kinds[leaf.Name()] = k
	}
	for _, c := range []string{ColSeries, ColTS, ColSeq, ColDeleteEnd} {
		if _, ok := r.cols[c]; !ok {
			return nil, fmt.Errorf("%w: %s has no column %s", ErrCorrupt, key, c)
		}
	}
	r.summarise()
	return r, nil
}

// summarise reads the row groups' statistics into r.groups and the
// sequence range.
func (r *Reader) summarise() {
	md := r.file.Metadata()
	r.seqLo, r.seqHi, r.seqKnown = math.MaxUint64, 0, true
	r.groupFirst = []int64{0}
	for i, g := range r.file.RowGroups() {
		r.groupFirst = append(r.groupFirst, r.groupFirst[i]+g.NumRows())
		chunks := g.ColumnChunks()
		var gs groupStats
		tsc, ok1 := chunks[r.cols[ColTS]].(bounded)
		dc, ok2 := chunks[r.cols[ColDeleteEnd]].(bounded)
		if ok1 && ok2 {
			if lo, hi, ok := tsc.Bounds(); ok {
				gs.bounded, gs.minTS, gs.maxTS = true, lo.Int64(), hi.Int64()
				if _, dhi, ok := dc.Bounds(); ok {
					gs.maxTS = max(gs.maxTS, dhi.Int64())
				}
			}
		}
		rg := md.RowGroups[i]
		c := rg.Columns[r.cols[ColDeleteEnd]].MetaData
		gs.tombstones = c.Statistics.NullCount != rg.NumRows || c.NumValues != rg.NumRows
		r.groups = append(r.groups, gs)
		b, ok := chunks[r.cols[ColSeq]].(bounded)
		var least, most parquet.Value
		if ok {
			least, most, ok = b.Bounds()
		}
		if !ok {
			r.seqKnown = false
			continue
		}
		r.seqLo, r.seqHi = min(r.seqLo, uint64(least.Int64())), max(r.seqHi, uint64(most.Int64()))
	}
	r.seqKnown = r.seqKnown && r.seqLo <= r.seqHi
}

// ErrCorrupt: an SST does not decode or does not match its manifest entry.
var ErrCorrupt = page.ErrCorrupt

// Rows is the number of rows (puts and tombstones) in the file.
func (r *Reader) Rows() int64 { return r.file.NumRows() }

// RowGroups is the number of row groups.
func (r *Reader) RowGroups() int { return len(r.file.RowGroups()) }

// FieldKind returns the kind of a field column in this file.
func (r *Reader) FieldKind(name string) (row.Kind, bool) {
	k, ok := r.kinds[name]
	return k, ok
}

// NullFree reports whether field column name has a value in every put of
// the file: the column is required, or each of its row groups' statistics
// count as many nulls as tombstones (which hold no fields). A writer may then
// write the field without nulls (WriteOptions.NoNulls).
func (r *Reader) NullFree(name string) bool {
	c, ok := r.cols[name]
	if _, field := r.kinds[name]; !ok || !field {
		return false
	}
	if !r.optional[c] {
		return true
	}
	del := r.cols[ColDeleteEnd]
	for _, g := range r.file.Metadata().RowGroups {
		d := g.Columns[del].MetaData
		tombstones := d.NumValues - d.Statistics.NullCount
		if g.Columns[c].MetaData.Statistics.NullCount != tombstones {
			return false
		}
	}
	return true
}

// Decimals reports how the file holds float field name's values: as
// decimals at scale, none over maxAbs in magnitude (from each row group's
// statistics). ok is false if the column holds doubles, or the statistics
// do not say.
func (r *Reader) Decimals(name string) (scale int8, maxAbs int64, ok bool) {
	c, has := r.cols[name]
	if !has || r.scales[c] < 0 {
		return decimal.None, 0, false
	}
	for i, g := range r.file.RowGroups() {
		meta := r.file.Metadata().RowGroups[i].Columns[c].MetaData
		if meta.Statistics.NullCount == meta.NumValues {
			continue // no values
		}
		b, isBounded := g.ColumnChunks()[c].(bounded)
		if !isBounded {
			return decimal.None, 0, false
		}
		least, most, bounds := b.Bounds()
		if !bounds {
			return decimal.None, 0, false
		}
		for _, v := range []int64{least.Int64(), most.Int64()} {
			if v < 0 {
				v = -v
			}
			if v < 0 { // MinInt64
				return decimal.None, 0, false
			}
			maxAbs = max(maxAbs, v)
		}
	}
	return r.scales[c], maxAbs, true
}

// Required reports whether the file has a column for field name that
// cannot hold nulls (written under WriteOptions.NoNulls).
func (r *Reader) Required(name string) bool {
	c, ok := r.cols[name]
	_, field := r.kinds[name]
	return ok && field && !r.optional[c]
}

type rangeReader struct {
	ctx   context.Context
	store objstore.Bucket
	key   string
	size  int64
	// The file's last bytes, from tailOff: the footer and page indexes,
	// which opening reads piece by piece (five reads of the store,
	// one after another, without it).
	tail    []byte
	tailOff int64
}

// tailBytes is how much of a file's end Open reads at once: about a
// thousandth of the file, which holds a Strata SST's footer and page
// indexes (a 512 MiB file's are about 400 KiB), within [64 KiB, 1 MiB].
func tailBytes(size int64) int64 {
	return min(size, max(64<<10, min(1<<20, size/1000)))
}

// readTail reads the file's last tailBytes.
func (r *rangeReader) readTail(size int64) error {
	n := tailBytes(size)
	data, err := r.store.GetRange(r.ctx, r.key, size-n, n)
	if err != nil {
		return fmt.Errorf("sst: read %s: %w", r.key, err)
	}
	if int64(len(data)) != n {
		return fmt.Errorf("%w: %s is shorter than the manifest's %d bytes", ErrCorrupt, r.key, size)
	}
	r.tail, r.tailOff = data, size-n
	return nil
}

// fromTail serves a read that lies within the tail.
func (r *rangeReader) fromTail(p []byte, off int64) (int, bool) {
	if off >= r.tailOff && off+int64(len(p)) <= r.tailOff+int64(len(r.tail)) {
		return copy(p, r.tail[off-r.tailOff:]), true
	}
	return 0, false
}

func (r *rangeReader) ReadAt(p []byte, off int64) (int, error) {
	if n, ok := r.fromTail(p, off); ok {
		return n, nil
	}
	n, err := r.store.ReadRange(r.ctx, r.key, off, p)
	if err != nil {
		return 0, fmt.Errorf("sst: read %s at %d: %w", r.key, off, err)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
