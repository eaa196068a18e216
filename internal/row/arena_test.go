package row

import "testing"

func TestWrittenZeroesTheCapacity(t *testing.T) {
	backing := []int{1, 2, 3, 4, 5}
	s := Written(backing[1:2])
	if len(s) != 1 || cap(s) != 4 || &s[0] != &backing[1] {
		t.Fatalf("len %d cap %d: not the slice given", len(s), cap(s))
	}
	if backing[0] != 1 || backing[1] != 0 || backing[4] != 0 {
		t.Fatalf("backing %v: want the capacity zeroed, nothing before it", backing)
	}
}
