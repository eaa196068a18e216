package rollup_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"testing"

	"github.com/stratadb/strata/internal/rollup"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/testseed"
)

// Partials of min, max, count and group, each over some of the series
// taken in any order, merged in any order and with the rest of the series
// taken in their order, give the aggregation of all the series in their
// order to the bit, wherever no value has ties; and where one has, taking
// the series in another order can change its bits. Over NaNs of two
// payloads, infinities and zeros of both signs, series at some steps
// only.
func TestPartialsMergeExactly(t *testing.T) {
	rng := rand.New(rand.NewSource(int64(testseed.Seed(t))))
	ctx := context.Background()
	otherNaN := math.Float64frombits(0x7ff8000000000abc)
	special := []float64{math.NaN(), otherNaN, math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1e308, -1e308, 5e-324}
	const steps = 20
	tied, untied := 0, 0
	for range 2000 {
		op := []rollup.Op{rollup.Min, rollup.Max, rollup.Count, rollup.Group}[rng.Intn(4)]
		groups := 1 + rng.Intn(3)
		var ins []rollup.Input
		for range 1 + rng.Intn(10) {
			in := rollup.Input{Group: rng.Intn(groups)}
			for k := range steps {
				if rng.Intn(3) == 0 {
					continue
				}
				v := float64(rng.Intn(5) - 2)
				if rng.Intn(3) == 0 {
					v = special[rng.Intn(len(special))]
				}
				in.TS, in.VS = append(in.TS, int64(k)), append(in.VS, v)
			}
			ins = append(ins, in)
		}
		want, err := rollup.Aggregate(ctx, op, ins, groups, 0, steps-1, 1)
		if err != nil {
			t.Fatal(err)
		}
		// Some series stay; the others go to regions, aggregated there
		// in another order and merged in any order.
		regions := make([][]rollup.Input, 1+rng.Intn(3))
		var merged []rollup.Input
		for _, in := range ins {
			if r := rng.Intn(len(regions) + 1); r < len(regions) {
				regions[r] = append(regions[r], in)
			} else {
				merged = append(merged, in)
			}
		}
		for _, region := range regions {
			rng.Shuffle(len(region), func(i, j int) { region[i], region[j] = region[j], region[i] })
			aggs, err := rollup.Aggregate(ctx, op, region, groups, 0, steps-1, 1)
			if err != nil {
				t.Fatal(err)
			}
			for g, a := range aggs {
				at := rng.Intn(len(merged) + 1)
				merged = append(merged[:at], append([]rollup.Input{{TS: a.TS, VS: a.VS, Group: g, Partial: true, Ties: a.Ties}}, merged[at:]...)...)
			}
		}
		got, err := rollup.Aggregate(ctx, op, merged, groups, 0, steps-1, 1)
		if err != nil {
			t.Fatal(err)
		}
		for g := range want {
			w, m := want[g], got[g]
			if w.Ties != m.Ties && !m.Ties {
				t.Fatalf("%s, group %d: ties %v over the series, %v merged", op, g, w.Ties, m.Ties)
			}
			if m.Ties {
				tied++
				continue
			}
			untied++
			if !reflect.DeepEqual(w.TS, m.TS) || !reflect.DeepEqual(bits(w.VS), bits(m.VS)) {
				t.Fatalf("%s, group %d: over the series %v %x, merged %v %x", op, g, w.TS, bits(w.VS), m.TS, bits(m.VS))
			}
		}
	}
	if tied == 0 || untied == 0 {
		t.Fatalf("%d groups with ties, %d without", tied, untied)
	}

	// Ties mean what they say: the order changes the bits.
	for _, tc := range []struct {
		op   rollup.Op
		a, b float64
	}{{rollup.Max, 0, math.Copysign(0, -1)}, {rollup.Min, math.Copysign(0, -1), 0}, {rollup.Max, math.NaN(), otherNaN}, {rollup.Min, math.NaN(), otherNaN}} {
		var ab, ba rollup.Agg
		ab.Add(tc.op, tc.a)
		ab.Add(tc.op, tc.b)
		ba.Add(tc.op, tc.b)
		ba.Add(tc.op, tc.a)
		if math.Float64bits(ab.Value(tc.op)) == math.Float64bits(ba.Value(tc.op)) {
			t.Fatalf("%s of %v and %v: the same either way", tc.op, tc.a, tc.b)
		}
		in := []rollup.Input{{TS: []int64{0}, VS: []float64{tc.a}}, {TS: []int64{0}, VS: []float64{tc.b}}}
		if out, _ := rollup.Aggregate(ctx, tc.op, in, 1, 0, 0, 1); !out[0].Ties {
			t.Fatalf("%s of %v and %v: no ties", tc.op, tc.a, tc.b)
		}
	}
}

// An owner's aggregation: its series rolled up and aggregated by the tags
// named in by, one Aggregated column per group with the samples its
// series read, at the windows' ends; series without the tags in a group
// of their own. Only aggregations whose partials merge are taken.
func TestAggregationColumns(t *testing.T) {
	f, err := rollup.New(scan.Rollup{Func: "max_over_time", Range: 10, Start: -9, End: 20, Step: 10})
	if err != nil {
		t.Fatal(err)
	}
	key := func(tags ...string) string {
		var ts []row.Tag
		for i := 0; i < len(tags); i += 2 {
			ts = append(ts, row.Tag{Name: tags[i], Value: tags[i+1]})
		}
		k, err := row.EncodeSeries(nil, ts)
		if err != nil {
			t.Fatal(err)
		}
		return string(k)
	}
	col := func(series string, ms []int64, vs ...float64) *scan.Column {
		c := &scan.Column{Kind: row.Float, SeriesColumn: scan.SeriesColumn{Series: series}}
		for i, m := range ms {
			c.TS, c.Bits = append(c.TS, m*1e6), append(c.Bits, math.Float64bits(vs[i]))
		}
		return c
	}
	cols := []*scan.Column{
		col(key("dc", "a", "host", "1"), []int64{0, 5, 15}, 1, 3, 2),
		col(key("dc", "a", "host", "2"), []int64{1, 25}, 4, 9), // 25 is past the last window
		col(key("dc", "b", "host", "3"), []int64{11, 12}, 7, 6),
		col(key("host", "4"), []int64{20}, -1),
	}
	scanColumns := func(emit func(*scan.Column) error) error {
		for _, c := range cols {
			if err := emit(c); err != nil {
				return err
			}
		}
		return nil
	}
	type group struct {
		TS      []int64
		VS      []float64
		Samples int
	}
	for _, tc := range []struct {
		op   string
		by   []string
		want map[string]group
	}{
		{"max", []string{"dc"}, map[string]group{
			key("dc", "a"): {[]int64{0, 10e6, 20e6}, []float64{1, 4, 2}, 5},
			key("dc", "b"): {[]int64{20e6}, []float64{7}, 2},
			key():          {[]int64{20e6}, []float64{-1}, 1},
		}},
		{"count", nil, map[string]group{key(): {[]int64{0, 10e6, 20e6}, []float64{1, 2, 3}, 8}}},
		{"group", []string{"nope"}, map[string]group{key(): {[]int64{0, 10e6, 20e6}, []float64{1, 1, 1}, 8}}},
		{"min", []string{"dc", "host"}, map[string]group{
			key("dc", "a", "host", "1"): {[]int64{0, 10e6, 20e6}, []float64{1, 3, 2}, 3},
			key("dc", "a", "host", "2"): {[]int64{10e6}, []float64{4}, 2},
			key("dc", "b", "host", "3"): {[]int64{20e6}, []float64{7}, 2},
			key("host", "4"):            {[]int64{20e6}, []float64{-1}, 1},
		}},
	} {
		a, err := rollup.NewAggregation(scan.Aggregate{Op: tc.op, By: tc.by})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]group{}
		err = a.Columns(context.Background(), f, scanColumns, func(c *scan.Column) error {
			if !c.Rolled || !c.Aggregated || c.Ties || c.Kind != row.Float {
				return fmt.Errorf("%+v", c)
			}
			g := group{TS: append([]int64(nil), c.TS...), Samples: c.Samples}
			for _, b := range c.Bits {
				g.VS = append(g.VS, math.Float64frombits(b))
			}
			got[c.Series] = g
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Fatalf("%s by %v:\n got %v\nwant %v", tc.op, tc.by, got, tc.want)
		}
	}
	for _, op := range []string{"sum", "avg", "stddev", ""} {
		if _, err := rollup.NewAggregation(scan.Aggregate{Op: op}); !errors.Is(err, scan.ErrInvalid) {
			t.Errorf("%q at the owners: %v", op, err)
		}
	}
}
