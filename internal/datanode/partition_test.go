package datanode_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/server/servertest"
)

// A table partitioned by a tag keeps every series of one value of the tag
// in that value's region; its scans, column scans and label look-ups
// filtered by the tag answer what the same table routed by whole keys
// answers; a forwarded batch routed by the whole key (a sender older than
// partitioning) is refused; and the partition tag cannot become a field.
func TestPartitionedTableRoutesByItsTag(t *testing.T) {
	ctx := context.Background()
	_, e := openEngine(t, objstoretest.Mem(t), servertest.Options{})
	if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "cpu", Regions: 3, Partition: "host"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "whole", Regions: 3}); err != nil {
		t.Fatal(err)
	}
	servertest.WaitHosted(t, e, "cpu")
	servertest.WaitHosted(t, e, "whole")
	tb, err := e.Table("cpu")
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(tb.Schema.Columns, func(c schema.Column) bool { return c.Name == "host" }); i < 0 || tb.Schema.Columns[i].Role != schema.RoleTag {
		t.Fatalf("partition tag host not a tag of the new table's schema: %+v", tb.Schema.Columns)
	}
	var points []row.Point
	for h := range 12 {
		for core := range 3 {
			for i := range 4 {
				tags := []row.Tag{{Name: "host", Value: fmt.Sprint("h", h)}, {Name: "core", Value: fmt.Sprint(core)}}
				if h == 11 {
					tags = tags[1:] // series without the partition tag
				}
				points = append(points, row.Point{Tags: tags, TS: int64(i) * 1e9, Fields: []row.Field{{Name: "v", Value: row.FloatValue(float64(h*100 + core*10 + i))}}})
			}
		}
	}
	for _, table := range []string{"cpu", "whole"} {
		if _, err := e.Write(ctx, table, slices.Clone(points), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Every series in its host's region.
	perRegion := map[uint32]int{}
	for n := range uint32(3) {
		sc, err := e.ScanRegion(ctx, "cpu", layout.RegionID{Table: tb.ID, Region: n}, scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
		if err != nil {
			t.Fatal(err)
		}
		for sc.Next() {
			for _, en := range sc.Batch() {
				if want := layout.RouteValue(row.SeriesTag(en.Series, "host"), 3); want != n {
					t.Fatalf("series %s in region %d, its host's is %d", row.FormatSeries(en.Series), n, want)
				}
				perRegion[n]++
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		sc.Close()
	}
	if len(perRegion) != 3 {
		t.Fatalf("rows per region %v: 12 hosts in fewer than 3 regions", perRegion)
	}

	// Filtered reads answer as the table routed by whole keys does.
	a, b := "h1", ""
	for h := 2; b == ""; h++ {
		if v := fmt.Sprint("h", h); layout.RouteValue(v, 3) != layout.RouteValue(a, 3) {
			b = v
		}
	}
	for _, req := range []scan.Request{
		{Tags: []row.Tag{{Name: "host", Value: a}}},
		{Tags: []row.Tag{{Name: "host", Value: ""}}},
		{In: []row.TagIn{{Name: "host", Values: []string{a, b, "nobody"}}}},
		{Tags: []row.Tag{{Name: "host", Value: a}, {Name: "core", Value: "2"}}},
		{Tags: []row.Tag{{Name: "host", Value: a}}, In: []row.TagIn{{Name: "host", Values: []string{b}}}}, // no series
		{In: []row.TagIn{{Name: "core", Values: []string{"0", "1"}}}},
	} {
		req.Start, req.End = region.AllTime, region.AllTimeEnd
		got, want := columns(t, e, "cpu", req), columns(t, e, "whole", req)
		if !slices.Equal(got, want) {
			t.Errorf("%+v: partitioned %v\nwhole keys %v", req, got, want)
		}
		n, _ := count(t, e, "cpu", req)
		m, _ := count(t, e, "whole", req)
		if n != m {
			t.Errorf("%+v: %d rows partitioned, %d by whole keys", req, n, m)
		}
		for _, table := range []string{"cpu", "whole"} {
			vals, err := e.TagValues(ctx, table, "core", req)
			if err != nil || len(vals) == 0 != (m == 0) {
				t.Errorf("%s %+v: core values %v, %v (rows %d)", table, req, vals, err, m)
			}
		}
	}

	// A delete finds the series in its host's region (one whose whole
	// key routes elsewhere).
	var del []row.Tag
	for h := 0; del == nil; h++ {
		tags := []row.Tag{{Name: "core", Value: fmt.Sprint(h % 3)}, {Name: "host", Value: fmt.Sprint("h", h/3)}}
		if k, _ := row.EncodeSeries(nil, slices.Clone(tags)); layout.Route(k, 3) != tb.Router().Route(k) {
			del = tags
		}
	}
	before, _ := count(t, e, "cpu", scan.Request{Tags: del})
	if err := e.Delete(ctx, "cpu", del, region.AllTime, region.AllTimeEnd); err != nil {
		t.Fatal(err)
	}
	if after, _ := count(t, e, "cpu", scan.Request{Tags: del}); before != 4 || after != 0 {
		t.Fatalf("series %v: %d rows before its delete, %d after", del, before, after)
	}

	// A batch of region 0 with a key routed there by the whole key but
	// of another region by its host is refused.
	for h := 0; ; h++ {
		p := row.Point{Tags: []row.Tag{{Name: "host", Value: fmt.Sprint("x", h)}}, TS: 1, Fields: []row.Field{{Name: "v", Value: row.FloatValue(1)}}}
		k, _ := row.EncodeSeries(nil, slices.Clone(p.Tags))
		if layout.Route(k, 3) != 0 || tb.Router().Route(k) == 0 {
			continue
		}
		if _, err := e.WriteForwarded(ctx, "cpu", layout.RegionID{Table: tb.ID}, region.Batch{Points: []row.Point{p}, Keys: [][]byte{k}}); !errors.Is(err, region.ErrInvalidWrite) {
			t.Fatalf("a key routed by the whole key to region 0, by its host to %d: %v", tb.Router().Route(k), err)
		}
		break
	}
	// The partition tag stays a tag.
	bad := row.Point{Tags: []row.Tag{{Name: "core", Value: "9"}}, TS: 1, Fields: []row.Field{{Name: "host", Value: row.FloatValue(1)}}}
	var conflict *schema.ConflictError
	if _, err := e.Write(ctx, "cpu", []row.Point{bad}, WriteOptions{}); !errors.As(err, &conflict) {
		t.Fatalf("a field named as the partition tag: %v", err)
	}
}

// columns lists a column scan of field v: each series with its samples.
func columns(t *testing.T, e *Engine, table string, req scan.Request) []string {
	t.Helper()
	req.Fields = []string{"v"}
	var out []string
	err := e.ScanColumns(context.Background(), table, req, func(c *scan.Column) error {
		out = append(out, fmt.Sprint(row.FormatSeries(c.Series), c.TS, c.Bits))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// A partitioned table is a physical user table's option, by a tag that
// can be one.
func TestPartitionTagIsChecked(t *testing.T) {
	ctx := context.Background()
	_, e := openEngine(t, objstoretest.Mem(t), servertest.Options{})
	for _, spec := range []catalog.TableSpec{
		{Name: "a", Partition: "time"},
		{Name: "b", Partition: "__x"},
		{Name: "c", Partition: "host", Logical: true},
		{Name: catalog.MetricsTable, Partition: "instance"},
	} {
		if _, err := e.CreateTable(ctx, spec); !errors.Is(err, catalog.ErrInvalidTable) {
			t.Errorf("%+v: %v, want an invalid table", spec, err)
		}
	}
}
