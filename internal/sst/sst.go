// Package sst writes and reads a region's immutable sorted files: Parquet
// (github.com/parquet-go/parquet-go), zstd-compressed, rows in (series, ts,
// seq desc) order, row groups of up to 100k rows with min/max statistics.
// The column layout is specified in docs/format/sst.md.
package sst

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/format"

	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
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

const formatKey, formatValue = "strata.sst.format", "1"

// WriteOptions configure an SST.
type WriteOptions struct {
	RowGroupRows int64 // default DefaultRowGroupRows
	// Parallel is how many row groups are encoded at once (default 1).
	// Each holds its rows in memory while it is encoded.
	Parallel int
	// Level is the zstd level (default zstd.SpeedDefault). Flushes use
	// zstd.SpeedFastest: their files are short-lived inputs of compaction,
	// and the faster level lets flushes keep up with ingest (about 25% more
	// rows/s for 14% larger files on TSBS-shaped data).
	Level zstd.Level
}

// Meta describes a written SST.
type Meta struct {
	Rows       int64 // puts and tombstones
	Tombstones int64
	// MinTS and MaxTS bound every put and every tombstone range.
	MinTS, MaxTS   int64
	MinSeq, MaxSeq uint64
	Size           int64
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

func buildSchema(fields []schema.Field) *parquet.Schema {
	g := parquet.Group{
		ColSeries:    parquet.Encoded(parquet.Leaf(parquet.ByteArrayType), &parquet.RLEDictionary),
		ColTS:        parquet.Timestamp(parquet.Nanosecond),
		ColSeq:       parquet.Uint(64),
		ColDeleteEnd: parquet.Optional(parquet.Int(64)),
	}
	for _, f := range fields {
		g[f.Name] = parquet.Optional(leafFor(f.Kind))
	}
	return parquet.NewSchema("strata", g)
}

// Write encodes the entries of it (whose Fields are by position in fields)
// as an SST into w. It returns ErrEmpty if it yields nothing.
func Write(w io.Writer, fields []schema.Field, it row.Iterator, opts WriteOptions) (Meta, error) {
	if opts.RowGroupRows <= 0 {
		opts.RowGroupRows = DefaultRowGroupRows
	}
	if opts.Level == 0 {
		opts.Level = zstd.SpeedDefault
	}
	sch := buildSchema(fields)
	col := func(name string) int {
		leaf, _ := sch.Lookup(name)
		return leaf.ColumnIndex
	}
	cSeries, cTS, cSeq, cDel := col(ColSeries), col(ColTS), col(ColSeq), col(ColDeleteEnd)
	cFields := make([]int, len(fields))
	for i, f := range fields {
		cFields[i] = col(f.Name)
	}
	cw := &countingWriter{w: w}
	pw := parquet.NewWriter(cw, sch,
		parquet.Compression(&zstd.Codec{Level: opts.Level}),
		parquet.KeyValueMetadata(formatKey, formatValue),
		parquet.CreatedBy("strata", "1", ""),
	)
	ncols := len(sch.Columns())
	// Row groups are encoded concurrently (up to Parallel at a time) and
	// committed to the file in order.
	parallel := max(1, opts.Parallel)
	type pending struct {
		rg   *parquet.ConcurrentRowGroupWriter
		done chan error
	}
	var queue []*pending
	commitOldest := func() error {
		p := queue[0]
		queue = queue[1:]
		if err := <-p.done; err != nil {
			return fmt.Errorf("sst: encode row group: %w", err)
		}
		if _, err := p.rg.Commit(); err != nil {
			return fmt.Errorf("sst: write row group: %w", err)
		}
		return nil
	}
	fail := func(err error) (Meta, error) {
		for _, p := range queue {
			<-p.done
		}
		return Meta{}, err
	}
	start := func(rows []parquet.Row) {
		p := &pending{rg: pw.BeginRowGroup(), done: make(chan error, 1)}
		go func() {
			_, err := p.rg.WriteRows(rows)
			if err == nil {
				err = p.rg.Flush()
			}
			p.done <- err
		}()
		queue = append(queue, p)
	}
	// Row values live in slabs of 4096 rows; rows keep pointing into full
	// slabs, so a new slab needs no copy.
	const slabRows = 4096
	newSlab := func() []parquet.Value { return make([]parquet.Value, 0, slabRows*ncols) }
	newGroup := func() ([]parquet.Row, []parquet.Value) {
		return make([]parquet.Row, 0, min(opts.RowGroupRows, slabRows)), newSlab()
	}
	rows, vals := newGroup()
	var m Meta
	m.MinTS, m.MaxTS = math.MaxInt64, math.MinInt64
	m.MinSeq = math.MaxUint64
	for it.Next() {
		e := it.Entry()
		if len(vals)+ncols > cap(vals) {
			vals = newSlab()
		}
		at := len(vals)
		vals = vals[:at+ncols]
		r := vals[at : at+ncols : at+ncols]
		r[cSeries] = parquet.ByteArrayValue([]byte(e.Series)).Level(0, 0, cSeries)
		r[cTS] = parquet.Int64Value(e.TS).Level(0, 0, cTS)
		r[cSeq] = parquet.Int64Value(int64(e.Seq)).Level(0, 0, cSeq)
		hi := e.TS
		if e.Op == row.Delete {
			r[cDel] = parquet.Int64Value(e.End).Level(0, 1, cDel)
			hi = e.End
			m.Tombstones++
		} else {
			r[cDel] = parquet.Value{}.Level(0, 0, cDel)
		}
		for i, c := range cFields {
			r[c] = fieldValue(e.Field(i), c)
		}
		rows = append(rows, r)
		m.Rows++
		m.MinTS, m.MaxTS = min(m.MinTS, e.TS), max(m.MaxTS, hi)
		m.MinSeq, m.MaxSeq = min(m.MinSeq, e.Seq), max(m.MaxSeq, e.Seq)
		if int64(len(rows)) == opts.RowGroupRows {
			start(rows)
			rows, vals = newGroup()
			if len(queue) >= parallel {
				if err := commitOldest(); err != nil {
					return fail(err)
				}
			}
		}
	}
	if err := it.Err(); err != nil {
		return fail(err)
	}
	if m.Rows == 0 {
		return fail(ErrEmpty)
	}
	if len(rows) > 0 {
		start(rows)
	}
	for len(queue) > 0 {
		if err := commitOldest(); err != nil {
			return fail(err)
		}
	}
	if err := pw.Close(); err != nil {
		return Meta{}, fmt.Errorf("sst: close writer: %w", err)
	}
	m.Size = cw.n
	return m, nil
}

// ErrEmpty: there was nothing to write.
var ErrEmpty = errors.New("sst: no rows")

func fieldValue(v row.Value, col int) parquet.Value {
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
	return pv.Level(0, 1, col)
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

// WholeFileLimit: SSTs up to this size are read with one GET; larger ones
// with ranged GETs through a 1 MiB read buffer, which bounds a scan's memory
// per open file. A variable so tests can exercise the ranged path.
var WholeFileLimit int64 = 4 << 20

// Reader is an open SST.
type Reader struct {
	key    string
	file   *parquet.File
	cols   map[string]int      // leaf column index by name
	kinds  map[string]row.Kind // field kinds
	ranged bool                // reads through ranged GETs
}

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
		ra = &rangeReader{ctx: ctx, store: store, key: key}
		opts = append(opts, parquet.ReadBufferSize(256<<10))
	}
	f, err := parquet.OpenFile(ra, size, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %v", ErrCorrupt, key, err)
	}
	if v, _ := f.Lookup(formatKey); v != formatValue {
		return nil, fmt.Errorf("%w: %s has format %q, want %q", ErrCorrupt, key, v, formatValue)
	}
	_, ranged := ra.(*rangeReader)
	r := &Reader{key: key, file: f, cols: map[string]int{}, kinds: map[string]row.Kind{}, ranged: ranged}
	for _, leaf := range f.Root().Columns() {
		r.cols[leaf.Name()] = leaf.Index()
		switch leaf.Name() {
		case ColSeries, ColTS, ColSeq, ColDeleteEnd:
			continue
		}
		k, ok := kindOf(leaf)
		if !ok {
			return nil, fmt.Errorf("%w: %s: column %q has unsupported type %s", ErrCorrupt, key, leaf.Name(), leaf.Type())
		}
		r.kinds[leaf.Name()] = k
	}
	for _, c := range []string{ColSeries, ColTS, ColSeq, ColDeleteEnd} {
		if _, ok := r.cols[c]; !ok {
			return nil, fmt.Errorf("%w: %s has no column %s", ErrCorrupt, key, c)
		}
	}
	return r, nil
}

// ErrCorrupt: an SST does not decode or does not match its manifest entry.
var ErrCorrupt = errors.New("sst: corrupt file")

// Rows is the number of rows (puts and tombstones) in the file.
func (r *Reader) Rows() int64 { return r.file.NumRows() }

// RowGroups is the number of row groups.
func (r *Reader) RowGroups() int { return len(r.file.RowGroups()) }

// FieldKind returns the kind of a field column in this file.
func (r *Reader) FieldKind(name string) (row.Kind, bool) {
	k, ok := r.kinds[name]
	return k, ok
}

type rangeReader struct {
	ctx   context.Context
	store objstore.Bucket
	key   string
}

func (r *rangeReader) ReadAt(p []byte, off int64) (int, error) {
	data, err := r.store.GetRange(r.ctx, r.key, off, int64(len(p)))
	if err != nil {
		return 0, fmt.Errorf("sst: read %s at %d: %w", r.key, off, err)
	}
	n := copy(p, data)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
