package sst

import (
	"fmt"
	"slices"
	"sort"

	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/sst/internal/page"
)

// SeriesColumn is one series' values of one numeric field
// (scan.SeriesColumn); a reader's slices are valid only until the
// callback it was passed to returns.
type SeriesColumn = scan.SeriesColumn

// NumericField reports whether field's column holds 64-bit numbers
// (float, int, uint), which ReadColumns reads.
func (r *Reader) NumericField(field string) bool {
	c, ok := r.cols[field]
	_, isField := r.kinds[field]
	return ok && isField && r.numeric[c]
}

// Tombstones reports whether a row group that [start, end) touches may hold
// a tombstone.
func (r *Reader) Tombstones(start, end int64) bool {
	f := Filter{Start: start, End: end}
	for _, g := range r.groups {
		if g.tombstones && !g.excludes(f) {
			return true
		}
	}
	return false
}

// columnStep is how many rows ReadColumns decodes at a time.
const columnStep = 8192

// ReadColumns calls emit with the rows in [start, end) of each run (sorted
// by Start, as a file's series index gives them) that has any, reading only
// the timestamp column and field's, page values copied straight into the
// column. Field must be a NumericField, and the file hold no Tombstones in
// [start, end): rows are taken as they are (a file holds one version of
// each (series, ts)).
func (r *Reader) ReadColumns(runs []Run, field string, start, end int64, emit func(*SeriesColumn) error) error {
	fc := r.cols[field]
	groups := r.file.RowGroups()
	first := r.groupFirst
	cr := getColumnReader(r, fc, Filter{Start: start, End: end})
	defer cr.release()
	col := &cr.col
	col.Finite = r.scales[fc] >= 0
	optional := r.optional[fc]
	for _, run := range runs {
		col.Series, col.TS, col.Bits, col.Null = run.Key, col.TS[:0], col.Bits[:0], col.Null[:0]
		for at := run.Start; at < run.End; {
			g := sort.Search(len(groups), func(i int) bool { return first[i+1] > at })
			if g == len(groups) {
				return fmt.Errorf("%w: %s: series %q runs past the file's %d rows", ErrCorrupt, r.key, run.Key, first[len(groups)])
			}
			upto := min(run.End, first[g+1])
			open, err := cr.open(g)
			if err != nil {
				return err
			}
			if !open { // the group's times are outside the range
				at = upto
				continue
			}
			if err := cr.seek(at - first[g]); err != nil {
				return err
			}
			for at < upto {
				n := int(min(upto-at, columnStep))
				if err := cr.ts.read(n); err != nil {
					return cr.fail(err)
				}
				at += int64(n)
				// A run is in ts order: the rows in range are a stretch.
				ts := page.Ints(cr.ts.payloads()[:n])
				lo, _ := slices.BinarySearch(ts, start)
				hi, _ := slices.BinarySearch(ts[lo:], end)
				hi += lo
				col.TS = append(col.TS, ts[lo:hi]...)
				if !optional {
					// Straight from the pages: one copy, not two.
					var err error
					if col.Bits, err = cr.vals.appendRequired(col.Bits, n, lo, hi); err != nil {
						return cr.fail(err)
					}
					continue
				}
				vals := cr.vals.(*colStream) // rawPages reads required columns only
				if err := vals.read(n); err != nil {
					return cr.fail(err)
				}
				col.Bits = append(col.Bits, vals.bits[lo:hi]...)
				col.Null = append(col.Null, vals.null[lo:hi]...)
			}
		}
		if len(col.TS) == 0 {
			continue
		}
		if !optional {
			col.Null = nil
		}
		if err := emit(col); err != nil {
			return err
		}
	}
	return nil
}

// columnReader reads the timestamp column and one field column of one row
// group at a time.
type columnReader struct {
	r        *Reader
	field    int
	filter   Filter
	group    int
	inRange  bool
	ts, vals numericStream
	// the last group's streams' buffers, for the next group's
	tsBits, valBits []uint64
	valNull         []bool
	rawTS, rawVals  rawPages
	col             SeriesColumn // what ReadColumns emits
}

// columnReaders keeps columnReaders' buffers (pages read and decompressed,
// the columns emitted) from one ReadColumns to the next: a narrow query
// otherwise allocates and clears them anew for every file it reads.
var columnReaders = freelist.New[*columnReader](8)

// keptRows bounds the rows a kept columnReader's buffers may hold.
const keptRows = 1 << 20

func getColumnReader(r *Reader, field int, f Filter) *columnReader {
	cr, ok := columnReaders.Get()
	if !ok {
		cr = new(columnReader)
	}
	cr.r, cr.field, cr.filter, cr.group = r, field, f, -1
	return cr
}

// release closes the group being read and keeps cr's buffers, unless they
// grew large, for the next ReadColumns.
func (c *columnReader) release() {
	c.close()
	c.r, c.rawTS, c.rawVals = nil, c.rawTS.buffers(), c.rawVals.buffers() // no file is held
	c.col = SeriesColumn{TS: c.col.TS[:0], Bits: c.col.Bits[:0], Null: c.col.Null[:0]}
	if max(cap(c.col.TS), cap(c.col.Bits), cap(c.tsBits), cap(c.valBits), cap(c.rawTS.bits), cap(c.rawVals.bits)) <= keptRows &&
		max(cap(c.rawTS.raw), c.rawTS.vals.BufferBytes(), cap(c.rawVals.raw), c.rawVals.vals.BufferBytes()) <= 8*keptRows {
		columnReaders.Put(c)
	}
}

// numericStream reads a numeric column chunk: a colStream, or a rawPages
// for a required column whose pages it decodes.
type numericStream interface {
	seek(row int64) error
	// read reads the next n rows' payloads into payloads().
	read(n int) error
	payloads() []uint64
	// appendRequired consumes the next n rows of a required column,
	// appending rows [lo, hi) of them to dst.
	appendRequired(dst []uint64, n, lo, hi int) ([]uint64, error)
	close()
}

// open makes g the group being read, and reports whether its times may
// overlap the filter's range.
func (c *columnReader) open(g int) (bool, error) {
	if g == c.group {
		return c.inRange, nil
	}
	c.close()
	c.group = g
	if c.inRange = !c.r.groups[g].excludes(c.filter); !c.inRange {
		return false, nil
	}
	chunks := c.r.file.RowGroups()[g].ColumnChunks()
	if tc := c.r.cols[ColTS]; c.r.openRaw(g, tc, &c.rawTS) {
		c.ts = &c.rawTS
	} else {
		c.ts = &colStream{pages: c.r.scanPages(chunks[tc]), numeric: true, noNull: true, bits: c.tsBits}
	}
	if c.r.openRaw(g, c.field, &c.rawVals) {
		c.vals = &c.rawVals
	} else {
		c.vals = &colStream{pages: c.r.scanPages(chunks[c.field]), numeric: true, noNull: !c.r.optional[c.field],
			decimals: c.r.scales[c.field] >= 0, scale: c.r.scales[c.field], bits: c.valBits, null: c.valNull}
	}
	return true, nil
}

func (c *columnReader) seek(row int64) error {
	for _, s := range []numericStream{c.ts, c.vals} {
		if err := s.seek(row); err != nil {
			return fmt.Errorf("sst: seek %s row group %d: %w", c.r.key, c.group, err)
		}
	}
	return nil
}

func (c *columnReader) fail(err error) error {
	return fmt.Errorf("sst: read %s row group %d: %w", c.r.key, c.group, err)
}

func (c *columnReader) close() {
	if c.ts != nil {
		c.ts.close()
		c.vals.close()
		if s, ok := c.ts.(*colStream); ok {
			c.tsBits = s.bits
		}
		if s, ok := c.vals.(*colStream); ok {
			c.valBits, c.valNull = s.bits, s.null
		}
		c.ts, c.vals = nil, nil
	}
}
