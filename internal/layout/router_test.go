package layout_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/row"
)

func key(t *testing.T, tags ...row.Tag) []byte {
	t.Helper()
	k, err := row.EncodeSeries(nil, tags)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A router without a tag routes by the whole key; one with a tag routes
// every key by that tag's value alone (a key without the tag as the empty
// value), one key at a time or many.
func TestRouterRoutesByItsTag(t *testing.T) {
	whole := layout.Router{Regions: 7}
	byHost := layout.Router{Regions: 7, Tag: "host"}
	var keys [][]byte
	for i := range 50 {
		keys = append(keys, key(t, row.Tag{Name: "host", Value: fmt.Sprint("h", i%10)}, row.Tag{Name: "core", Value: fmt.Sprint(i)}))
	}
	keys = append(keys, key(t, row.Tag{Name: "core", Value: "1"}), key(t, row.Tag{Name: "core", Value: "2"}, row.Tag{Name: "zone", Value: "a"}))
	regions := map[uint32]bool{}
	for _, k := range keys {
		if got, want := whole.Route(k), layout.Route(k, 7); got != want {
			t.Fatalf("whole key %q: region %d, want %d", k, got, want)
		}
		host := row.SeriesTag(string(k), "host")
		if got, want := byHost.Route(k), layout.RouteValue(host, 7); got != want {
			t.Fatalf("%q by host %q: region %d, want %d", k, host, got, want)
		}
		regions[byHost.Route(k)] = true
	}
	if len(regions) < 3 {
		t.Fatalf("10 hosts over 7 regions landed in %d", len(regions))
	}
	for _, r := range []layout.Router{whole, byHost} {
		got := make([]uint32, len(keys))
		r.RouteEach(got, keys)
		for i, k := range keys {
			if got[i] != r.Route(k) {
				t.Fatalf("%+v RouteEach %q: %d, Route: %d", r, k, got[i], r.Route(k))
			}
		}
	}
}

// Of names the regions a scan's filters can find series in: every one
// (nil) unless a filter names the partition tag; the regions of the
// values named, of all filters at once; none if they name values of no
// one region.
func TestRouterOfNamesTheRegionsOfTheValues(t *testing.T) {
	r := layout.Router{Regions: 5, Tag: "host"}
	of := func(vs ...string) layout.RegionSet {
		w := make(layout.RegionSet, 5)
		for _, v := range vs {
			w[layout.RouteValue(v, 5)] = true
		}
		return w
	}
	// Two hosts of different regions, and one of another region again.
	a, b := "a", ""
	for i := 0; b == ""; i++ {
		if v := fmt.Sprint("h", i); layout.RouteValue(v, 5) != layout.RouteValue(a, 5) {
			b = v
		}
	}
	for _, c := range []struct {
		name string
		tags []row.Tag
		in   []row.TagIn
		want layout.RegionSet
	}{
		{"no filter", nil, nil, nil},
		{"another tag", []row.Tag{{Name: "core", Value: "1"}}, []row.TagIn{{Name: "zone", Values: []string{"x"}}}, nil},
		{"one value", []row.Tag{{Name: "host", Value: a}}, nil, of(a)},
		{"no value (no such tag)", []row.Tag{{Name: "host", Value: ""}}, nil, of("")},
		{"a set", nil, []row.TagIn{{Name: "host", Values: []string{a, b}}}, of(a, b)},
		{"a set and a value in it", []row.Tag{{Name: "host", Value: b}}, []row.TagIn{{Name: "host", Values: []string{a, b}}}, of(b)},
		{"a value and a set without it", []row.Tag{{Name: "host", Value: a}}, []row.TagIn{{Name: "host", Values: []string{b}}}, make(layout.RegionSet, 5)},
	} {
		if got := r.Of(c.tags, c.in); !slices.Equal(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if got := (layout.Router{Regions: 5}).Of([]row.Tag{{Name: "host", Value: a}}, nil); got != nil {
		t.Errorf("routed by the whole key: %v, want every region", got)
	}
	if got := (layout.Router{Regions: 1, Tag: "host"}).Of([]row.Tag{{Name: "host", Value: a}}, nil); got != nil {
		t.Errorf("one region: %v, want every region", got)
	}
}

// A region set's members, and its one member if it has exactly one.
func TestRegionSet(t *testing.T) {
	for _, c := range []struct {
		s    layout.RegionSet
		has  []bool
		only int // -1: not exactly one
	}{
		{nil, []bool{true, true, true}, -1},
		{layout.RegionSet{false, true, false}, []bool{false, true, false}, 1},
		{layout.RegionSet{true, false, true}, []bool{true, false, true}, -1},
		{layout.RegionSet{false, false, false}, []bool{false, false, false}, -1},
		{layout.RegionSet{true}, []bool{true}, 0},
	} {
		for i, want := range c.has {
			if c.s.Has(i) != want {
				t.Errorf("%v.Has(%d): %v", c.s, i, !want)
			}
		}
		if i, ok := c.s.Only(); ok != (c.only >= 0) || ok && i != c.only {
			t.Errorf("%v.Only(): %d, %v; want %d", c.s, i, ok, c.only)
		}
	}
}
