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
)

// DefaultRowGroupRows is the row group size.
const DefaultRowGroupRows = 100_000

// DefaultPageBytes cuts pages at 64 KiB, not parquet-go's 256 KiB: a
// query for a few series decodes a page of each column it reads per series
// and file, and at 256 KiB a page of values holds 32,768 rows (of a dozen
// series at a 10 s interval over 12 h). A variable for benchmarks
// (STRATA_BENCH_PAGE_KB); docs/design-decisions.md, "Pages of 64 KiB".
var DefaultPageBytes = 64 << 10

// DefaultRowGroupKeyBytes ends a row group once the distinct series keys
// it holds reach 4 MiB, before RowGroupRows. Until a group is written the
// writer keeps its keys several times over: the series column's dictionary
// (parquet-go's hash table and value buffer, each a copy, and the buffers
// it grew through, pooled), then the dictionary page, plain and
// compressed. 100,000 rows of TSBS's hosts hold a few hundred KiB of keys;
// of Prometheus series at 4 rows each, 10 MiB, which made a group cost
// about 80 MiB to write (BenchmarkWriteManySeries). A group's cost is now
// bounded whatever the keys (docs/design-decisions.md, "What a flush
// holds"). Smaller groups cost a footer entry each (about 1.3 KiB).
const DefaultRowGroupKeyBytes = 4 << 20

// WriteOptions configure an SST.
type WriteOptions struct {
	RowGroupRows int64 // default DefaultRowGroupRows
	// RowGroupKeyBytes ends a row group before the first row of a series
	// whose key would take the group's distinct keys past it (default
	// DefaultRowGroupKeyBytes; a group holds at least one series).
	RowGroupKeyBytes int
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
	if opts.RowGroupKeyBytes <= 0 {
		opts.RowGroupKeyBytes = DefaultRowGroupKeyBytes
	}
	codec, err := codecFor(opts.Compression)
	if err != nil {
		return Meta{}, err
	}
	l, err := newLayout(fields, opts)
	if err != nil {
		return Meta{}, err
	}
	cw := &countingWriter{w: w}
	pw := parquet.NewGenericWriter[any](cw,
		l.schema,
		parquet.Compression(codec),
		parquet.KeyValueMetadata(formatKey, l.version),
		parquet.CreatedBy("strata", "1", ""),
		parquet.PageBufferSize(cmp.Or(opts.PageBytes, DefaultPageBytes)),
	)
	var series *seriesIndex
	if opts.SeriesIndex {
		if series, err = newSeriesIndex(opts.Compression); err != nil {
			return Meta{}, err
		}
		defer func() { _ = series.close() }() // idempotent: the success path's close is checked where the index is finished
	}
	m, err := startPipeline(pw, l.cols, opts).run(it, series)
	if err != nil {
		return Meta{}, err
	}
	if err := pw.Close(); err != nil {
		return Meta{}, fmt.Errorf("sst: close writer: %w", err)
	}
	m.Size = cw.n
	if series != nil {
		m.Series = series.count
		if m.SeriesIndex, err = series.encode(); err != nil {
			return Meta{}, err
		}
	}
	return m, nil
}

// layout is how a Write lays out its fields: the file's schema, its format
// version, and the columns its batches are written to.
type layout struct {
	schema  *parquet.Schema
	version string
	cols    batchColumns
}

// newLayout lays out fields as opts asks (NoNulls, Decimals); a decimal
// scale past decimal.MaxScale is an error.
func newLayout(fields []schema.Field, opts WriteOptions) (layout, error) {
	required := make([]bool, len(fields))
	copy(required, opts.NoNulls)
	scales, err := decimalScales(fields, opts.Decimals)
	if err != nil {
		return layout{}, err
	}
	sch := buildSchema(fields, required, scales)
	version := formatValue
	if slices.ContainsFunc(scales, func(s int8) bool { return s >= 0 }) {
		version = formatDecimalsValue
	}
	return layout{schema: sch, version: version, cols: newBatchColumns(sch, fields, required, scales)}, nil
}

// decimalScales is the scale each field is written at
// (WriteOptions.Decimals): decimal.None for doubles and fields of other
// kinds.
func decimalScales(fields []schema.Field, decimals []int8) ([]int8, error) {
	scales := make([]int8, len(fields))
	for j, f := range fields {
		scales[j] = decimal.None
		if j < len(decimals) && f.Kind == row.Float && decimals[j] >= 0 {
			if decimals[j] > decimal.MaxScale {
				return nil, fmt.Errorf("sst: field %q: decimal scale %d over %d", f.Name, decimals[j], decimal.MaxScale)
			}
			scales[j] = decimals[j]
		}
	}
	return scales, nil
}

// pipeline encodes a Write's entries. The calling goroutine only copies
// entries into small batches (add); each row group has a worker that turns
// its batches into column values, encodes and compresses them
// (startGroup). Up to Parallel row groups are encoded at once, and a
// committer goroutine writes them to the file in order (commit), so the
// calling goroutine (the merge, usually the critical path) never waits on
// the file. Batches and row group writers are recycled, so memory is the
// row groups in flight, whatever the file's size: their batches (about 16
// MiB for 100k rows of ten fields), their series dictionaries (a few times
// RowGroupKeyBytes at most) and their encoded pages, and up to backlog
// encoded row groups (a few MiB each) waiting to be written. Beside them
// the series index grows by its compressed size only (series.go).
//
// NB: a row group's queue holds all its batches, so the caller can move on
// to the next row group while a worker still compresses this one: with a
// shorter queue the caller waits for the one worker it feeds, and the
// other workers idle (measured: 12% slower compactions).
type pipeline struct {
	pw           *parquet.GenericWriter[any]
	cols         batchColumns
	pool         *batchPool
	queued       int   // how many batches a row group's queue holds
	rowGroupRows int64 // WriteOptions.RowGroupRows
	keyBytes     int   // WriteOptions.RowGroupKeyBytes

	encoding  chan struct{}     // a slot per row group being encoded
	commits   chan *groupWriter // row groups, in file order, for the committer
	committed chan error        // the committer's outcome, once commits is closed
	failed    atomic.Bool       // the committer has failed: stop feeding it
	// free holds row group writers the committer has written, for the
	// next groups: a writer keeps its buffers (the series dictionary's
	// above all) across Commit, so a group reusing one allocates little,
	// where a new writer grows every buffer again (parquet-go's own
	// Writer reuses its one row group writer the same way).
	free chan *parquet.ConcurrentRowGroupWriter

	cur       *groupWriter // the row group receiving batches
	b         *batch       // the batch being filled, nil if none
	groupRows int64        // rows given to cur
	groupKeys int          // bytes of the distinct series keys given to cur
	last      string       // the series of the last row given to cur
}

// backlog is how many encoded row groups may wait to be written.
const backlog = 2

// startPipeline starts the committer of a pipeline writing to pw.
func startPipeline(pw *parquet.GenericWriter[any], cols batchColumns, opts WriteOptions) *pipeline {
	parallel := max(1, opts.Parallel)
	p := &pipeline{
		pw: pw, cols: cols, pool: &batchPool{fields: len(cols.fields)},
		queued:       max(2, int(opts.RowGroupRows/batchRows)+1),
		rowGroupRows: opts.RowGroupRows,
		keyBytes:     opts.RowGroupKeyBytes,
		encoding:     make(chan struct{}, parallel),
		commits:      make(chan *groupWriter, parallel+backlog),
		committed:    make(chan error, 1),
		free:         make(chan *parquet.ConcurrentRowGroupWriter, parallel+backlog),
	}
	go p.commit()
	return p
}

// commit writes each row group sent on commits to the file once it is
// encoded, in order, and sends the first failure (or nil) on committed
// when commits is closed. After a failure it only drains commits.
func (p *pipeline) commit() {
	var err error
	for g := range p.commits {
		e := <-g.done
		if err == nil && e != nil {
			err = fmt.Errorf("sst: encode row group: %w", e)
		}
		if err == nil {
			if _, e := g.rg.Commit(); e != nil {
				err = fmt.Errorf("sst: write row group: %w", e)
			} else {
				// NB: never waits: a writer that does not fit is dropped.
				select {
				case p.free <- g.rg:
				default:
				}
			}
		}
		if err != nil {
			p.failed.Store(true)
		}
	}
	p.committed <- err
}

// run feeds the entries of it to the pipeline and ends it (finish), returning
// the file's Meta but for its size; series, if not nil, gets each entry's
// series.
func (p *pipeline) run(it row.Iterator, series *seriesIndex) (Meta, error) {
	m := Meta{MinTS: math.MaxInt64, MaxTS: math.MinInt64, MinSeq: math.MaxUint64}
	for it.Next() {
		e := it.Entry()
		if !p.add(e) {
			return p.fail(nil)
		}
		m.count(e)
		if series != nil {
			series.add(e.Series)
		}
	}
	if err := it.Err(); err != nil {
		return p.fail(err)
	}
	if m.Rows == 0 {
		return p.fail(ErrEmpty)
	}
	if err := p.finish(); err != nil {
		return Meta{}, err
	}
	return m, nil
}

// add copies e into the current batch, starting a row group (which waits
// for an encoding slot) if none is receiving, and hands full batches and
// row groups on. It reports false, having added nothing, if the committer
// failed.
func (p *pipeline) add(e *row.Entry) bool {
	newSeries := p.cur == nil || e.Series != p.last
	if newSeries && p.cur != nil && p.groupKeys+len(e.Series) > p.keyBytes {
		p.endGroup()
	}
	if p.cur == nil {
		p.encoding <- struct{}{}
		if p.failed.Load() {
			return false
		}
		p.cur = startGroup(p.rowGroup(), p.cols, p.pool, p.queued, p.encoding)
		p.commits <- p.cur
	}
	if newSeries {
		p.groupKeys += len(e.Series)
		p.last = e.Series
	}
	if p.b == nil {
		p.b = p.pool.get()
	}
	p.b.add(e, &p.cols)
	p.groupRows++
	if len(p.b.entries) == batchRows {
		p.cur.in <- p.b
		p.b = nil
	}
	if p.groupRows == p.rowGroupRows {
		p.endGroup()
	}
	return true
}

// rowGroup is a written row group's writer, or a new one.
func (p *pipeline) rowGroup() *parquet.ConcurrentRowGroupWriter {
	select {
	case rg := <-p.free:
		return rg
	default:
		return p.pw.BeginRowGroup()
	}
}

// endGroup hands the current row group's last batch on and closes it.
func (p *pipeline) endGroup() {
	if p.b != nil {
		p.cur.in <- p.b
		p.b = nil
	}
	close(p.cur.in)
	p.cur, p.groupRows, p.groupKeys, p.last = nil, 0, 0, ""
}

// finish ends the row group receiving batches and waits for the committer:
// the first error encoding or writing a row group.
func (p *pipeline) finish() error {
	if p.cur != nil {
		p.endGroup()
	}
	close(p.commits)
	return <-p.committed
}

// fail ends the pipeline after err, or after the committer's error if err
// is nil.
func (p *pipeline) fail(err error) (Meta, error) {
	if cerr := p.finish(); cerr != nil && err == nil {
		err = cerr
	}
	return Meta{}, err
}

// count adds e to m's counts and bounds.
func (m *Meta) count(e *row.Entry) {
	hi := e.TS
	if e.Op == row.Delete {
		hi = e.End
		m.Tombstones++
	}
	m.Rows++
	m.MinTS, m.MaxTS = min(m.MinTS, e.TS), max(m.MaxTS, hi)
	m.MinSeq, m.MaxSeq = min(m.MinSeq, e.Seq), max(m.MaxSeq, e.Seq)
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
