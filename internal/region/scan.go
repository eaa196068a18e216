package region

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/memtable"
	"github.com/stratadb/strata/internal/merge"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/sst"
)

// seriesFilter is req's tag filter (nil: every series).
func seriesFilter(req *scan.Request) func(string) bool {
	if len(req.Tags) == 0 && len(req.In) == 0 {
		return nil
	}
	tags := slices.Clone(req.Tags)
	in := make([]struct {
		name   string
		values map[string]bool
	}, len(req.In))
	for i, f := range req.In {
		in[i].name, in[i].values = f.Name, map[string]bool{}
		for _, v := range f.Values {
			in[i].values[v] = true
		}
	}
	return func(key string) bool {
		for _, t := range tags {
			if row.SeriesTag(key, t.Name) != t.Value {
				return false
			}
		}
		for _, f := range in {
			if !f.values[row.SeriesTag(key, f.name)] {
				return false
			}
		}
		return true
	}
}

// snapshot takes the memtables and the files overlapping [start, end)
// together, and pins the files (Scanner.Close unpins them).
func (r *Region) snapshot(start, end int64) ([]*memtable.Memtable, *manifest.State, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	mems := append(slices.Clone(r.immutable), r.active)
	state := r.man.View() // read only
	var files []string
	for id, f := range state.Files {
		if f.MaxTS >= start && f.MinTS < end {
			files = append(files, id)
			r.pins[id]++
		}
	}
	return mems, state, files
}

// AllTime is the widest scan range.
const AllTime, AllTimeEnd = math.MinInt64, math.MaxInt64

// Scanner streams a scan's result in batches of rows ordered by (series,
// ts). It reads from a snapshot taken when the scan began, and pins the SSTs
// of that snapshot so GC does not delete them until Close.
type Scanner struct {
	r      *Region
	ctx    context.Context // the scan's: checked at every batch
	fields []schema.Field
	it     row.Iterator
	pinned []string
	batch  []row.Entry
	size   int
	last   int // rows of the last batch: the next is allocated at that size
	err    error
	closed bool
}

// scanPlan is what a scan reads: the fields, the series filter, the time
// range (after TTL) and a snapshot of memtables and pinned files.
type scanPlan struct {
	fields     []schema.Field
	ordinals   []int    // the fields' ordinals in the region's schema
	names      []string // the fields' names
	match      func(string) bool
	tags       []row.Tag   // match's filters, which files' postings narrow
	in         []row.TagIn // (fileRuns)
	start, end int64
	mems       []*memtable.Memtable
	state      *manifest.State
	files      []string // pinned: unpin them when done
}

// memFilter is the memtable filter of the plan's series (match, a
// restriction of p.match), time range and fields.
func (p *scanPlan) memFilter(match func(string) bool, fields []int) memtable.Filter {
	return memtable.Filter{Series: match, Tags: p.tags, In: p.in, Start: p.start, End: p.end, Fields: fields}
}

// plan checks req and takes the snapshot it reads, pinning its files.
func (r *Region) plan(req *scan.Request) (*scanPlan, error) {
	if err := r.usable(); err != nil {
		return nil, err
	}
	if req.End <= req.Start {
		return nil, fmt.Errorf("%w: scan range [%d, %d) is empty", scan.ErrInvalid, req.Start, req.End)
	}
	if req.BatchRows <= 0 {
		req.BatchRows = 4096
	}
	sch := r.Schema()
	p := &scanPlan{}
	if req.Fields == nil {
		p.fields = sch.Fields()
		p.ordinals = make([]int, len(p.fields))
		for i := range p.ordinals {
			p.ordinals[i] = i
		}
	} else {
		for _, name := range req.Fields {
			ord, ok := sch.FieldOrdinal(name)
			if !ok {
				return nil, fmt.Errorf("%w: unknown field %q", scan.ErrInvalid, name)
			}
			p.ordinals = append(p.ordinals, ord)
			p.fields = append(p.fields, sch.Fields()[ord])
		}
	}
	p.names = make([]string, len(p.fields))
	for i, f := range p.fields {
		p.names[i] = f.Name
	}
	p.match, p.tags, p.in = seriesFilter(req), req.Tags, req.In
	p.start, p.end = max(req.Start, r.ttlCutoff()), req.End
	if p.start >= p.end {
		p.start = p.end - 1 // everything expired: an empty but valid scan
	}
	p.mems, p.state, p.files = r.snapshot(p.start, p.end)
	slices.Sort(p.files)
	return p, nil
}

// Scan starts a scan.
func (r *Region) Scan(ctx context.Context, req scan.Request) (*Scanner, error) {
	p, err := r.plan(&req)
	if err != nil {
		return nil, err
	}
	if !req.SeriesOnly {
		return r.rows(ctx, p, req.BatchRows, p.files)
	}
	s := &Scanner{r: r, ctx: ctx, pinned: p.files, size: req.BatchRows}
	keys, err := r.listSeries(ctx, p.mems, p.state, p.files, p.memFilter(p.match, nil))
	if err != nil {
		s.Close()
		return nil, err
	}
	entries := make([]row.Entry, len(keys))
	for i, k := range keys {
		entries[i].Series = k
	}
	s.it = &row.SliceIter{Entries: entries}
	return s, nil
}

// rows starts a scan of p's rows, merged. The Scanner takes over the pins
// of pinned, which its Close (or a failure here) releases.
func (r *Region) rows(ctx context.Context, p *scanPlan, batchRows int, pinned []string) (*Scanner, error) {
	s := &Scanner{r: r, ctx: ctx, fields: p.fields, pinned: pinned, size: batchRows}
	inputs := make([]row.Iterator, 0, len(p.mems)+len(p.files))
	for _, mt := range p.mems {
		inputs = append(inputs, mt.Iter(p.memFilter(p.match, p.ordinals)))
	}
	for _, id := range p.files {
		f := p.state.Files[id]
		runs, err := r.fileRuns(ctx, id, f, p, p.match)
		if err != nil {
			s.Close()
			for _, in := range inputs {
				in.Close()
			}
			return nil, fmt.Errorf("region %s: scan: %w", r.id, err)
		}
		if runs != nil && len(runs) == 0 {
			continue // no series of the file matches: not opened
		}
		rd, err := r.opts.Cache.Open(ctx, r.store, r.id.SSTKey(id), f.Size)
		if err != nil {
			s.Close()
			for _, in := range inputs {
				in.Close()
			}
			return nil, fmt.Errorf("region %s: scan: %w", r.id, err)
		}
		inputs = append(inputs, rd.Iter(sst.Filter{Series: p.match, Runs: runs, Start: p.start, End: p.end, Fields: p.names}))
	}
	s.it = merge.New(inputs, merge.Options{DropBefore: p.start})
	return s, nil
}

// Fields describes the positions of each row's Fields.
func (s *Scanner) Fields() []schema.Field { return s.fields }

// Next reads the next batch. It returns false at the end or on error.
func (s *Scanner) Next() bool {
	if s.closed || s.err != nil {
		return false
	}
	// NB: cached SST readers read through no scan's context, so a
	// cancelled scan stops here, at the next batch.
	if err := s.ctx.Err(); err != nil {
		s.err = fmt.Errorf("region %s: scan: %w", s.r.id, err)
		return false
	}
	if s.batch == nil {
		// Batch hands each batch to the caller, so each is new: sized as
		// the last one was, rather than grown by doubling.
		s.batch = make([]row.Entry, 0, s.last)
	}
	s.batch = s.batch[:0]
	for len(s.batch) < s.size && s.it.Next() {
		s.batch = append(s.batch, *s.it.Entry())
	}
	s.last = len(s.batch)
	if err := s.it.Err(); err != nil {
		s.err = fmt.Errorf("region %s: scan: %w", s.r.id, err)
		return false
	}
	s.r.opts.Metrics.ScanRows.Add(float64(len(s.batch)))
	return len(s.batch) > 0
}

// Batch is the current batch. Rows and their Fields stay valid after Next.
func (s *Scanner) Batch() []row.Entry {
	out := s.batch
	s.batch = nil
	return out
}

// Err is the error that ended the scan, if any.
func (s *Scanner) Err() error { return s.err }

// Close releases the scan's pins.
func (s *Scanner) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	if s.it != nil {
		err = s.it.Close()
	}
	s.r.unpin(s.pinned)
	return err
}

// unpin releases the pins snapshot took on files.
func (r *Region) unpin(files []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range files {
		if r.pins[id]--; r.pins[id] <= 0 {
			delete(r.pins, id)
		}
	}
}

// Pinned reports whether an in-flight scan reads file id.
func (r *Region) Pinned(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pins[id] > 0
}
