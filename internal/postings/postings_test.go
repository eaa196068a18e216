package postings

import (
	"slices"
	"testing"

	"github.com/stratadb/strata/internal/row"
)

func TestNarrow(t *testing.T) {
	m := map[string]map[string][]int32{} // tag name -> value -> ordinals
	keys := [][]row.Tag{
		{{Name: "host", Value: "a"}, {Name: "dc", Value: "1"}},
		{{Name: "host", Value: "b"}, {Name: "dc", Value: "1"}},
		{{Name: "host", Value: "c"}},
		{{Name: "host", Value: "a"}, {Name: "dc", Value: "2"}},
	}
	for i, tags := range keys {
		for _, tag := range tags {
			if m[tag.Name] == nil {
				m[tag.Name] = map[string][]int32{}
			}
			m[tag.Name][tag.Value] = append(m[tag.Name][tag.Value], int32(i))
		}
	}
	lookup := func(name, value string) []int32 { return m[name][value] }
	for _, c := range []struct {
		tags []row.Tag
		in   []row.TagIn
		want []int32
		all  bool
	}{
		{nil, nil, nil, true},
		{[]row.Tag{{Name: "host", Value: "a"}}, nil, []int32{0, 3}, false},
		{[]row.Tag{{Name: "host", Value: "a"}, {Name: "dc", Value: "1"}}, nil, []int32{0}, false},
		{[]row.Tag{{Name: "dc", Value: ""}}, nil, nil, true}, // absence: no list narrows it
		{nil, []row.TagIn{{Name: "host", Values: []string{"c", "b", "zz"}}}, []int32{1, 2}, false},
		{nil, []row.TagIn{{Name: "dc", Values: []string{"1", ""}}}, nil, true},
		{[]row.Tag{{Name: "nope", Value: "x"}}, nil, []int32{}, false},
	} {
		got, all := Narrow(c.tags, c.in, lookup)
		if all != c.all || !slices.Equal(got, c.want) {
			t.Errorf("tags %v in %v: %v all=%v, want %v all=%v", c.tags, c.in, got, all, c.want, c.all)
		}
	}
	// The lists handed out are the lookup's: narrowing must not change them.
	if l := lookup("host", "a"); !slices.Equal(l, []int32{0, 3}) {
		t.Fatalf("host=a changed by narrowing: %v", l)
	}
}
