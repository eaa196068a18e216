package region

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/memtable"
	"github.com/stratadb/strata/internal/sst"
)

// seriesCache holds the series of a region's files: from the series index
// a flush or compaction of this instance wrote, or loaded from the store on
// first use. Files leave it once they are no longer live.
type seriesCache struct {
	mu    sync.Mutex
	files map[string]sst.SeriesIndex // by file id
}

// add records the series index of a file this instance wrote. An index
// that does not decode is left to be loaded (and its error reported) on use.
func (c *seriesCache) add(id string, index []byte) {
	x, err := sst.DecodeSeriesIndex(index)
	if err != nil {
		return
	}
	c.put(id, x)
}

func (c *seriesCache) put(id string, x sst.SeriesIndex) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.files == nil {
		c.files = map[string]sst.SeriesIndex{}
	}
	c.files[id] = x
}

func (c *seriesCache) get(id string) (sst.SeriesIndex, bool) {
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
			delete(c.files, id)
		}
	}
}

// AddSeriesIndex records the series index of file id, which this instance
// wrote (a compaction's output), so listing its series reads nothing.
func (r *Region) AddSeriesIndex(id string, index []byte) { r.seriesIdx.add(id, index) }

// fileRuns are the rows of file id's series that match selects, from its
// series index: nil if every series is selected or the file has no index.
// An index that cannot be read only costs the scan its help: the scan
// reads the file's series column instead (fsck reports the index).
func (r *Region) fileRuns(ctx context.Context, id string, f manifest.FileMeta, match func(string) bool) ([]sst.Run, error) {
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
	runs := []sst.Run{}
	var at int64
	for i, k := range x.Keys {
		if match(k) {
			runs = append(runs, sst.Run{Key: k, Start: at, End: at + x.Rows[i]})
		}
		at += x.Rows[i]
	}
	if f.Rows > 0 && at != f.Rows {
		r.log.Warn("series index disagrees with its file; scanning without it", "file", id, "index_rows", at, "file_rows", f.Rows)
		return nil, nil
	}
	return runs, nil
}

// seriesLoads bounds the series indexes one listing loads at once.
const seriesLoads = 8

// listSeries lists the sorted, distinct series of the memtables and the
// (pinned) files that match f's series filter, with a memtable's series
// only if it has an entry in f's time range.
func (r *Region) listSeries(ctx context.Context, mems []*memtable.Memtable, st *manifest.State, files []string, f memtable.Filter) ([]string, error) {
	r.seriesIdx.prune(st)
	lists := make([][]string, len(files)+1)
	for _, mt := range mems {
		lists[0] = append(lists[0], mt.Series(f)...)
	}
	slices.Sort(lists[0])
	var wg sync.WaitGroup
	errs := make([]error, len(files))
	sem := make(chan struct{}, seriesLoads)
	for i, id := range files {
		if x, ok := r.seriesIdx.get(id); ok {
			lists[i+1] = x.Keys
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			x, err := r.loadSeries(ctx, id, st.Files[id])
			lists[i+1], errs[i] = x.Keys, err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("region %s: list series: %w", r.id, err)
	}
	var out []string
	for _, l := range lists {
		for _, k := range l {
			if f.Series == nil || f.Series(k) {
				out = append(out, k)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// loadSeries reads file id's series index and caches it. A file written
// before series indexes existed has none: its series are read from the SST
// itself (the only SST read a listing makes).
func (r *Region) loadSeries(ctx context.Context, id string, f manifest.FileMeta) (sst.SeriesIndex, error) {
	var x sst.SeriesIndex
	if f.Series {
		data, err := r.store.Get(ctx, r.id.SeriesKey(id))
		if err != nil {
			return x, fmt.Errorf("read %s: %w", r.id.SeriesKey(id), err)
		}
		if x, err = sst.DecodeSeriesIndex(data); err != nil {
			return x, fmt.Errorf("%s: %w", r.id.SeriesKey(id), err)
		}
	} else {
		rd, err := r.opts.Cache.Open(ctx, r.store, r.id.SSTKey(id), f.Size)
		if err != nil {
			return x, err
		}
		it := rd.Iter(sst.Filter{Start: AllTime, End: AllTimeEnd, Fields: []string{}})
		for it.Next() {
			// Keys only: scans use a file's row counts only when it has
			// an index (fileRuns).
			if k := it.Entry().Series; len(x.Keys) == 0 || x.Keys[len(x.Keys)-1] != k {
				x.Keys = append(x.Keys, k)
			}
		}
		err = it.Err()
		it.Close()
		if err != nil {
			return x, fmt.Errorf("read the series of %s: %w", r.id.SSTKey(id), err)
		}
	}
	r.seriesIdx.put(id, x)
	return x, nil
}
