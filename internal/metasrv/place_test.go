package metasrv

import (
	"slices"
	"testing"
)

// A region goes to the datanode with the fewest regions of its table, then
// with the fewest regions, then the first by id: a new table of one
// region per datanode gets one on each even when one datanode (one that
// joined last) hosts fewer regions than the others.
func TestLeastLoadedSpreadsATable(t *testing.T) {
	load := map[string]int{"dn1": 5, "dn2": 5, "dn3": 4, "dn4": 0}
	table := map[string]int{}
	var got []string
	for range 4 {
		to := leastLoaded(table, load)
		got = append(got, to)
		table[to]++
		load[to]++
	}
	if want := []string{"dn4", "dn3", "dn1", "dn2"}; !slices.Equal(got, want) {
		t.Fatalf("placed on %v, want %v", got, want)
	}
	// A fifth region goes where the load is least among those with one.
	if to := leastLoaded(table, load); to != "dn4" {
		t.Fatalf("fifth region on %s, want dn4", to)
	}
}
