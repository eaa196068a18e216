package sst

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"

	"github.com/parquet-go/parquet-go"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/row"
)

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

// bounded is a column chunk whose statistics give its least and greatest
// values.
type bounded interface {
	Bounds() (min, max parquet.Value, ok bool)
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
	if err := r.mapColumns(); err != nil {
		return nil, err
	}
	r.summarise()
	return r, nil
}

// mapColumns fills r's maps of its columns from the file's schema: their
// indexes, field kinds, decimal scales and whether they are numeric or
// optional. A field column of a type no writer of SSTs writes, or a
// reserved column missing, is ErrCorrupt.
func (r *Reader) mapColumns() error {
	for c := range r.scales {
		r.scales[c] = decimal.None
	}
	for _, leaf := range r.file.Root().Columns() {
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
			return fmt.Errorf("%w: %s: column %q has unsupported type %s", ErrCorrupt, r.key, leaf.Name(), leaf.Type())
		}
		if scale, ok := decimalScale(leaf); ok {
			if c := leaf.Index(); c < 0 || c >= len(r.scales) || !r.numeric[c] || scale < 0 || scale > decimal.MaxScale {
				return fmt.Errorf("%w: %s: column %q is an unsupported decimal %s", ErrCorrupt, r.key, leaf.Name(), leaf.Type())
			}
			r.scales[leaf.Index()], k = scale, row.Float
		}
		r.kinds[leaf.Name()] = k
	}
	for _, c := range []string{ColSeries, ColTS, ColSeq, ColDeleteEnd} {
		if _, ok := r.cols[c]; !ok {
			return fmt.Errorf("%w: %s has no column %s", ErrCorrupt, r.key, c)
		}
	}
	return nil
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

// Ranged reports whether the file is read from the store in ranges, as it
// is needed, rather than held whole (files over WholeFileLimit).
func (r *Reader) Ranged() bool {
	_, ok := r.ra.(*rangeReader)
	return ok
}

// SeqRange bounds the sequence numbers of the file's rows (ok false if the
// statistics do not say).
func (r *Reader) SeqRange() (lo, hi uint64, ok bool) {
	if !r.seqKnown {
		return 0, 0, false
	}
	return r.seqLo, r.seqHi, true
}

// scanPages returns a column chunk's pages, read through the reader's
// cache for a ranged file that a Cache opened.
func (r *Reader) scanPages(c parquet.ColumnChunk) parquet.Pages {
	if fc, ok := c.(*parquet.FileColumnChunk); ok && r.pages != r.ra {
		return fc.PagesFrom(r.pages)
	}
	return c.Pages()
}
