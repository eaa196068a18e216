// Package merge combines sorted entry streams (memtables and SSTs) into one:
// a k-way merge by (series, ts, seq desc) that keeps only the newest version
// of each (series, ts), by the one merge rule (scan.Latest), and applies
// range tombstones. It is pure logic over row.Iterator, shared by scans,
// flushes and compactions, and holds one entry per input in memory
// whatever the inputs' sizes.
package merge

import (
	"errors"
	"math"
	"sync"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
)

// Options control what the merge emits.
type Options struct {
	// KeepTombstones emits tombstones (for writing an SST that older data
	// may still lie below). Otherwise they only hide rows.
	KeepTombstones bool
	// DropBefore drops puts older than it and tombstones that end before it
	// (TTL). math.MinInt64 keeps everything.
	DropBefore int64
	// ParallelStart positions the inputs on their first entries at once,
	// each on its own goroutine, for inputs that may each wait on a read
	// (SSTs in an object store: a compaction's first row groups). The
	// inputs must not share unsynchronized state. Every goroutine has
	// returned before the first Next does.
	ParallelStart bool
	// DropSeries, if set, drops every entry, put or tombstone, of the
	// series it reports (a compaction's: the rows of a dropped logical
	// table). It is asked once per series.
	DropSeries func(series string) bool
}

// DefaultOptions keeps everything and emits no tombstones.
func DefaultOptions() Options { return Options{DropBefore: math.MinInt64} }

type tomb struct {
	end int64
	seq uint64
}

type iter struct {
	opts     Options
	inputs   []row.Iterator
	heap     []int        // indexes into inputs, a min-heap by current entry
	heads    []*row.Entry // current entry of each input
	cur      row.Entry
	series   string
	inSeries bool
	dropping bool // opts.DropSeries reports series
	tombs    []tomb
	latest   scan.Latest // of the series' puts: the first at a ts decides it
	err      error
	started  bool
}

// New merges inputs. Closing the result closes them.
func New(inputs []row.Iterator, opts Options) row.Iterator {
	return &iter{opts: opts, inputs: inputs, heads: make([]*row.Entry, len(inputs))}
}

func (m *iter) less(i, j int) bool { return row.Less(m.heads[m.heap[i]], m.heads[m.heap[j]]) }

func (m *iter) down(i int) {
	n := len(m.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && m.less(r, l) {
			c = r
		}
		if !m.less(c, i) {
			return
		}
		m.heap[i], m.heap[c] = m.heap[c], m.heap[i]
		i = c
	}
}

func (m *iter) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !m.less(i, p) {
			return
		}
		m.heap[i], m.heap[p] = m.heap[p], m.heap[i]
		i = p
	}
}

func (m *iter) start() {
	m.started = true
	var first []bool // ParallelStart: whether input i has a first entry
	if m.opts.ParallelStart && len(m.inputs) > 1 {
		first = make([]bool, len(m.inputs))
		var wg sync.WaitGroup
		for i, in := range m.inputs {
			wg.Go(func() { first[i] = in.Next() })
		}
		wg.Wait()
	}
	for i, in := range m.inputs {
		if first != nil && first[i] || first == nil && in.Next() {
			m.heads[i] = in.Entry()
			m.heap = append(m.heap, i)
			m.up(len(m.heap) - 1)
		} else if err := in.Err(); err != nil {
			m.err = err
		}
	}
}

// pop copies the smallest entry into m.cur and advances its input.
func (m *iter) pop() bool {
	if len(m.heap) == 0 {
		return false
	}
	i := m.heap[0]
	m.cur = *m.heads[i]
	in := m.inputs[i]
	if in.Next() {
		m.heads[i] = in.Entry()
		m.down(0)
	} else {
		if err := in.Err(); err != nil && m.err == nil {
			m.err = err
		}
		last := len(m.heap) - 1
		m.heap[0] = m.heap[last]
		m.heap = m.heap[:last]
		if last > 0 {
			m.down(0)
		}
	}
	return true
}

func (m *iter) Next() bool {
	if !m.started {
		m.start()
	}
	for m.err == nil && m.pop() {
		e := &m.cur
		if !m.inSeries || e.Series != m.series {
			m.series, m.tombs, m.inSeries = e.Series, m.tombs[:0], true
			m.latest.Reset()
			m.dropping = m.opts.DropSeries != nil && m.opts.DropSeries(e.Series)
		}
		if m.dropping {
			continue
		}
		// Forget tombstones that end before this entry.
		live := m.tombs[:0]
		for _, t := range m.tombs {
			if t.end >= e.TS {
				live = append(live, t)
			}
		}
		m.tombs = live
		if e.Op == row.Delete {
			if e.End < e.TS {
				continue
			}
			m.tombs = append(m.tombs, tomb{end: e.End, seq: e.Seq})
			if m.opts.KeepTombstones && e.End >= m.opts.DropBefore {
				return true
			}
			continue
		}
		if !m.latest.Stands(e.TS) {
			continue // an older version of a (series, ts) already decided
		}
		// Decided by this put, even if dropped below: the older
		// versions are hidden with it.
		if e.TS < m.opts.DropBefore || m.covered(e) {
			continue
		}
		return true
	}
	return false
}

func (m *iter) covered(e *row.Entry) bool {
	for _, t := range m.tombs {
		if t.seq > e.Seq && e.TS <= t.end {
			return true
		}
	}
	return false
}

func (m *iter) Entry() *row.Entry { return &m.cur }
func (m *iter) Err() error        { return m.err }

func (m *iter) Close() error {
	var errs []error
	for _, in := range m.inputs {
		errs = append(errs, in.Close())
	}
	return errors.Join(errs...)
}
