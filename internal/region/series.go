package region

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/memtable"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/sst"
)

// seriesCache holds the series of a region's files: from the series index
// a flush or compaction of this instance wrote, or loaded from the store on
// first use. Files leave it once they are no longer live, and the oldest
// put leave it while it holds more than limit bytes (a file of a million
// series is hundreds of MB decoded; the index is loaded again on its next
// use, one GET).
type seriesCache struct {
	mu      sync.Mutex
	files   map[string]*fileSeries // by file id
	counted map[string]int64       // of bytes, each file's
	order   []string               // ids by put, oldest first (some gone from files)
	bytes   int64
	limit   int64 // 0: no bound
	gauge   func(delta int64)
}

// DefaultSeriesCacheBytes bounds a region's decoded series indexes.
const DefaultSeriesCacheBytes = 256 << 20

// add records the series index of a file this instance wrote. An index
// that does not decode is left to be loaded (and its error reported) on use.
func (c *seriesCache) add(id string, index []byte) {
	x, err := decodeFileSeries(id, index)
	if err != nil {
		return
	}
	c.put(id, x)
}

func (c *seriesCache) put(id string, x *fileSeries) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.files == nil {
		c.files, c.counted = map[string]*fileSeries{}, map[string]int64{}
	}
	if _, again := c.files[id]; again {
		c.dropLocked(id)
		c.order = slices.DeleteFunc(c.order, func(o string) bool { return o == id })
	}
	c.files[id] = x
	c.order = append(c.order, id)
	x.cache.Store(c)
	n := x.size.Load()
	c.counted[id] = n
	c.grow(n)
	c.evictLocked()
}

// grew counts delta more bytes of x, if it is cached (its postings were
// built), and evicts past the limit. (A growth racing x's put may be
// counted twice: the count is an approximation of memory.)
func (c *seriesCache) grew(x *fileSeries, delta int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.files[x.id] != x {
		return
	}
	c.counted[x.id] += delta
	c.grow(delta)
	c.evictLocked()
}

// evictLocked drops the oldest files while the cache is over its limit. A
// file just put or grown leaves too if it alone is over the limit: its
// caller holds it for the look-up at hand.
func (c *seriesCache) evictLocked() {
	for c.limit > 0 && c.bytes > c.limit && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.dropLocked(old)
	}
}

// dropLocked forgets file id.
func (c *seriesCache) dropLocked(id string) {
	if _, ok := c.files[id]; ok {
		delete(c.files, id)
		c.grow(-c.counted[id])
		delete(c.counted, id)
	}
}

func (c *seriesCache) grow(delta int64) {
	c.bytes += delta
	if c.gauge != nil {
		c.gauge(delta)
	}
}

// clear forgets every file (the region closes).
func (c *seriesCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.files {
		c.dropLocked(id)
	}
	c.order = nil
}

func (c *seriesCache) get(id string) (*fileSeries, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	x, ok := c.files[id]
	return x, ok
}

// prune forgets the files that are not live in st. A file written after st
// was taken may be forgotten too: the cache is only ever a copy of the
// store's index objects, so that costs a GET on its next use, nothing more.
func (c *seriesCache) prune(st *manifest.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.files {
		if _, live := st.Files[id]; !live {
			c.dropLocked(id)
		}
	}
	if len(c.order) > 2*len(c.files)+16 { // ids of files gone
		c.order = slices.DeleteFunc(c.order, func(id string) bool { return c.files[id] == nil })
	}
}

// AddSeriesIndex records the series index of file id, which this instance
// wrote (a compaction's output), so listing its series reads nothing. A
// flush does not: an ingest would decode every key of every flush.
func (r *Region) AddSeriesIndex(id string, index []byte) { r.seriesIdx.add(id, index) }

// fileRuns are the rows of file id's series that p's filter and match
// select, from its series index: nil if every series is selected or the
// file has no index. An index that cannot be read only costs the scan its
// help: the scan then filters the file's rows itself.
func (r *Region) fileRuns(ctx context.Context, id string, f manifest.FileMeta, p *scanPlan, match func(string) bool) ([]sst.Run, error) {
	if match == nil || !f.Series {
		return nil, nil
	}
	x, ok := r.seriesIdx.get(id)
	if !ok {
		var err error
		if x, err = r.loadSeries(ctx, id, f); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			r.log.Warn("scan without the file's series index", "file", id, "err", err)
			return nil, nil
		}
	}
	if x.starts == nil {
		return nil, nil // keys read from the SST itself: no row counts
	}
	if rows := x.starts[x.n]; f.Rows > 0 && rows != f.Rows {
		r.log.Warn("series index disagrees with its file; scanning without it", "file", id, "index_rows", rows, "file_rows", f.Rows)
		return nil, nil
	}
	runs := []sst.Run{}
	var keys keyArena
	x.each(p.tags, p.in, func(i int) {
		if k := keys.key(x, i); match(k) {
			runs = append(runs, sst.Run{Key: k, Start: x.starts[i], End: x.starts[i+1]})
		}
	})
	return runs, nil
}

// seriesLoads bounds the series indexes one listing loads at once.
const seriesLoads = 8

// listSeries lists the sorted, distinct series of the memtables and the
// (pinned) files that match f's series filter, with a memtable's series
// only if it has an entry in f's time range.
func (r *Region) listSeries(ctx context.Context, mems []*memtable.Memtable, st *manifest.State, files []string, f memtable.Filter) ([]string, error) {
	xs, err := r.fileIndexes(ctx, st, files)
	if err != nil {
		return nil, fmt.Errorf("region %s: list series: %w", r.id, err)
	}
	var out []string
	for _, mt := range mems {
		out = append(out, mt.Series(f)...)
	}
	var keys keyArena
	for _, x := range xs {
		x.each(f.Tags, f.In, func(i int) {
			if k := keys.key(x, i); f.Series == nil || f.Series(k) {
				out = append(out, k)
			}
		})
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// fileIndexes returns the series indexes of files (pinned, live in st),
// from the cache or loaded, up to seriesLoads at once.
func (r *Region) fileIndexes(ctx context.Context, st *manifest.State, files []string) ([]*fileSeries, error) {
	r.seriesIdx.prune(st)
	xs := make([]*fileSeries, len(files))
	var wg sync.WaitGroup
	errs := make([]error, len(files))
	sem := make(chan struct{}, seriesLoads)
	for i, id := range files {
		if x, ok := r.seriesIdx.get(id); ok {
			xs[i] = x
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			xs[i], errs[i] = r.loadSeries(ctx, id, st.Files[id])
		}()
	}
	wg.Wait()
	return xs, errors.Join(errs...)
}

// loadSeries reads file id's series index and caches it. A file written
// before series indexes existed has none: its series are read from the SST
// itself (the only SST read a listing makes).
func (r *Region) loadSeries(ctx context.Context, id string, f manifest.FileMeta) (*fileSeries, error) {
	fs, err := r.readSeries(ctx, id, f)
	if err != nil {
		return nil, err
	}
	r.seriesIdx.put(id, fs)
	return fs, nil
}

func (r *Region) readSeries(ctx context.Context, id string, f manifest.FileMeta) (*fileSeries, error) {
	if f.Series {
		data, err := r.store.Get(ctx, r.id.SeriesKey(id))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", r.id.SeriesKey(id), err)
		}
		fs, err := decodeFileSeries(id, data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.id.SeriesKey(id), err)
		}
		return fs, nil
	}
	rd, err := r.opts.Cache.Open(ctx, r.store, r.id.SSTKey(id), f.Size)
	if err != nil {
		return nil, err
	}
	// Keys only: scans use a file's row counts only when it has an index
	// (fileRuns).
	b := newFileSeriesBuilder(id, false)
	it := rd.Iter(sst.Filter{Start: AllTime, End: AllTimeEnd, Fields: []string{}})
	last := ""
	for it.Next() {
		if k := it.Entry().Series; b.fs.n == 0 || k != last {
			b.add([]byte(k), 0)
			last = k
		}
	}
	err = it.Err()
	it.Close()
	if err != nil {
		return nil, fmt.Errorf("read the series of %s: %w", r.id.SSTKey(id), err)
	}
	return b.done(), nil
}

// TagValues returns the distinct values, sorted, of tag name in the
// series of the memtables and files that have rows in [start, end) (a
// series is counted if a file or memtable holding it overlaps the range,
// as a listing counts it). Memtables and files answer from their postings
// (a file's built once and kept with its series index); no key is sorted.
// The answer is shared (the region keeps it for the next call, and hands
// the same slice out while nothing changed): read only.
func (r *Region) TagValues(ctx context.Context, name string, start, end int64) ([]string, error) {
	return r.fromPostings(ctx, "v"+name, start, end, func(mt *memtable.Memtable, files []string) []string {
		return mt.TagValues(name, start, end, files) // but the files'
	}, func(fs *fileSeries) []string { return fs.values(name) })
}

// TagValuesWhere is TagValues of the series with tag where: the values
// of one logical table in the physical table that holds many.
func (r *Region) TagValuesWhere(ctx context.Context, name string, where row.Tag, start, end int64) ([]string, error) {
	return r.fromPostings(ctx, "w"+where.Name+"\x00"+where.Value+"\x00"+name, start, end, func(mt *memtable.Memtable, _ []string) []string {
		return mt.TagValuesWhere(name, where, start, end)
	}, func(fs *fileSeries) []string { return fs.valuesWhere(name, where) })
}

// TagNames returns the distinct tag names, sorted, of the series
// TagValues counts.
func (r *Region) TagNames(ctx context.Context, start, end int64) ([]string, error) {
	return r.fromPostings(ctx, "n", start, end, func(mt *memtable.Memtable, _ []string) []string {
		return mt.TagNames(start, end)
	}, func(fs *fileSeries) []string { return slices.Sorted(fs.tagNames()) })
}

// fromPostings collects a set from the postings of the memtables and the
// files with rows in [start, end): each returns its values sorted (a
// file's kept sorted with its postings), and they are merged, the repeats
// between them dropped. (Sorting 100,000 metric names of each file again
// on every request was most of /api/v1/label/__name__/values.) The
// answers to question (what mem and file ask, by name) are kept for the
// next call (mergedFiles), and the whole answer is handed out as kept:
// callers read it, never change it. mem is given the files' merged
// answer, which usually holds most of a memtable's values, and answers
// with the values it does not hold.
func (r *Region) fromPostings(ctx context.Context, question string, start, end int64, mem func(mt *memtable.Memtable, files []string) []string, file func(*fileSeries) []string) ([]string, error) {
	if err := r.usable(); err != nil {
		return nil, err
	}
	if start = max(start, r.ttlCutoff()); end <= start {
		return nil, nil // expired, as a scan's plan finds it
	}
	mems, st, files := r.snapshot(start, end)
	defer r.unpin(files)
	set := slices.Sorted(slices.Values(files)) // a snapshot lists them in no order
	kept := r.merged.get(question, set)
	if kept.files == nil {
		xs, err := r.fileIndexes(ctx, st, files)
		if err != nil {
			return nil, fmt.Errorf("region %s: tags: %w", r.id, err)
		}
		fileRuns := make([][]string, 0, len(xs))
		for _, x := range xs {
			fileRuns = append(fileRuns, file(x))
		}
		kept = mergedSet{files: set, fromFiles: slices.Clip(MergeSorted(fileRuns))}
	}
	runs := make([][]string, 1, 1+len(mems))
	runs[0] = kept.fromFiles
	for _, mt := range mems {
		runs = append(runs, mem(mt, kept.fromFiles))
	}
	if kept.all != nil && sameRuns(kept.mems, runs[1:]) {
		return kept.all, nil
	}
	all := MergeSorted(runs) // the files' answer itself, if the memtables add nothing
	// The memtables' answers are kept only to be recognized: a memtable
	// hands out the same sorted slice while it gains no series (and
	// none, nil, while it adds nothing to the files').
	kept.mems, kept.all = slices.Clone(runs[1:]), slices.Clip(all)
	r.merged.put(question, kept)
	return kept.all, nil
}

// mergeInto merges a few values (sorted) into a long sorted run, both
// without repeats: the stretches of long between them are copied whole,
// each found by a binary search, not value by value (a memtable's new
// metric name among a region's 100,000).
func mergeInto(long, few []string) []string {
	out := make([]string, 0, len(long)+len(few))
	for _, v := range few {
		i, found := slices.BinarySearch(long, v)
		out, long = append(out, long[:i]...), long[i:]
		if !found {
			out = append(out, v)
		}
	}
	return append(out, long...)
}

// sameRuns reports whether a and b are the same slices (not only equal).
func sameRuns(a, b [][]string) bool {
	return slices.EqualFunc(a, b, func(x, y []string) bool {
		return len(x) == len(y) && unsafe.SliceData(x) == unsafe.SliceData(y)
	})
}

// mergedFiles keeps, for each question asked of the postings lately (a
// tag's values, the tag names), the merged answer of the files it was
// asked of, and the whole answer with the memtables'. Files never change,
// so the files' answer holds while the region's files are the same (a
// flush or compaction changes the set, and the next call merges again);
// the whole answer holds while the memtables answer with the same slices.
// At 100,000 metric names in a dozen files, merging was most of a
// /api/v1/label/__name__/values request.
type mergedFiles struct {
	mu   sync.Mutex
	sets map[string]mergedSet
}

type mergedSet struct {
	files     []string // the file ids, sorted
	fromFiles []string // their merged answer
	mems      [][]string
	all       []string // fromFiles merged with mems
}

// maxMergedSets bounds the questions kept (the label names asked lately;
// a full map is emptied).
const maxMergedSets = 16

// get returns what is kept for question over files, sorted (nothing if
// the files differ).
func (m *mergedFiles) get(question string, files []string) mergedSet {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.sets[question]; ok && slices.Equal(e.files, files) {
		return e
	}
	return mergedSet{}
}

func (m *mergedFiles) put(question string, e mergedSet) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sets == nil || len(m.sets) >= maxMergedSets {
		m.sets = map[string]mergedSet{}
	}
	m.sets[question] = e
}

// MergeSorted merges sorted runs into one sorted run without repeats.
// Each step takes the least head and moves every run that starts with it:
// the runs of a label's values mostly hold the same values (every file
// of a region names the same metrics), and moving one run a step (the
// repeats found later) cost a scan of all of them per copy of a value.
// runs itself is left as it was (its caller may keep it: fromPostings).
// Where only one run holds anything, it is the answer itself, not a copy
// (read only, as every answer is): a region's memtables mostly add nothing
// to its files' values (memtable.Memtable.TagValues).
func MergeSorted(runs [][]string) []string {
	runs = slices.DeleteFunc(slices.Clone(runs), func(r []string) bool { return len(r) == 0 })
	if len(runs) > 1 {
		// A steady source's files name the same values: a run equal to
		// the first adds nothing, and comparing the two costs a fraction
		// of merging them (BenchmarkMergeSorted).
		first := runs[0]
		runs = append(runs[:1], slices.DeleteFunc(runs[1:], func(r []string) bool { return slices.Equal(r, first) })...)
	}
	if len(runs) == 1 {
		return runs[0]
	}
	if len(runs) == 2 {
		if a, b := runs[0], runs[1]; len(a) < len(b) && len(a)*bits.Len(uint(len(b))) < len(b) {
			return mergeInto(b, a)
		} else if len(b)*bits.Len(uint(len(a))) < len(a) {
			return mergeInto(a, b)
		}
	}
	n := 0
	for _, r := range runs {
		n = max(n, len(r))
	}
	out := make([]string, 0, n+n/8)
	for len(runs) > 0 {
		v := runs[0][0]
		for _, r := range runs[1:] {
			if r[0] < v {
				v = r[0]
			}
		}
		out = append(out, v)
		live := runs[:0]
		for _, r := range runs {
			for len(r) > 0 && r[0] == v {
				r = r[1:]
			}
			if len(r) > 0 {
				live = append(live, r)
			}
		}
		runs = live
	}
	return out
}
