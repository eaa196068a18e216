package sst

import (
	"container/list"
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/stratadb/strata/internal/objstore"
)

// Cache keeps open SST readers (their footers, page indexes and, for files
// read whole, their bytes) and the blocks that scans read of files read in
// ranges, so repeated scans do not fetch and parse them again. SSTs are
// immutable and never rewritten under the same key, so entries never go
// stale; a removed file's entries age out. It is one LRU bounded by the
// bytes it holds, and safe for concurrent use.
type Cache struct {
	limit int64

	mu    sync.Mutex
	used  int64
	lru   *list.List // front: most recent; values *cacheEntry
	byKey map[cacheKey]*list.Element
	stats CacheStats
}

// cacheKey names an open reader (block -1) or a block of a file.
type cacheKey struct {
	file  string
	block int64
}

type cacheEntry struct {
	key  cacheKey
	r    *Reader
	data []byte
	cost int64
}

// CacheStats count a cache's lookups and what it holds.
type CacheStats struct {
	Hits, Misses           uint64 // open readers
	BlockHits, BlockMisses uint64 // blocks of ranged files
	Bytes                  int64
	Entries                int
}

// BlockBytes is the size of the blocks a Cache holds of ranged files: a
// read fetches the blocks it covers that are not cached, those next to each
// other with one request.
const BlockBytes = 64 << 10

// readAhead is how many blocks past a read that misses the cache are
// fetched with it (if not cached): a scan's sequential reads then take one
// request per 256 KiB, as with a read buffer that size.
const readAhead = 3

// NewCache returns a cache of about limit bytes.
func NewCache(limit int64) *Cache {
	return &Cache{limit: limit, lru: list.New(), byKey: map[cacheKey]*list.Element{}}
}

// Open returns the reader for key, opening it on a miss. Concurrent misses
// of one key may both open it; one wins the slot.
func (c *Cache) Open(ctx context.Context, store objstore.Bucket, key string, size int64) (*Reader, error) {
	if c == nil {
		return Open(ctx, store, key, size)
	}
	ck := cacheKey{file: key, block: -1}
	c.mu.Lock()
	if el, ok := c.byKey[ck]; ok {
		c.lru.MoveToFront(el)
		c.stats.Hits++
		r := el.Value.(*cacheEntry).r
		c.mu.Unlock()
		return r, nil
	}
	c.stats.Misses++
	c.mu.Unlock()
	r, err := Open(ctx, store, key, size)
	if err != nil {
		return nil, err
	}
	cost := size
	if rr, ranged := r.ra.(*rangeReader); ranged {
		// A ranged reader holds the file's tail (footer and page
		// indexes) and their parsed form, not the file; scans read its
		// pages through the cache's blocks.
		cost = min(size, 4*int64(len(rr.tail)))
		r.pages = &cachedRange{rr: rr, cache: c}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[ck]; ok {
		return el.Value.(*cacheEntry).r, nil
	}
	c.insert(&cacheEntry{key: ck, r: r, cost: cost})
	return r, nil
}

// insert adds e (c.mu held) and evicts the least recently used entries
// beyond the limit. An entry larger than the limit is not kept.
func (c *Cache) insert(e *cacheEntry) {
	if e.cost > c.limit {
		return
	}
	c.byKey[e.key] = c.lru.PushFront(e)
	c.used += e.cost
	for c.used > c.limit {
		el := c.lru.Back()
		old := el.Value.(*cacheEntry)
		c.lru.Remove(el)
		delete(c.byKey, old.key)
		c.used -= old.cost
	}
}

// block returns a cached block.
func (c *Cache) block(file string, n int64) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[cacheKey{file, n}]
	if !ok {
		c.stats.BlockMisses++
		return nil, false
	}
	c.stats.BlockHits++
	c.lru.MoveToFront(el)
	return el.Value.(*cacheEntry).data, true
}

func (c *Cache) putBlock(file string, n int64, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cacheKey{file, n}
	if _, ok := c.byKey[k]; ok {
		return
	}
	c.insert(&cacheEntry{key: k, data: data, cost: int64(len(data))})
}

// Stats reports the cache's counters and what it holds.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Bytes, s.Entries = c.used, c.lru.Len()
	return s
}

// cachedRange reads a ranged file in BlockBytes blocks through the cache.
// Scans read pages through it; compaction, which reads each row group once
// and then deletes the file, reads around it (Filter.GroupBytes).
type cachedRange struct {
	rr    *rangeReader
	cache *Cache
}

func (cr *cachedRange) ReadAt(p []byte, off int64) (int, error) {
	rr := cr.rr
	if n, ok := rr.fromTail(p, off); ok {
		return n, nil
	}
	if off < 0 || off >= rr.size {
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), rr.size)
	first, last := off/BlockBytes, (end-1)/BlockBytes
	blocks := make([][]byte, last-first+1)
	for n := first; n <= last; n++ {
		blocks[n-first], _ = cr.cache.block(rr.key, n)
	}
	// Fetch each stretch of missing blocks with one request.
	for i := 0; i < len(blocks); {
		if blocks[i] != nil {
			i++
			continue
		}
		j := i
		for j < len(blocks) && blocks[j] == nil {
			j++
		}
		// A stretch that reaches the read's end takes the missing blocks
		// after it too, up to readAhead: scans read on, and pages are read
		// through a buffer smaller than one request is worth.
		ahead := 0
		if j == len(blocks) {
			for ahead < readAhead && (last+int64(ahead)+1)*BlockBytes < rr.size {
				if _, ok := cr.cache.block(rr.key, last+int64(ahead)+1); ok {
					break
				}
				ahead++
			}
		}
		lo, hi := (first+int64(i))*BlockBytes, min((first+int64(j+ahead))*BlockBytes, rr.size)
		buf := make([]byte, hi-lo)
		n, err := rr.store.ReadRange(rr.ctx, rr.key, lo, buf)
		if err != nil {
			return 0, fmt.Errorf("sst: read %s at %d: %w", rr.key, lo, err)
		}
		if int64(n) != hi-lo {
			return 0, fmt.Errorf("%w: %s is shorter than the manifest's %d bytes", ErrCorrupt, rr.key, rr.size)
		}
		for k := i; k < j+ahead; k++ {
			b := buf[int64(k-i)*BlockBytes : min(int64(k-i+1)*BlockBytes, hi-lo)]
			// Each block its own allocation, so evicting one frees it.
			b = append([]byte(nil), b...)
			cr.cache.putBlock(rr.key, first+int64(k), b)
			if k < j {
				blocks[k] = b
			}
		}
		i = j
	}
	n := 0
	for i, b := range blocks {
		start := int64(0)
		if i == 0 {
			start = off - first*BlockBytes
		}
		n += copy(p[n:], b[start:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
