// Package postings indexes series keys by their tags: for each tag name and
// value, the ordinals of the keys that have it, ascending, so a filtered
// scan looks up the series its filter names instead of testing every key.
// A memtable's series and a file's (each kept as symbols) build their own
// lists and narrow through Narrow.
package postings

import (
	"slices"

	"github.com/stratadb/strata/internal/row"
)

// Narrow returns the ordinals, ascending and in a slice of the caller's,
// of the keys that may pass the filters tags and in, given the postings
// of each tag value (lookup: ascending, read only): a superset of those
// that do (the caller's own match decides). all is true when no filter
// narrows the set (a filter on an empty value, series without the tag,
// does not: no posting lists those).
func Narrow(tags []row.Tag, in []row.TagIn, lookup func(name, value string) []int32) (ords []int32, all bool) {
	var lists [][]int32
	for _, t := range tags {
		if t.Value == "" {
			continue
		}
		lists = append(lists, lookup(t.Name, t.Value))
	}
	for _, f := range in {
		if slices.Contains(f.Values, "") {
			continue
		}
		var u []int32
		for _, v := range f.Values {
			u = append(u, lookup(f.Name, v)...)
		}
		slices.Sort(u)
		lists = append(lists, slices.Compact(u))
	}
	if len(lists) == 0 {
		return nil, true
	}
	slices.SortFunc(lists, func(a, b []int32) int { return len(a) - len(b) })
	ords = slices.Clone(lists[0])
	for _, l := range lists[1:] {
		ords = Intersect(ords, l)
	}
	return ords, false
}

// Intersect keeps the elements of a (ascending) that are in b (ascending),
// in a's memory.
func Intersect(a, b []int32) []int32 {
	out, j := a[:0], 0
	for _, v := range a {
		for j < len(b) && b[j] < v {
			j++
		}
		if j < len(b) && b[j] == v {
			out = append(out, v)
		}
	}
	return out
}
