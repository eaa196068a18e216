package sst

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/sst/internal/page"
)

// colStream reads one column chunk a chunk of rows at a time.
//
// A numeric stream (a top-level Double or Int64 column; Reader.numeric)
// reads each row's 64-bit payload and nullness straight from the decoded
// pages into bits and null; any other stream reads parquet.Values into
// buf. Compaction reads tens of millions of numeric values: building a
// parquet.Value for each, only to take its payload back out, cost about 6%
// of a compaction's CPU.
type colStream struct {
	pages   parquet.Pages
	numeric bool
	vr      parquet.ValueReader // !numeric: page's values
	page    parquet.Page        // the page being read
	done    []parquet.Page      // read to the end; buf may still point into them
	buf     []parquet.Value     // !numeric: the values read
	bits    []uint64            // numeric: the payloads read (0 for a null)
	null    []bool              // numeric: which of them are null (unset if noNull)
	pos     int64               // rows consumed in the row group
	noNull  bool                // numeric: the reader never looks at null (a required column's stays unset)
	// decimals: numeric, a float column written as mantissas at scale,
	// which each page's values are turned from into float64 bits.
	decimals bool
	scale    int8

	// numeric: the page's definition levels (nil if required), its
	// non-null payloads, and how many of its rows and payloads are read.
	pdefs      []byte
	pvals      []uint64
	prow, pval int
	prows      int
}

// release hands the pages buf no longer needs back to parquet-go's buffer
// pools (which otherwise allocate every page anew). A page is released
// only at the next read: until then buf's byte-array values point into it.
func (s *colStream) release() {
	for i, p := range s.done {
		parquet.Release(p)
		s.done[i] = nil
	}
	s.done = s.done[:0]
}

// close releases every page and closes the reader.
func (s *colStream) close() {
	s.release()
	if s.page != nil {
		parquet.Release(s.page)
		s.page = nil
	}
	s.pages.Close()
}

// seek positions the stream at row (of its row group).
func (s *colStream) seek(row int64) error {
	if row == s.pos {
		return nil
	}
	if err := s.pages.SeekToRow(row); err != nil {
		return err
	}
	if s.page != nil {
		s.done = append(s.done, s.page)
		s.page = nil
	}
	s.vr, s.pos = nil, row
	return nil
}

// nextPage makes the column's next page the one being read.
func (s *colStream) nextPage() error {
	p, err := s.pages.ReadPage()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	s.page = p
	if !s.numeric {
		s.vr = p.Values()
		return nil
	}
	s.pdefs, s.prow, s.pval, s.prows = p.DefinitionLevels(), 0, 0, int(p.NumRows())
	switch d := p.Data(); d.Kind() {
	case encoding.Double:
		s.pvals = page.FloatBits(d.Double())
	case encoding.Int64:
		s.pvals = page.IntBits(d.Int64())
	default:
		// Not decoded to plain values (say, dictionary-encoded by another
		// writer): go through its values.
		return s.convertPage(p)
	}
	present := int(p.NumValues() - p.NumNulls())
	if s.pdefs != nil && len(s.pdefs) != s.prows || len(s.pvals) < present {
		return fmt.Errorf("%w: page of %d rows has %d levels and %d values", ErrCorrupt, s.prows, len(s.pdefs), len(s.pvals))
	}
	return nil
}

// convertPage sets a numeric stream's page state from p's values.
func (s *colStream) convertPage(p parquet.Page) error {
	vals := make([]parquet.Value, p.NumRows())
	vr, n := p.Values(), 0
	for n < len(vals) {
		k, err := vr.ReadValues(vals[n:])
		n += k
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	s.prows = n
	s.pdefs, s.pvals = make([]byte, n), make([]uint64, 0, n)
	for i, v := range vals[:n] {
		if v.IsNull() {
			continue
		}
		s.pdefs[i] = 1
		if v.Kind() == parquet.Double {
			s.pvals = append(s.pvals, math.Float64bits(v.Double()))
		} else {
			s.pvals = append(s.pvals, uint64(v.Int64()))
		}
	}
	return nil
}

// read reads the column's next n rows: into s.buf, or s.bits and s.null.
func (s *colStream) read(n int) error {
	s.release()
	s.pos += int64(n)
	if s.numeric {
		return s.readNumeric(n)
	}
	if cap(s.buf) < n {
		s.buf = make([]parquet.Value, n)
	}
	s.buf = s.buf[:n]
	got := 0
	for got < n {
		if s.vr == nil {
			if err := s.nextPage(); err != nil {
				return err
			}
		}
		k, err := s.vr.ReadValues(s.buf[got:])
		got += k
		if errors.Is(err, io.EOF) {
			s.done = append(s.done, s.page)
			s.page, s.vr = nil, nil
		} else if err != nil {
			return err
		}
	}
	return nil
}

func (s *colStream) readNumeric(n int) error {
	s.bits = slices.Grow(s.bits[:0], n)[:n]
	if !s.noNull {
		s.null = slices.Grow(s.null[:0], n)[:n]
	}
	for got := 0; got < n; {
		if s.page == nil {
			if err := s.nextPage(); err != nil {
				return err
			}
			if s.noNull && s.pdefs != nil {
				return fmt.Errorf("%w: a required column's page has definition levels", ErrCorrupt)
			}
		}
		k := min(n-got, s.prows-s.prow)
		bits := s.bits[got : got+k]
		if s.pdefs == nil { // required: every row has a value
			if s.decimals {
				// NB: not in the page's buffer, which parquet-go may
				// hand out again on a seek within the page.
				decimal.FloatsInto(bits, s.pvals[s.pval:s.pval+k], s.scale)
			} else {
				copy(bits, s.pvals[s.pval:s.pval+k])
			}
			if !s.noNull {
				clear(s.null[got : got+k])
			}
			s.pval += k
		} else {
			null := s.null[got : got+k]
			vals, v := s.pvals, s.pval
			for i, d := range s.pdefs[s.prow : s.prow+k] {
				if d == 0 {
					bits[i], null[i] = 0, true
					continue
				}
				if v == len(vals) {
					return fmt.Errorf("%w: page has fewer values than its levels say", ErrCorrupt)
				}
				bits[i], null[i] = vals[v], false
				v++
			}
			s.pval = v
			if s.decimals {
				decimal.Floats(bits, s.scale) // the copies, not the page
			}
		}
		s.prow += k
		got += k
		if s.prow == s.prows {
			s.done = append(s.done, s.page)
			s.page = nil
		}
	}
	return nil
}

// appendRequired consumes the next n rows of a required numeric column,
// appending the payloads of rows [lo, hi) of them to dst (decimals as
// float64 bits) straight from the pages.
func (s *colStream) appendRequired(dst []uint64, n, lo, hi int) ([]uint64, error) {
	s.release()
	s.pos += int64(n)
	for got := 0; got < n; {
		if s.page == nil {
			if err := s.nextPage(); err != nil {
				return dst, err
			}
			if s.pdefs != nil {
				return dst, fmt.Errorf("%w: a required column's page has definition levels", ErrCorrupt)
			}
		}
		k := min(n-got, s.prows-s.prow)
		if a, b := max(lo, got), min(hi, got+k); a < b {
			src := s.pvals[s.pval+a-got : s.pval+b-got]
			if s.decimals {
				dst = decimal.AppendFloats(dst, src, s.scale)
			} else {
				dst = append(dst, src...)
			}
		}
		s.pval += k
		s.prow += k
		got += k
		if s.prow == s.prows {
			s.done = append(s.done, s.page)
			s.page = nil
		}
	}
	return dst, nil
}

func (s *colStream) payloads() []uint64 { return s.bits }
