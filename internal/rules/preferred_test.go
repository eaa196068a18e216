package rules

import (
	"fmt"
	"testing"
)

// TestPreferredSpreads: rendezvous hashing gives each evaluator its share
// of groups whose keys differ only in their last bytes, and moves only
// the groups of an evaluator that leaves.
func TestPreferredSpreads(t *testing.T) {
	nodes := []string{"dn1", "dn2", "dn3"}
	count := map[string]int{}
	before := map[string]string{}
	for i := range 999 {
		key := fmt.Sprintf("ns/g%d", i)
		p := preferred(key, nodes)
		count[p]++
		before[key] = p
	}
	for _, n := range nodes {
		if count[n] < 250 || count[n] > 416 {
			t.Errorf("%s preferred for %d of 999 groups: %v", n, count[n], count)
		}
	}
	for key, p := range before {
		if q := preferred(key, []string{"dn1", "dn3"}); p != "dn2" && q != p {
			t.Errorf("%s moved from %s to %s when dn2 left", key, p, q)
		}
	}
	if preferred("x", nil) != "" {
		t.Error("a preferred evaluator among none")
	}
}
