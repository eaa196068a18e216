package region

import (
	"context"
	"sync"
)

// MemoryBudget bounds the memtable memory of every region of a process.
// Writes wait (stall) while the budget is spent; the region holding the most
// unflushed memory is asked to flush.
type MemoryBudget struct {
	limit int64

	mu      sync.Mutex
	used    int64
	changed chan struct{} // closed and replaced when used drops
	regions map[*Region]struct{}
}

// NewMemoryBudget returns a budget of limit bytes.
func NewMemoryBudget(limit int64) *MemoryBudget {
	return &MemoryBudget{limit: limit, changed: make(chan struct{}), regions: map[*Region]struct{}{}}
}

// Used is the memory currently held.
func (b *MemoryBudget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

func (b *MemoryBudget) add(n int64) {
	b.mu.Lock()
	b.used += n
	if n < 0 {
		close(b.changed)
		b.changed = make(chan struct{})
	}
	b.mu.Unlock()
}

func (b *MemoryBudget) register(r *Region) {
	b.mu.Lock()
	b.regions[r] = struct{}{}
	b.mu.Unlock()
}

func (b *MemoryBudget) unregister(r *Region) {
	b.mu.Lock()
	delete(b.regions, r)
	b.mu.Unlock()
}

// full returns whether the budget is spent, a channel that is closed when
// that may change, and the region to ask for a flush.
func (b *MemoryBudget) full() (bool, <-chan struct{}, *Region) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used < b.limit {
		return false, nil, nil
	}
	var big *Region
	var bigBytes int64 = -1
	for r := range b.regions {
		if n := r.activeBytes(); n > bigBytes {
			big, bigBytes = r, n
		}
	}
	return true, b.changed, big
}

// waitFor blocks while cond reports full, calling kick once per wakeup.
func waitFor(ctx context.Context, cond func() (bool, <-chan struct{}, *Region)) (waited bool, err error) {
	for {
		full, ch, kick := cond()
		if !full {
			return waited, nil
		}
		waited = true
		if kick != nil {
			kick.requestFlush()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return waited, ctx.Err()
		}
	}
}
