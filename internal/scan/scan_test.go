package scan_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/scan"
)

// Latest: the first row at a ts stands, the next at that ts does not;
// Reset starts a series, whose first row stands whatever its ts.
func TestLatest(t *testing.T) {
	var l scan.Latest
	for i, c := range []struct {
		reset bool
		ts    int64
		want  bool
	}{
		{false, 5, true},
		{false, 5, false}, // an older version
		{false, 5, false},
		{false, 6, true},
		{true, 6, true}, // the next series, at the same ts
		{false, 6, false},
		{true, 0, true}, // a zero ts stands in a new series
		{false, 0, false},
	} {
		if c.reset {
			l.Reset()
		}
		if got := l.Stands(c.ts); got != c.want {
			t.Errorf("row %d at %d: stands %v, want %v", i, c.ts, got, c.want)
		}
	}
}

// MergeNewer: every ts of either run once, in order, newer's where both
// hold it.
func TestMergeNewer(t *testing.T) {
	for _, c := range []struct {
		old, newer []int64
		want       string
	}{
		{nil, nil, ""},
		{[]int64{1, 2}, nil, "o0 o1"},
		{nil, []int64{1, 2}, "n0 n1"},
		{[]int64{1, 3, 5}, []int64{2, 4}, "o0 n0 o1 n1 o2"},
		{[]int64{1, 3, 5}, []int64{3}, "o0 n0 o2"},
		{[]int64{1, 3}, []int64{1, 3}, "n0 n1"},
		{[]int64{4}, []int64{1, 2, 4, 9}, "n0 n1 n2 n3"},
		{[]int64{-2, 0, 7}, []int64{0, 8}, "o0 n0 o2 n1"},
	} {
		var got []string
		scan.MergeNewer(c.old, c.newer, func(i int, fromNewer bool) {
			from := "o"
			if fromNewer {
				from = "n"
			}
			got = append(got, fmt.Sprint(from, i))
		})
		if s := strings.Join(got, " "); s != c.want {
			t.Errorf("MergeNewer(%v, %v) took %q, want %q", c.old, c.newer, s, c.want)
		}
	}
}
