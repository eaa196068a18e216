package sst

import (
	"container/list"
	"context"
	"sync"

	"github.com/stratadb/strata/internal/objstore"
)

// Cache keeps open SST readers (their footers, page indexes and, for files
// read whole, their bytes) so repeated scans do not fetch and parse them
// again. SSTs are immutable, so entries never go stale; a removed file's
// entry ages out. It is bounded by the bytes it holds and safe for
// concurrent use.
type Cache struct {
	limit int64

	mu    sync.Mutex
	used  int64
	lru   *list.List // front: most recent; values *cacheEntry
	byKey map[string]*list.Element
	hits  uint64
	miss  uint64
}

type cacheEntry struct {
	key  string
	r    *Reader
	cost int64
}

// NewCache returns a cache of about limit bytes.
func NewCache(limit int64) *Cache {
	return &Cache{limit: limit, lru: list.New(), byKey: map[string]*list.Element{}}
}

// Open returns the reader for key, opening it on a miss. Concurrent misses
// of one key may both open it; one wins the slot.
func (c *Cache) Open(ctx context.Context, store objstore.Bucket, key string, size int64) (*Reader, error) {
	if c == nil {
		return Open(ctx, store, key, size)
	}
	c.mu.Lock()
	if el, ok := c.byKey[key]; ok {
		c.lru.MoveToFront(el)
		c.hits++
		r := el.Value.(*cacheEntry).r
		c.mu.Unlock()
		return r, nil
	}
	c.miss++
	c.mu.Unlock()
	r, err := Open(ctx, store, key, size)
	if err != nil {
		return nil, err
	}
	cost := size
	if rr, ranged := r.ra.(*rangeReader); ranged {
		// A ranged reader holds the file's tail (footer and page
		// indexes) and their parsed form, not the file.
		cost = min(size, 4*int64(len(rr.tail)))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		return el.Value.(*cacheEntry).r, nil
	}
	if cost > c.limit {
		return r, nil
	}
	c.byKey[key] = c.lru.PushFront(&cacheEntry{key: key, r: r, cost: cost})
	c.used += cost
	for c.used > c.limit {
		el := c.lru.Back()
		e := el.Value.(*cacheEntry)
		c.lru.Remove(el)
		delete(c.byKey, e.key)
		c.used -= e.cost
	}
	return r, nil
}

// Stats reports hits, misses and bytes held.
func (c *Cache) Stats() (hits, misses uint64, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.miss, c.used
}
