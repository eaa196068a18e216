package metasrv

import (
	"maps"
	"slices"
	"testing"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/cluster"
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

// A partitioned table's regions go only to datanodes that route by
// partition tag, with their load; any other table's go anywhere.
func TestHostsOfAPartitionedTable(t *testing.T) {
	nodes := map[string]cluster.NodeInfo{"dn1": {ID: "dn1", Partition: true}, "old": {ID: "old"}, "dn2": {ID: "dn2", Partition: true}}
	load := map[string]int{"dn1": 3, "old": 0, "dn2": 4}
	if got := hosts(catalog.Table{Name: "w"}, nodes, load); !maps.Equal(got, load) {
		t.Fatalf("an unpartitioned table's hosts: %v", got)
	}
	got := hosts(catalog.Table{Name: "p", Partition: "host"}, nodes, load)
	if want := map[string]int{"dn1": 3, "dn2": 4}; !maps.Equal(got, want) {
		t.Fatalf("a partitioned table's hosts: %v, want %v", got, want)
	}
	if to := leastLoaded(map[string]int{}, got); to != "dn1" {
		t.Fatalf("placed on %s, want dn1 (the least loaded that routes by tag; old has none)", to)
	}
	if got := hosts(catalog.Table{Name: "p", Partition: "host"}, map[string]cluster.NodeInfo{"old": {ID: "old"}}, map[string]int{"old": 0}); len(got) != 0 {
		t.Fatalf("only an older datanode live: hosts %v, want none", got)
	}
}
