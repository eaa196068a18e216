package sst

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync/atomic"

	"github.com/parquet-go/parquet-go"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/sst/internal/page"
)

// DefaultRowGroupRows is the row group size.
const DefaultRowGroupRows = 100_000

// DefaultPageBytes cuts pages at 64 KiB, not parquet-go's 256 KiB: a
// query for a few series decodes a page of each column it reads per series
// and file, and at 256 KiB a page of values holds 32,768 rows (of a dozen
// series at a 10 s interval over 12 h). A variable for benchmarks
// (STRATA_BENCH_PAGE_KB); docs/design-decisions.md, "Pages of 64 KiB".
var DefaultPageBytes = 64 << 10

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

// ErrEmpty: there was nothing to write.
var ErrEmpty = errors.New("sst: no rows")

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

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
