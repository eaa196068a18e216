package region

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/stratadb/strata/internal/memtable"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/sst"
)

// ScanColumns reads one numeric field (req.Fields names it) of the series
// and time range req selects, and calls emit with each series' values
// column by column, without the row pipeline a Scan goes through.
//
// A series may come in more than one Column (one per file or memtable that
// holds it), oldest input first: where two hold the same ts, the value of
// the later one stands. emit may be called from several goroutines at once
// (parts of a file are read in parallel), never for one series at once.
// A series that two inputs of overlapping sequence ranges hold (a
// compaction's outputs split one series between them; a compaction of
// files that were not neighbours in write order overlaps the files it
// skipped) is merged as rows, as Scan merges them, and comes once. So is
// every series if an input holds a tombstone the range touches. Rows of
// files written before the field existed are left out: they have no value
// of it, and are older than every row that has one.
func (r *Region) ScanColumns(ctx context.Context, req scan.Request, emit func(*scan.Column) error) error {
	if len(req.Fields) != 1 || req.SeriesOnly {
		return fmt.Errorf("%w: a column scan reads exactly one field", scan.ErrInvalid)
	}
	p, err := r.plan(&req)
	if err != nil {
		return err
	}
	kind := p.fields[0].Kind
	switch kind {
	case row.Float, row.Int, row.Uint, row.Bool:
	default:
		r.unpin(p.files)
		return fmt.Errorf("%w: field %q is not numeric", scan.ErrInvalid, p.names[0])
	}
	inputs, contested, ok, err := r.columnInputs(ctx, p)
	if err != nil {
		r.unpin(p.files)
		return fmt.Errorf("region %s: scan: %w", r.id, err)
	}
	if !ok {
		// Every series merged as rows.
		sc, err := r.rows(ctx, p, req.BatchRows, p.files)
		if err != nil {
			return err
		}
		defer sc.Close()
		return ColumnsOf(&scanIter{s: sc, i: -1}, kind, emit)
	}
	defer r.unpin(p.files)
	match := p.match
	if len(contested) > 0 {
		q := *p
		q.match = func(k string) bool { return contested[k] }
		sc, err := r.rows(ctx, &q, req.BatchRows, nil)
		if err != nil {
			return err
		}
		err = ColumnsOf(&scanIter{s: sc, i: -1}, kind, emit)
		sc.Close()
		if err != nil {
			return err
		}
		match = func(k string) bool { return !contested[k] && (p.match == nil || p.match(k)) }
	}
	counted := func(c *scan.Column) error {
		r.opts.Metrics.ScanRows.Add(float64(len(c.TS)))
		return emit(c)
	}
	for _, in := range inputs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("region %s: scan: %w", r.id, err)
		}
		if in.mem != nil {
			it := in.mem.Iter(p.memFilter(match, p.ordinals))
			if err := ColumnsOf(it, kind, counted); err != nil {
				return err
			}
			continue
		}
		if err := readColumns(ctx, in, p, kind, counted); err != nil {
			return fmt.Errorf("region %s: scan: %w", r.id, err)
		}
	}
	return nil
}

// columnInput is a memtable or a file a column scan reads, and the range of
// its rows' sequence numbers.
type columnInput struct {
	lo, hi uint64
	mem    *memtable.Memtable
	file   *sst.Reader
	runs   []sst.Run
	keys   []string // the series it holds that the scan selects, sorted (once known)
	// share is the part of the file's rows in the scan's time range,
	// taking them as spread evenly over the file's [MinTS, MaxTS].
	share float64
}

// columnInputs lists the inputs of p that hold rows for its field, oldest
// first, and the contested series: those that two inputs with overlapping
// sequence ranges both hold, whose rows only a merge by sequence number can
// order; the inputs' runs leave them out. It reports whether the inputs
// can be read column by column at all: no tombstone in range, every file
// with a series index and its field in 64-bit numbers.
func (r *Region) columnInputs(ctx context.Context, p *scanPlan) ([]columnInput, map[string]bool, bool, error) {
	var inputs []columnInput
	mf := p.memFilter(p.match, nil)
	for _, mt := range p.mems {
		st := mt.Stats()
		if st.Entries == 0 || st.MaxTS < p.start || st.MinTS >= p.end {
			continue
		}
		if st.Deletes > 0 {
			return nil, nil, false, nil
		}
		inputs = append(inputs, columnInput{lo: st.MinSeq, hi: st.MaxSeq, mem: mt})
	}
	match := p.match
	if match == nil {
		match = func(string) bool { return true }
	}
	for _, id := range p.files {
		f := p.state.Files[id]
		runs, err := r.fileRuns(ctx, id, f, p, match)
		if err != nil {
			return nil, nil, false, err
		}
		if runs == nil {
			return nil, nil, false, nil // no series index
		}
		if len(runs) == 0 {
			continue
		}
		rd, err := r.opts.Cache.Open(ctx, r.store, r.id.SSTKey(id), f.Size)
		if err != nil {
			return nil, nil, false, err
		}
		if rd.Tombstones(p.start, p.end) {
			return nil, nil, false, nil
		}
		k, has := rd.FieldKind(p.names[0])
		if !has {
			continue // written before the field existed: no values
		}
		lo, hi, known := rd.SeqRange()
		if !known || k != p.fields[0].Kind || !rd.NumericField(p.names[0]) {
			return nil, nil, false, nil
		}
		inputs = append(inputs, columnInput{lo: lo, hi: hi, file: rd, runs: runs, share: timeShare(f.MinTS, f.MaxTS, p.start, p.end)})
	}
	slices.SortFunc(inputs, func(a, b columnInput) int { return cmp.Compare(a.lo, b.lo) })
	keys := func(in *columnInput) []string {
		if in.keys == nil {
			if in.mem != nil {
				in.keys = in.mem.Series(mf)
				slices.Sort(in.keys)
			} else {
				in.keys = make([]string, len(in.runs))
				for i, r := range in.runs {
					in.keys[i] = r.Key
				}
			}
		}
		return in.keys
	}
	contested := map[string]bool{}
	for i := range inputs {
		for j := i + 1; j < len(inputs) && inputs[j].lo <= inputs[i].hi; j++ {
			a, b := keys(&inputs[i]), keys(&inputs[j])
			for x, y := 0, 0; x < len(a) && y < len(b); {
				switch c := cmp.Compare(a[x], b[y]); {
				case c < 0:
					x++
				case c > 0:
					y++
				default:
					contested[a[x]] = true
					x++
					y++
				}
			}
		}
	}
	if len(contested) > 0 {
		for i := range inputs {
			inputs[i].runs = slices.DeleteFunc(slices.Clone(inputs[i].runs), func(r sst.Run) bool { return contested[r.Key] })
		}
	}
	return inputs, contested, true, nil
}

// columnWorkers is how many parts of a file a column scan reads at once:
// decoding is CPU work, and a file in the object store is read in ranges,
// one request after another within a part.
var columnWorkers = max(4, runtime.GOMAXPROCS(0))

// minPartRows is the fewest rows worth a part of their own (a variable
// for tests).
var minPartRows int64 = 64 << 10

// readColumns reads a file input's runs in up to columnWorkers parts of
// whole series at once. emit may be called from several parts at once,
// but a series is in one part only.
func readColumns(ctx context.Context, in columnInput, p *scanPlan, kind row.Kind, emit func(*scan.Column) error) error {
	parts := splitRuns(in.runs, columnWorkers, leastPartRows(in.file.Ranged(), in.share))
	errs := make([]error, len(parts))
	var failed atomic.Bool
	var wg sync.WaitGroup
	for i, part := range parts {
		read := func() {
			col := scan.Column{Kind: kind}
			errs[i] = in.file.ReadColumns(part, p.names[0], p.start, p.end, func(c *scan.SeriesColumn) error {
				if failed.Load() {
					return errStopped
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				col.SeriesColumn = *c
				return emit(&col)
			})
			if errs[i] != nil {
				failed.Store(true)
			}
		}
		if len(parts) == 1 {
			read()
			break
		}
		wg.Go(read)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, errStopped) {
			return err
		}
	}
	return nil
}

// leastPartRows is the fewest of a file's rows (its series' runs) worth a
// part of a column scan of their own, for a file read in ranges or not,
// share of whose rows are in the scan's time range. A part is worth its
// goroutine for the rows it reads, those in the range: an hour of a few
// hosts in a 12-hour file is read in one part, without waking another
// thread (docs/performance.md, "A column scan's parts").
func leastPartRows(ranged bool, share float64) int64 {
	least := minPartRows
	if ranged {
		// Each part waits on its own requests: worth it for fewer rows.
		least = max(1, least/16)
	}
	if share > 0 && share < 1 {
		least = int64(min(float64(least)/share, 1<<62))
	}
	return least
}

// timeShare is the part of [minTS, maxTS] (a file's timestamps, both
// ends in) that [start, end) covers: 1 if it covers it all or the file
// has one timestamp.
func timeShare(minTS, maxTS, start, end int64) float64 {
	if maxTS <= minTS {
		return 1
	}
	// In floats: an estimate, and no end of the int64 range overflows.
	lo, hi := max(float64(minTS), float64(start)), min(float64(maxTS)+1, float64(end))
	if hi <= lo {
		return 0
	}
	return min(1, (hi-lo)/(float64(maxTS)+1-float64(minTS)))
}

// errStopped ends a part because another part failed.
var errStopped = errors.New("region: stopped: another part of the scan failed")

// splitRuns cuts runs (sorted) into at most n parts of about equal rows,
// at series boundaries, none under minRows rows unless it is the only one.
func splitRuns(runs []sst.Run, n int, minRows int64) [][]sst.Run {
	var total int64
	for _, r := range runs {
		total += r.End - r.Start
	}
	n = int(max(1, min(int64(n), total/max(1, minRows))))
	if n == 1 {
		return [][]sst.Run{runs}
	}
	parts := make([][]sst.Run, 0, n)
	per := (total + int64(n) - 1) / int64(n)
	var at int64
	from := 0
	for i, r := range runs {
		at += r.End - r.Start
		if at >= per && len(parts) < n-1 {
			parts = append(parts, runs[from:i+1])
			from, at = i+1, 0
		}
	}
	if from < len(runs) {
		parts = append(parts, runs[from:])
	}
	return parts
}

// ColumnsOf calls emit with the values of field 0 of it's puts, a Column
// per run of entries of one series, each (series, ts) once: the first of
// its entries, which a merge's or a memtable's order makes the newest
// (scan.Latest).
// Tombstones are skipped: it is for inputs that hold none, or whose
// tombstones a merge applied.
func ColumnsOf(it row.Iterator, kind row.Kind, emit func(*scan.Column) error) error {
	col := scan.Column{Kind: kind}
	nulls := false
	var latest scan.Latest
	flush := func() error {
		if len(col.TS) == 0 {
			return nil
		}
		if !nulls {
			col.Null = nil
		}
		err := emit(&col)
		col.TS, col.Bits, col.Null, nulls = col.TS[:0], col.Bits[:0], col.Null[:0], false
		return err
	}
	for it.Next() {
		e := it.Entry()
		if e.Op != row.Put {
			continue
		}
		if e.Series != col.Series {
			if err := flush(); err != nil {
				return err
			}
			col.Series = e.Series
			latest.Reset()
		}
		if !latest.Stands(e.TS) {
			continue // an older version
		}
		v := e.Field(0)
		col.TS = append(col.TS, e.TS)
		col.Bits = append(col.Bits, v.Bits())
		col.Null = append(col.Null, v.IsNull())
		nulls = nulls || v.IsNull()
	}
	if err := it.Err(); err != nil {
		return err
	}
	return flush()
}

// scanIter walks a Scanner's batches as a row.Iterator.
type scanIter struct {
	s     *Scanner
	batch []row.Entry
	i     int
}

func (it *scanIter) Next() bool {
	it.i++
	for it.i >= len(it.batch) {
		if !it.s.Next() {
			return false
		}
		it.batch, it.i = it.s.Batch(), 0
	}
	return true
}

func (it *scanIter) Entry() *row.Entry { return &it.batch[it.i] }
func (it *scanIter) Err() error        { return it.s.Err() }
func (it *scanIter) Close() error      { return nil }
