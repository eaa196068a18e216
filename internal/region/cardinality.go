package region

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/memtable"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/sst"
)

// Cardinality counts the distinct series of the memtables and files with
// rows in [start, end) (a series counts if a file or memtable holding it
// overlaps the range, as TagValues counts it) by their tags, grouped by
// their catalog.TableTag's value ("" for series without one). It reads
// the files' series indexes and the memtables' keys, never a row: a series
// in several files, or in a file and a memtable, counts once. The answer
// is handed out as kept: read only.
//
// The counts are kept for the next call. While the files are the same
// and every memtable's rows are in the range (the usual question is of
// all time), the next call counts only the series the memtables gained
// since (each looked up in the files' postings and the other memtables):
// a steady source's new series cost their own look-ups, not a recount of
// a million. A flush keeps them (its file holds its memtable's series);
// another change of files (a compaction, TTL expiry) or a memtable with
// rows outside the range counts all again: every key listed, sorted and
// decoded, in the background after such a change while the region was
// asked lately (warmCardinality).
func (r *Region) Cardinality(ctx context.Context, start, end int64) (map[string]*scan.Cardinality, error) {
	r.cardinality.askedAt.Store(time.Now().UnixNano())
	return r.count(ctx, start, end)
}

// count is Cardinality, without marking the region as asked.
func (r *Region) count(ctx context.Context, start, end int64) (map[string]*scan.Cardinality, error) {
	if err := r.usable(); err != nil {
		return nil, err
	}
	if start = max(start, r.ttlCutoff()); end <= start {
		return map[string]*scan.Cardinality{}, nil // expired, as a scan's plan finds it
	}
	mems, st, files := r.snapshot(start, end)
	defer r.unpin(files)
	slices.Sort(files)
	within := memsWithin(mems, start, end)
	k := &r.cardinality
	k.mu.Lock()
	defer k.mu.Unlock()
	if within && k.groups != nil {
		k.advance(files, mems)
	}
	if within && k.groups != nil && slices.Equal(k.files, files) {
		if groups, ok, err := r.countAdded(ctx, st, files, mems); err != nil || ok {
			return groups, err
		}
	}
	// Each memtable's series below its count now are in the listing (it
	// may hold more: below, they are counted up to its length then).
	listed := make([]memCounted, len(mems))
	for i, mt := range mems {
		listed[i] = memCounted{mt: weak.Make(mt), n: mt.SeriesLen()}
	}
	k.recounts++
	keys, err := r.listSeries(ctx, mems, st, files, memtable.Filter{Start: start, End: end})
	if err != nil {
		return nil, err
	}
	c := scan.NewCounter(false)
	for _, key := range keys {
		if err := c.Add(key); err != nil {
			return nil, fmt.Errorf("region %s: cardinality: %w", r.id, err)
		}
	}
	// A memtable may have gained series while it was listed: those past
	// its count above are in keys or not. Count each memtable up to its
	// length now, adding those the listing missed, so the kept counts
	// hold each once (countAdded takes the series past these as new).
	var missed map[string]struct{}
	for i, mt := range mems {
		n := mt.SeriesLen()
		for _, key := range mt.SeriesKeys(listed[i].n, n) {
			if _, found := slices.BinarySearch(keys, key); found {
				continue
			}
			if _, dup := missed[key]; dup {
				continue
			}
			if missed == nil {
				missed = map[string]struct{}{}
			}
			missed[key] = struct{}{}
			if err := c.Add(key); err != nil {
				return nil, fmt.Errorf("region %s: cardinality: %w", r.id, err)
			}
		}
		listed[i].n = n
	}
	for _, id := range files {
		f := st.Files[id]
		c.Bound(f.MinTS, f.MaxTS)
	}
	for _, mt := range mems {
		if s := mt.Stats(); s.Entries > 0 {
			c.Bound(s.MinTS, s.MaxTS)
		}
	}
	if within && len(files) == len(st.Files) {
		// The counts of all the region's files and memtables, whatever
		// the range that selected them: kept. (The counts of a range that
		// left a file out or cut a memtable's rows are not: the usual
		// question is of all data, which they would only make recount.)
		k.files, k.groups, k.mems = files, c.Groups, listed
	}
	return c.Groups, nil
}

// memsWithin reports whether every row of mems is in [start, end): if
// not, some of their series may be out of the range.
func memsWithin(mems []*memtable.Memtable, start, end int64) bool {
	for _, mt := range mems {
		if s := mt.Stats(); s.Entries > 0 && (s.MinTS < start || s.MaxTS >= end) {
			return false
		}
	}
	return true
}

// catchUpCardinality brings the kept counts up to the memtables' series
// now, if that takes look-ups of the series added since (countAdded) and
// no count is running. A flush calls it before its commit: its memtable is
// then counted whole, and its file takes the memtable's place in the
// counts (noteFlush, advance) instead of a recount of every key.
func (r *Region) catchUpCardinality(ctx context.Context) {
	k := &r.cardinality
	if !k.recent() {
		return
	}
	start := r.ttlCutoff()
	mems, st, files := r.snapshot(start, AllTimeEnd)
	defer r.unpin(files)
	if !k.mu.TryLock() {
		return // a count runs: it or the next request counts
	}
	defer k.mu.Unlock()
	if k.groups == nil || !memsWithin(mems, start, AllTimeEnd) || len(files) != len(st.Files) {
		return
	}
	slices.Sort(files)
	for _, id := range files {
		if _, ok := r.seriesIdx.get(id); !ok {
			return // look-ups would read series indexes: not in a flush
		}
	}
	k.advance(files, mems)
	if slices.Equal(k.files, files) {
		// A failure leaves the kept counts as they were.
		_, _, _ = r.countAdded(ctx, st, files, mems)
	}
}

// countAdded brings the kept counts up to the memtables' series: those
// added since they were counted, each unless a file or another memtable
// (below its count) holds it. ok is false if the memtables are not those
// counted (then all must be counted again). The caller holds the kept
// counts' lock.
func (r *Region) countAdded(ctx context.Context, st *manifest.State, files []string, mems []*memtable.Memtable) (groups map[string]*scan.Cardinality, ok bool, err error) {
	k := &r.cardinality
	done := make([]int, len(mems))
	for i, mt := range mems {
		j := slices.IndexFunc(k.mems, func(c memCounted) bool { return c.mt.Value() == mt })
		if j >= 0 {
			done[i] = k.mems[j].n
		}
	}
	for _, c := range k.mems {
		if mt := c.mt.Value(); c.n > 0 && !slices.Contains(mems, mt) {
			return nil, false, nil // a memtable gone, but not to a file counted
		}
	}
	var added []string
	var from []int
	upTo := slices.Clone(done) // each memtable's series counted when this is done
	for i, mt := range mems {
		if n := mt.SeriesLen(); n > done[i] {
			added = append(added, mt.SeriesKeys(done[i], n)...)
			for range n - done[i] {
				from = append(from, i)
			}
			upTo[i] = n
		}
	}
	if len(added) == 0 {
		return bounded(k.groups, mems), true, nil
	}
	var counted int64
	for _, g := range k.groups {
		counted += g.Series
	}
	if int64(len(added)) > max(counted/8, 10_000) {
		// Looking each up costs more than listing them all (a new
		// memtable that took over every series of the one before).
		return nil, false, nil
	}
	xs, err := r.fileIndexes(ctx, st, files)
	if err != nil {
		return nil, false, fmt.Errorf("region %s: cardinality: %w", r.id, err)
	}
	// The counts handed out are read only: the new ones share their
	// pairs, and count the new series' apart.
	c := scan.NewCounter(false)
	for v, g := range k.groups {
		c.Groups[v] = g.Grown()
	}
	var tags []row.Tag
	for a, key := range added {
		if tags, err = row.DecodeSeries(tags[:0], key); err != nil {
			return nil, false, fmt.Errorf("region %s: cardinality: series key %q: %w", r.id, key, err)
		}
		held := slices.ContainsFunc(xs, func(x *fileSeries) bool { return x.contains(key, tags) })
		for i, mt := range mems {
			if held {
				break
			}
			if i != from[a] {
				o := mt.Ordinal(key)
				held = o >= 0 && o < done[i]
			}
		}
		if !held {
			if err := c.Add(key); err != nil {
				return nil, false, fmt.Errorf("region %s: cardinality: %w", r.id, err)
			}
		}
		done[from[a]]++ // the keys of a memtable come in its order
	}
	for _, mt := range mems {
		if s := mt.Stats(); s.Entries > 0 {
			c.Bound(s.MinTS, s.MaxTS)
		}
	}
	k.mems = k.mems[:0]
	for i, mt := range mems {
		k.mems = append(k.mems, memCounted{mt: weak.Make(mt), n: upTo[i]})
	}
	k.groups = c.Groups
	return c.Groups, true, nil
}

// bounded returns groups with their time bounds widened to the
// memtables' rows now (rows of series counted before move them too):
// copies, the kept counts left as they are.
func bounded(groups map[string]*scan.Cardinality, mems []*memtable.Memtable) map[string]*scan.Cardinality {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, mt := range mems {
		if s := mt.Stats(); s.Entries > 0 {
			lo, hi = min(lo, s.MinTS), max(hi, s.MaxTS)
		}
	}
	if lo > hi {
		return groups
	}
	out := make(map[string]*scan.Cardinality, len(groups))
	for v, g := range groups {
		cp := *g
		cp.MinTS, cp.MaxTS = min(cp.MinTS, lo), max(cp.MaxTS, hi)
		out[v] = &cp
	}
	return out
}

// keptCardinality keeps a region's last counts: of its files (their ids,
// sorted) and of each memtable's first n series.
type keptCardinality struct {
	mu     sync.Mutex
	files  []string
	mems   []memCounted
	groups map[string]*scan.Cardinality // nil: none kept
	// recounts counts the counts that listed every key (tests read it).
	recounts int

	// askedAt is when the region was last asked for counts (Unix ns, 0:
	// never). While that is recent, flushes note their files and other
	// changes of files count again in the background (warmCardinality);
	// warming says such a count runs.
	askedAt atomic.Int64
	warming atomic.Bool
	// flushed maps a file a flush made to the memtable it holds the
	// series of (noteFlush), so that the kept counts outlive the flush
	// (advance). Its own lock: a flush never waits for a count.
	fmu     sync.Mutex
	flushed map[string]flushedFrom
}

// flushedFrom is the memtable a file was flushed from, and its series.
type flushedFrom struct {
	mt     weak.Pointer[memtable.Memtable]
	series int
}

// warmFor is how long after a request for counts a region keeps them
// current as its files change: a dashboard polling the counts finds them
// kept; a region nobody asks stops paying for them.
const warmFor = time.Hour

// recent reports whether the region was asked for counts within warmFor.
func (k *keptCardinality) recent() bool {
	at := k.askedAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < warmFor
}

// maxFlushedNotes bounds keptCardinality.flushed: notes no count used
// (the region is not asked again) are dropped past it.
const maxFlushedNotes = 64

// noteFlush records that file id holds the series of memtable mt, all
// of them and no other: its series count (each of its series is one of
// mt's) and its time bounds are mt's.
func (k *keptCardinality) noteFlush(id string, mt *memtable.Memtable, st memtable.Stats, meta sst.Meta) {
	if !k.recent() || meta.Series != st.Series || meta.MinTS != st.MinTS || meta.MaxTS != st.MaxTS {
		return // expired rows dropped, or never asked: counted again if asked
	}
	k.fmu.Lock()
	defer k.fmu.Unlock()
	if k.flushed == nil || len(k.flushed) >= maxFlushedNotes {
		k.flushed = map[string]flushedFrom{}
	}
	k.flushed[id] = flushedFrom{mt: weak.Make(mt), series: st.Series}
}

// advance brings the kept counts past the flushes since they were kept,
// if files (sorted) differ from theirs only by files flushed from
// memtables counted whole: such a file holds the series its memtable
// held, so the counts stay, and the memtable leaves the counted ones once
// gone from mems. Anything else (a file gone: a compaction, a drop; a
// file of a memtable counted in part) leaves them as they are, to be
// counted again. The caller holds k.mu, and k.groups is not nil.
func (k *keptCardinality) advance(files []string, mems []*memtable.Memtable) {
	if slices.Equal(k.files, files) && !slices.ContainsFunc(k.mems, func(c memCounted) bool { return !slices.Contains(mems, c.mt.Value()) }) {
		return
	}
	k.fmu.Lock()
	defer k.fmu.Unlock()
	whole := func(f string) (int, bool) { // the counted memtable f was flushed from
		src, ok := k.flushed[f]
		if !ok {
			return -1, false
		}
		j := slices.IndexFunc(k.mems, func(c memCounted) bool { return c.mt == src.mt })
		return j, j >= 0 && k.mems[j].n == src.series
	}
	for _, f := range k.files {
		if _, found := slices.BinarySearch(files, f); !found {
			return
		}
	}
	for _, f := range files {
		if _, found := slices.BinarySearch(k.files, f); !found {
			if _, ok := whole(f); !ok {
				return
			}
		}
	}
	k.files = files
	// The memtables gone from mems leave the counted ones if flushed to a
	// file counted now; any other keeps its place (countAdded then counts
	// all again).
	for _, f := range files {
		if j, ok := whole(f); ok && !slices.Contains(mems, k.mems[j].mt.Value()) {
			k.mems = slices.Delete(k.mems, j, j+1)
		}
	}
	for f, src := range k.flushed {
		if !slices.ContainsFunc(k.mems, func(c memCounted) bool { return c.mt == src.mt }) {
			delete(k.flushed, f)
		}
	}
}

type memCounted struct {
	mt weak.Pointer[memtable.Memtable] // kept counts keep no flushed memtable
	n  int
}

// contains reports whether the file holds the series of key, whose tags
// are tags: among the series of its tag with the fewest, one with key.
func (fs *fileSeries) contains(key string, tags []row.Tag) bool {
	var fewest []int32
	for i, t := range tags {
		ords := fs.lookup(t.Name, t.Value)
		if len(ords) == 0 {
			return false
		}
		if i == 0 || len(ords) < len(fewest) {
			fewest = ords
		}
	}
	if len(tags) == 0 {
		fewest = make([]int32, fs.n)
		for i := range fewest {
			fewest[i] = int32(i)
		}
	}
	var buf []byte
	for _, o := range fewest {
		if buf = fs.appendKey(buf[:0], int(o)); string(buf) == key {
			return true
		}
	}
	return false
}
