package memtable

import "github.com/stratadb/strata/internal/symtab"

// Series ordinals, for counting a memtable's series as they come
// (internal/region's Cardinality): a memtable's series are numbered
// 0, 1, ... in the order they came, a series keeps its number, and none
// is ever taken out, so the series past a count are the ones added since.

// SeriesLen returns how many series the memtable holds.
func (m *Memtable) SeriesLen() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return int(m.n)
}

// SeriesKeys returns the keys of series from to to-1 (ordinals, to at
// most SeriesLen), a tombstone's series among them.
func (m *Memtable) SeriesKeys(from, to int) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	kv := m.keyView()
	var keys symtab.KeyArena
	out := make([]string, 0, max(0, to-from))
	for o := from; o < to && o < int(m.n); o++ {
		out = append(out, kv.key(&keys, m.at(int32(o))))
	}
	return out
}

// Ordinal returns the ordinal of the series of key, or -1 if the memtable
// does not hold it.
func (m *Memtable) Ordinal(key string) int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return int(m.find(key, hashKey(key)))
}
