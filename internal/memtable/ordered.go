package memtable

import (
	"slices"
	"strings"
)

// OrderedTag is the tag whose values a memtable keeps in order as series
// come: Prometheus' metric name, the label every metric browser and
// autocompletion lists. With 100,000 names, sorting them (or looking each
// up in a region's files' answer) at the first listing after the series
// came cost 40-200 ms on two cores; kept in order, a listing merges a
// short tail into a sorted run.
const OrderedTag = "__name__"

// ordered keeps a tag's values sorted as they are added: run is sorted,
// tail holds the values added since, unsorted; the tail is sorted into
// the run when it reaches a quarter of it (at least minTail), so the
// whole costs O(n log n) over the memtable's life and a listing sorts at
// most a quarter of the values.
type ordered struct {
	run  []uint32 // value symbols, sorted by string
	tail []uint32
}

// minTail is the least tail sorted into the run.
const minTail = 1024

// add records value symbol v, new to the tag. The caller holds m.mu for
// writing.
func (o *ordered) add(v uint32, sym func(uint32) string) {
	o.tail = append(o.tail, v)
	if len(o.tail) >= max(minTail, len(o.run)/4) {
		o.run, o.tail = o.sorted(sym), o.tail[:0]
	}
}

// sorted returns the tag's values, sorted (a new slice unless the tail is
// empty). It only reads o: a listing holding m.mu for reading calls it.
func (o *ordered) sorted(sym func(uint32) string) []uint32 {
	if len(o.tail) == 0 {
		return o.run
	}
	tail := slices.Clone(o.tail)
	slices.SortFunc(tail, func(a, b uint32) int { return strings.Compare(sym(a), sym(b)) })
	out := make([]uint32, 0, len(o.run)+len(tail))
	i, j := 0, 0
	for i < len(o.run) && j < len(tail) {
		if sym(o.run[i]) < sym(tail[j]) {
			out = append(out, o.run[i])
			i++
		} else {
			out = append(out, tail[j])
			j++
		}
	}
	out = append(out, o.run[i:]...)
	return append(out, tail[j:]...)
}

// len is the number of values.
func (o *ordered) len() int { return len(o.run) + len(o.tail) }

// without returns values (symbols, sorted by string) but those except
// (sorted) holds, as strings and symbols: one pass over both.
func without(values []uint32, except []string, sym func(uint32) string) sortedValues {
	var c sortedValues
	j := 0
	for _, v := range values {
		s := sym(v)
		for j < len(except) && except[j] < s {
			j++
		}
		if j < len(except) && except[j] == s {
			continue
		}
		c.vals, c.syms = append(c.vals, s), append(c.syms, v)
	}
	return c
}
