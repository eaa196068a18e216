package sst

import (
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/parquet-go/parquet-go"

	"github.com/stratadb/strata/internal/row"
)

// Filter selects what an iterator returns.
type Filter struct {
	// Series, if set, selects series by key.
	Series func(key string) bool
	// Runs, if not nil, are the rows of the series that Series selects,
	// sorted (from the file's series index): only row groups holding
	// some are read, and only those rows of them, without reading the
	// series column.
	Runs []Run
	// Start <= ts < End for puts; tombstones are returned when their range
	// overlaps.
	Start, End int64
	// Fields names the output positions.
	Fields []string
	// ReuseFields lets the iterator reuse the memory of the Fields it
	// returns: they stay valid while its next chunk (1024 entries) is read,
	// and no longer. That covers a merge's one-entry lookahead when the
	// consumer copies what it keeps, as the SST writer does, and saves
	// allocating (and collecting) every field value read.
	ReuseFields bool
	// GroupBytes, if positive, reads each row group of a ranged file (one
	// larger than WholeFileLimit) of at most that many bytes with one
	// request of the store, instead of one or more per column, and holds
	// it while the group is read: for reads of every row of every column
	// (compaction), it saves round trips and per-request costs. Larger row
	// groups are read per column, through a 256 KiB buffer each. Either
	// way these reads bypass the cache's blocks (Cache), which other
	// scans of ranged files read through.
	GroupBytes int64
}

// Run is the rows [Start, End) of the file (counting from its first row)
// that hold series Key.
type Run struct {
	Key        string
	Start, End int64
}

// Overlaps reports whether [minTS, maxTS] may hold rows for f.
func (f *Filter) Overlaps(minTS, maxTS int64) bool { return minTS < f.End && maxTS >= f.Start }

const chunkRows = 1024

// Iter streams the file's entries that match f. Row groups whose statistics
// exclude f's time range are skipped without being read.
func (r *Reader) Iter(f Filter) row.Iterator {
	it := &iter{r: r, f: f, group: -1}
	if f.Runs != nil {
		it.groupStart = r.groupFirst
	}
	it.fieldCols = make([]int, len(f.Fields))
	it.kinds = make([]row.Kind, len(f.Fields))
	for i, name := range f.Fields {
		c, ok := r.cols[name]
		k, isField := r.kinds[name]
		if !ok || !isField {
			c = -1
		}
		it.fieldCols[i], it.kinds[i] = c, k
	}
	return it
}

type iter struct {
	r         *Reader
	f         Filter
	fieldCols []int
	kinds     []row.Kind // of each output field

	group      int
	groupStart []int64 // with Filter.Runs: each row group's first row
	pruned     int     // row groups skipped by their statistics
	left       int64   // rows left in the group
	series     *colStream
	ts         *colStream
	seq        *colStream
	del        *colStream
	fields     []*colStream
	open       []*colStream

	curSeries string
	match     bool
	haveCur   bool

	slabs [2][]row.Value // with ReuseFields: field values, by turns
	flip  int

	// window holds the row group fetchGroup read, and is reused for the
	// next one: a compaction reads hundreds of MiB this way.
	window []byte

	// With a series filter, runs are the row ranges of the group's
	// matching series; only those rows of the other columns are read.
	runs []seriesRun
	run  int

	out []row.Entry
	pos int
	err error
}

func (it *iter) Err() error { return it.err }

func (it *iter) Entry() *row.Entry { return &it.out[it.pos] }

func (it *iter) Close() error {
	it.closeGroup()
	return nil
}

func (it *iter) closeGroup() {
	for _, s := range it.open {
		s.close()
	}
	it.open = it.open[:0]
}

func (it *iter) Next() bool {
	it.pos++
	for it.pos >= len(it.out) {
		if it.err != nil || !it.fill() {
			return false
		}
	}
	return true
}

// nextGroup opens the next row group that may hold matching rows.
func (it *iter) nextGroup() bool {
	it.closeGroup()
	groups := it.r.file.RowGroups()
	for it.group++; it.group < len(groups); it.group++ {
		g := groups[it.group]
		if it.prune() || (it.f.Runs != nil && !it.groupRuns(g.NumRows())) {
			it.pruned++
			continue
		}
		chunks := g.ColumnChunks()
		group, err := it.fetchGroup()
		if err != nil {
			it.err = fmt.Errorf("sst: read %s row group %d: %w", it.r.key, it.group, err)
			return false
		}
		stream := func(c int) *colStream {
			var pages parquet.Pages
			if fc, ok := chunks[c].(*parquet.FileColumnChunk); ok && group != nil {
				pages = fc.PagesFrom(group)
			} else if it.f.GroupBytes > 0 {
				pages = chunks[c].Pages() // compaction's: not cached
			} else {
				pages = it.r.scanPages(chunks[c])
			}
			s := &colStream{pages: pages, numeric: it.r.numeric[c], decimals: it.r.scales[c] >= 0, scale: it.r.scales[c]}
			it.open = append(it.open, s)
			return s
		}
		it.series = nil
		if it.f.Runs == nil {
			it.series = stream(it.r.cols[ColSeries])
			if skip, err := it.noSeriesMatch(it.series); err != nil {
				it.err = fmt.Errorf("sst: read %s row group %d: %w", it.r.key, it.group, err)
				return false
			} else if skip {
				it.pruned++
				it.closeGroup()
				continue
			}
		}
		it.ts, it.seq, it.del = stream(it.r.cols[ColTS]), stream(it.r.cols[ColSeq]), nil
		if it.tombstones() {
			it.del = stream(it.r.cols[ColDeleteEnd])
		}
		it.fields = it.fields[:0]
		for _, c := range it.fieldCols {
			if c < 0 {
				it.fields = append(it.fields, nil)
			} else {
				it.fields = append(it.fields, stream(c))
			}
		}
		it.left = g.NumRows()
		if it.f.Series != nil && it.f.Runs == nil {
			if err := it.findRuns(g.NumRows()); err != nil {
				it.err = fmt.Errorf("sst: read %s row group %d: %w", it.r.key, it.group, err)
				return false
			}
			if len(it.runs) == 0 {
				it.pruned++
				continue
			}
		}
		return true
	}
	return false
}

// fetchGroup reads the current row group's column chunks with one request,
// if the filter asks for it, the group fits and the file is read in
// ranges; nil otherwise.
func (it *iter) fetchGroup() (io.ReaderAt, error) {
	rr, ranged := it.r.ra.(*rangeReader)
	if it.f.GroupBytes <= 0 || !ranged {
		return nil, nil
	}
	rg := it.r.file.Metadata().RowGroups[it.group]
	lo, hi := int64(math.MaxInt64), int64(0)
	for _, c := range rg.Columns {
		md := c.MetaData
		start := md.DataPageOffset
		if md.DictionaryPageOffset != 0 {
			start = min(start, md.DictionaryPageOffset)
		}
		lo, hi = min(lo, start), max(hi, start+md.TotalCompressedSize)
	}
	if hi <= lo || hi-lo > it.f.GroupBytes {
		return nil, nil
	}
	// NB: the buffer is the previous group's: its streams are closed, and
	// the pages they read were copied out of it.
	if int64(cap(it.window)) < hi-lo {
		it.window = make([]byte, hi-lo)
	}
	data := it.window[:hi-lo]
	n, err := rr.store.ReadRange(rr.ctx, rr.key, lo, data)
	if err != nil {
		return nil, fmt.Errorf("bytes %d-%d: %w", lo, hi, err)
	}
	if int64(n) != hi-lo {
		return nil, fmt.Errorf("%w: the row group ends past the end of the file", ErrCorrupt)
	}
	return &windowReader{base: lo, data: data, rest: rr}, nil
}

// noSeriesMatch reports whether the row group's series dictionary has no
// series the filter selects, so the group can be skipped after reading only
// that dictionary.
//
// INVARIANT: Write sets no dictionary size limit, so a chunk's dictionary
// holds every series of the chunk.
func (it *iter) noSeriesMatch(s *colStream) (bool, error) {
	if it.f.Series == nil {
		return false, nil
	}
	fp, ok := s.pages.(*parquet.FilePages)
	if !ok {
		return false, nil
	}
	dict, err := fp.ReadDictionary()
	if err != nil || dict == nil {
		return false, err
	}
	for i := range dict.Len() {
		if it.f.Series(string(dict.Index(int32(i)).ByteArray())) {
			return false, nil
		}
	}
	return true, nil
}

type seriesRun struct {
	start, end int64
	series     string
}

// findRuns reads the group's series column and records the ranges of rows
// whose series the filter selects.
func (it *iter) findRuns(rows int64) error {
	it.runs, it.run = it.runs[:0], 0
	it.haveCur = false // a series may continue from the previous group
	const step = 8192
	for at := int64(0); at < rows; {
		n := int(min(step, rows-at))
		if err := it.series.read(n); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			b := it.series.buf[i].ByteArray()
			if !it.haveCur || string(b) != it.curSeries {
				it.curSeries, it.haveCur = string(b), true
				it.match = it.f.Series(it.curSeries)
				if it.match {
					it.runs = append(it.runs, seriesRun{start: at + int64(i), end: at + int64(i), series: it.curSeries})
				}
			}
			if it.match {
				it.runs[len(it.runs)-1].end = at + int64(i) + 1
			}
		}
		at += int64(n)
	}
	return nil
}

// prune reports whether a row group's statistics exclude the filter.
func (it *iter) prune() bool { return it.r.groups[it.group].excludes(it.f) }

// groupRuns sets it.runs to the filter's runs within the current row group
// (of rows rows), relative to it, and reports whether there are any.
func (it *iter) groupRuns(rows int64) bool {
	lo := it.groupStart[it.group]
	hi := lo + rows
	it.runs, it.run = it.runs[:0], 0
	i := sort.Search(len(it.f.Runs), func(i int) bool { return it.f.Runs[i].End > lo })
	for ; i < len(it.f.Runs) && it.f.Runs[i].Start < hi; i++ {
		r := it.f.Runs[i]
		it.runs = append(it.runs, seriesRun{start: max(r.Start, lo) - lo, end: min(r.End, hi) - lo, series: r.Key})
	}
	return len(it.runs) > 0
}

// tombstones reports whether the current row group may hold a tombstone:
// __delete_end is not null in every row (by the chunk's statistics). A
// group without any is read without that column.
func (it *iter) tombstones() bool { return it.r.groups[it.group].tombstones }

// fillRun decodes the next chunk of the current series run.
func (it *iter) fillRun() bool {
	for it.run < len(it.runs) && it.runs[it.run].start == it.runs[it.run].end {
		it.run++
	}
	if it.run == len(it.runs) {
		it.left = 0
		return true // the caller moves to the next group
	}
	r := &it.runs[it.run]
	n := int(min(r.end-r.start, chunkRows))
	for _, s := range it.open {
		if s == it.series {
			continue
		}
		if err := s.seek(r.start); err != nil {
			it.err = fmt.Errorf("sst: seek %s row group %d: %w", it.r.key, it.group, err)
			return false
		}
		if err := s.read(n); err != nil {
			it.err = fmt.Errorf("sst: read %s row group %d: %w", it.r.key, it.group, err)
			return false
		}
	}
	r.start += int64(n)
	it.decode(n, func(int) string { return r.series })
	return true
}

// fill decodes the next chunk of rows into it.out.
func (it *iter) fill() bool {
	if it.left == 0 && !it.nextGroup() {
		return false
	}
	if it.f.Series != nil || it.f.Runs != nil {
		return it.fillRun()
	}
	n := int(min(it.left, chunkRows))
	it.left -= int64(n)
	for _, s := range it.open {
		if err := s.read(n); err != nil {
			it.err = fmt.Errorf("sst: read %s row group %d: %w", it.r.key, it.group, err)
			return false
		}
	}
	it.decode(n, nil)
	return true
}

// decode turns n read rows into entries. series, if set, gives each row's
// series (already known to match); otherwise the series column is read.
func (it *iter) decode(n int, series func(int) string) {
	width := len(it.fieldCols)
	// NB: a fresh slab per chunk: consumers may keep Fields past Next.
	// With ReuseFields, two slabs take turns: a chunk's Fields stay valid
	// while the next chunk is read, which covers a merge's one-entry
	// lookahead, and the consumer copies what it keeps.
	var vals []row.Value
	if it.f.ReuseFields {
		if it.slabs[it.flip] == nil {
			it.slabs[it.flip] = make([]row.Value, chunkRows*width)
		}
		vals = it.slabs[it.flip][:n*width]
		it.flip ^= 1
	} else {
		vals = make([]row.Value, n*width)
	}
	it.toValues(vals, n)
	it.out, it.pos = it.out[:0], 0
	for i := 0; i < n; i++ {
		var key string
		if series != nil {
			key = series(i)
		} else {
			if b := it.series.buf[i].ByteArray(); !it.haveCur || string(b) != it.curSeries {
				it.curSeries, it.haveCur = string(b), true
			}
			key = it.curSeries
		}
		e := row.Entry{Series: key, TS: int64(it.ts.bits[i]), Seq: it.seq.bits[i]}
		if it.del != nil && !it.del.null[i] {
			e.Op, e.End = row.Delete, int64(it.del.bits[i])
			if e.End < it.f.Start || e.TS >= it.f.End {
				continue
			}
		} else {
			if e.TS < it.f.Start || e.TS >= it.f.End {
				continue
			}
			e.Fields = vals[i*width : (i+1)*width : (i+1)*width]
		}
		it.out = append(it.out, e)
	}
}

// toValues converts the n read rows' field values into vals, row by row
// (vals[i*width+j] is field j of row i): each column's values are read in
// order, and the slab is written a column at a time. (Writing it a row at a
// time, reading the columns side by side, was measured no faster.)
func (it *iter) toValues(vals []row.Value, n int) {
	width := len(it.fields)
	for j, s := range it.fields {
		k := it.kinds[j]
		switch {
		case s == nil:
			for i := 0; i < n; i++ {
				vals[i*width+j] = row.Value{}
			}
		case s.numeric:
			bits, null := s.bits[:n], s.null[:n]
			for i, b := range bits {
				if null[i] {
					vals[i*width+j] = row.Value{}
				} else {
					vals[i*width+j] = row.NumberValue(k, b)
				}
			}
		default:
			for i := range s.buf[:n] {
				vals[i*width+j] = toValue(s.buf[i], k)
			}
		}
	}
}

func toValue(v parquet.Value, k row.Kind) row.Value {
	if v.IsNull() {
		return row.Value{}
	}
	switch k {
	case row.Float:
		return row.FloatValue(v.Double())
	case row.Int:
		return row.IntValue(v.Int64())
	case row.Uint:
		return row.UintValue(uint64(v.Int64()))
	case row.Bool:
		return row.BoolValue(v.Boolean())
	case row.String:
		return row.StringValue(string(v.ByteArray()))
	}
	return row.Value{}
}
