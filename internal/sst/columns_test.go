package sst

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"testing"

	"github.com/stratadb/strata/internal/row"
)

// TestReadColumns: a file's runs read column by column give each series'
// rows in range, with their nulls, across row groups; the checks that
// decide whether a file can be read so (numeric field, tombstones, sequence
// range) say what the file holds; a run past the file's end is corruption,
// and emit's error ends the read.
func TestReadColumns(t *testing.T) {
	all := testEntries(t, 50)
	puts := slices.DeleteFunc(slices.Clone(all), func(e row.Entry) bool { return e.Op == row.Delete })
	data, _ := write(t, puts, 7)
	r := openBytes(t, data)
	for _, f := range []string{"f", "i", "u"} {
		if !r.NumericField(f) {
			t.Fatalf("field %s is not numeric", f)
		}
	}
	for _, f := range []string{"s", "b", "nope", ColTS} {
		if r.NumericField(f) {
			t.Fatalf("%s is a numeric field", f)
		}
	}
	if r.Tombstones(math.MinInt64, math.MaxInt64) {
		t.Fatal("a file of puts has tombstones")
	}
	if lo, hi, ok := r.SeqRange(); !ok || lo != 1 || hi != 100 {
		t.Fatalf("sequence range %d-%d %v, want 1-100", lo, hi, ok)
	}
	withDel, _ := write(t, all, 7)
	rd := openBytes(t, withDel)
	if !rd.Tombstones(math.MinInt64, math.MaxInt64) || rd.Tombstones(400, 500) {
		t.Fatal("the tombstone at 250-275 is not where the row groups say")
	}

	runs := []Run{{Key: series(t, "a"), Start: 0, End: 50}, {Key: series(t, "b"), Start: 50, End: 100}}
	const start, end = 15, 305
	got := map[string][]string{}
	err := r.ReadColumns(runs, "i", start, end, func(c *SeriesColumn) error {
		if len(c.Null) != len(c.TS) {
			t.Fatalf("optional column: %d nulls for %d rows", len(c.Null), len(c.TS))
		}
		for k, ts := range c.TS {
			v := row.NumberValue(row.Int, c.Bits[k])
			if c.Null[k] {
				v = row.Value{}
			}
			got[c.Series] = append(got[c.Series], row.FormatSeries(c.Series)+" "+strconv.FormatInt(ts, 10)+" "+v.String())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range puts {
		if e.TS < start || e.TS >= end {
			continue
		}
		want := row.FormatSeries(e.Series) + " " + strconv.FormatInt(e.TS, 10) + " " + e.Fields[1].String()
		if len(got[e.Series]) == 0 || got[e.Series][0] != want {
			t.Fatalf("next row of %s: %q, want %q", row.FormatSeries(e.Series), got[e.Series], want)
		}
		got[e.Series] = got[e.Series][1:]
	}
	for k, rest := range got {
		if len(rest) > 0 {
			t.Fatalf("%s: rows out of range or extra: %q", row.FormatSeries(k), rest)
		}
	}

	err = r.ReadColumns([]Run{{Key: series(t, "b"), Start: 90, End: 120}}, "f", math.MinInt64, math.MaxInt64, func(*SeriesColumn) error { return nil })
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a run past the end: %v", err)
	}
	stop := errors.New("stop")
	if err := r.ReadColumns(runs, "f", math.MinInt64, math.MaxInt64, func(*SeriesColumn) error { return stop }); err != stop {
		t.Fatalf("emit's error: %v", err)
	}
}
