package merge

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/row"
)

// parse reads "s ts seq v" puts and "s ts seq del end" tombstones, one per
// comma-separated item; the series key is the raw letter.
func parse(t *testing.T, spec string) row.Iterator {
	var es []row.Entry
	for _, item := range strings.Split(spec, ",") {
		f := strings.Fields(item)
		if len(f) == 0 {
			continue
		}
		var e row.Entry
		e.Series = f[0]
		if _, err := fmt.Sscan(f[1], &e.TS); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscan(f[2], &e.Seq); err != nil {
			t.Fatal(err)
		}
		if f[3] == "del" {
			e.Op = row.Delete
			if _, err := fmt.Sscan(f[4], &e.End); err != nil {
				t.Fatal(err)
			}
		} else {
			var v int64
			if _, err := fmt.Sscan(f[3], &v); err != nil {
				t.Fatal(err)
			}
			e.Fields = []row.Value{row.IntValue(v)}
		}
		es = append(es, e)
	}
	if !slices.IsSortedFunc(es, func(a, b row.Entry) int {
		if row.Less(&a, &b) {
			return -1
		}
		return 1
	}) {
		t.Fatalf("input %q is not sorted", spec)
	}
	return &row.SliceIter{Entries: es}
}

func render(it row.Iterator) string {
	var out []string
	for it.Next() {
		e := it.Entry()
		if e.Op == row.Delete {
			out = append(out, fmt.Sprintf("%s %d %d del %d", e.Series, e.TS, e.Seq, e.End))
		} else {
			out = append(out, fmt.Sprintf("%s %d %d %d", e.Series, e.TS, e.Seq, e.Fields[0].Int()))
		}
	}
	return strings.Join(out, ", ")
}

func TestMerge(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inputs []string
		opts   Options
		want   string
	}{
		{"disjoint", []string{"a 1 1 10, b 1 2 20", "a 2 3 30"}, DefaultOptions(), "a 1 1 10, a 2 3 30, b 1 2 20"},
		{"newest wins", []string{"a 1 1 10", "a 1 5 50", "a 1 3 30"}, DefaultOptions(), "a 1 5 50"},
		{"tombstone hides older", []string{"a 1 1 10, a 2 2 20, a 5 3 50", "a 1 4 del 2"}, DefaultOptions(), "a 5 3 50"},
		{"tombstone spares newer", []string{"a 1 1 10, a 2 6 20", "a 1 4 del 2"}, DefaultOptions(), "a 2 6 20"},
		{"newer put over tombstone at same ts", []string{"a 1 9 90", "a 1 4 del 1, a 1 2 10"}, DefaultOptions(), "a 1 9 90"},
		{"tombstone per series", []string{"a 1 1 10, b 1 2 20", "a 0 9 del 100"}, DefaultOptions(), "b 1 2 20"},
		{"kept tombstones", []string{"a 1 1 10, a 3 2 30", "a 1 4 del 2"}, Options{KeepTombstones: true, DropBefore: math.MinInt64}, "a 1 4 del 2, a 3 2 30"},
		{"ttl", []string{"a 1 1 10, a 5 2 50", "b 0 3 del 2, b 3 4 del 9"}, Options{KeepTombstones: true, DropBefore: 3}, "a 5 2 50, b 3 4 del 9"},
		{"dedup survives suppressed newest", []string{"a 2 1 10", "a 2 3 30", "a 1 5 del 2"}, DefaultOptions(), ""},
		{"empty series key", []string{" 1 1 10", " 1 2 20"}, DefaultOptions(), " 1 2 20"},
		{"dropped series", []string{"a 1 1 10, b 1 2 20, c 1 3 30", "b 0 9 del 5, b 2 4 20"},
			Options{KeepTombstones: true, DropBefore: math.MinInt64, DropSeries: func(s string) bool { return s == "b" }}, "a 1 1 10, c 1 3 30"},
	} {
		for _, parallel := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/parallel=%v", tc.name, parallel), func(t *testing.T) {
				var ins []row.Iterator
				for _, s := range tc.inputs {
					if strings.HasPrefix(s, " ") { // empty series key
						ins = append(ins, emptySeries(t, s))
						continue
					}
					ins = append(ins, parse(t, s))
				}
				opts := tc.opts
				opts.ParallelStart = parallel
				m := New(ins, opts)
				defer m.Close()
				if got := render(m); got != tc.want {
					t.Fatalf("got  %q\nwant %q", got, tc.want)
				}
			})
		}
	}
}

// failing is an input whose first Next fails.
type failing struct{ row.SliceIter }

var errInput = errors.New("input failed")

func (*failing) Next() bool   { return false }
func (*failing) Err() error   { return errInput }
func (*failing) Close() error { return nil }

func TestStartReportsInputErrors(t *testing.T) {
	for _, parallel := range []bool{false, true} {
		m := New([]row.Iterator{parse(t, "a 1 1 10"), &failing{}, parse(t, "b 1 2 20")}, Options{DropBefore: math.MinInt64, ParallelStart: parallel})
		if m.Next() {
			t.Fatalf("parallel=%v: Next succeeded past a failed input", parallel)
		}
		if err := m.Err(); !errors.Is(err, errInput) {
			t.Fatalf("parallel=%v: Err() = %v, want the input's error", parallel, err)
		}
		m.Close()
	}
}

func emptySeries(t *testing.T, s string) row.Iterator {
	it := parse(t, "x"+s).(*row.SliceIter)
	for i := range it.Entries {
		it.Entries[i].Series = ""
	}
	return it
}
