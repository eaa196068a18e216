// Package postings indexes series keys by their tags: for each tag name and
// value, the ordinals of the keys that have it, ascending, so a filtered
// scan looks up the series its filter names instead of testing every key.
// A memtable keeps an Index as its series arrive; a file's series (kept by
// the region as symbols) build their own lists and narrow through Narrow.
package postings

import (
	"iter"
	"maps"
	"slices"

	"github.com/stratadb/strata/internal/row"
)

// Index maps tag name -> value -> ordinals of the keys added, ascending.
// Keys must be added in ordinal order. The names and values it holds are
// cut from the keys added (no copies). Not safe for concurrent use: the
// owner serialises Add against readers.
type Index struct {
	m    map[string]map[string][]int32
	tags []row.Tag // scratch of Add
}

// Add records key as ordinal id, which must be above every id added so
// far. Of a key that does not decode, the tags before the fault are
// recorded: a scan's match (row.SeriesTag) finds those, and no others.
// It returns the number of tags recorded.
func (x *Index) Add(id int32, key string) int {
	if x.m == nil {
		x.m = map[string]map[string][]int32{}
	}
	x.tags, _ = row.DecodeSeries(x.tags[:0], key)
	for _, t := range x.tags {
		vs := x.m[t.Name]
		if vs == nil {
			vs = map[string][]int32{}
			x.m[t.Name] = vs
		}
		vs[t.Value] = append(vs[t.Value], id)
	}
	return len(x.tags)
}

// Lookup returns the ordinals of the keys with tag name = value, ascending
// (the index's own slice: read it, do not change it).
func (x *Index) Lookup(name, value string) []int32 { return x.m[name][value] }

// Values returns the values of tag name and their ordinals (read only).
func (x *Index) Values(name string) map[string][]int32 { return x.m[name] }

// Names iterates the tag names present.
func (x *Index) Names() iter.Seq[string] { return maps.Keys(x.m) }

// Candidates returns the ordinals, ascending and in a slice of the
// caller's, of the keys that may pass the filters tags and in (see
// Narrow).
func (x *Index) Candidates(tags []row.Tag, in []row.TagIn) (ords []int32, all bool) {
	return Narrow(tags, in, x.Lookup)
}

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
