package datanode_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// Tables a write creates (the shared __metrics and __lines, and a physical
// table a create names without a region count) get one region per live
// datanode when no flag sets their count: one in a standalone, as many as
// the cluster counts otherwise; --default-regions, --metrics-regions and
// --lines-regions, and a count the create names, win.
func TestRegionCountOfTablesWritesCreate(t *testing.T) {
	cluster := func(n int, calls *atomic.Int32) func(context.Context) (int, error) {
		return func(context.Context) (int, error) { calls.Add(1); return n, nil }
	}
	for _, c := range []struct {
		name   string
		config func(*server.Config)
		tune   func(*datanode.Options, *atomic.Int32)
		// Regions of __metrics, __lines, a table created without a count.
		metrics, lines, created uint32
		counted                 bool // the live datanodes were counted
	}{
		{name: "standalone", metrics: 1, lines: 1, created: 1},
		{name: "standalone with --default-regions 0", config: func(c *server.Config) { c.DefaultRegions = 0 }, metrics: 1, lines: 1, created: 1},
		{name: "cluster of three", tune: func(o *datanode.Options, calls *atomic.Int32) {
			o.DefaultRegions, o.LiveDatanodes = 0, cluster(3, calls)
		},
			metrics: 3, lines: 3, created: 3, counted: true},
		{name: "--default-regions wins", tune: func(o *datanode.Options, calls *atomic.Int32) {
			o.DefaultRegions, o.LiveDatanodes = 5, cluster(3, calls)
		},
			metrics: 5, lines: 5, created: 5},
		{name: "--metrics-regions and --lines-regions win", tune: func(o *datanode.Options, calls *atomic.Int32) {
			o.DefaultRegions, o.MetricsRegions, o.LinesRegions, o.LiveDatanodes = 0, 2, 4, cluster(3, calls)
		}, metrics: 2, lines: 4, created: 3, counted: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			var calls atomic.Int32
			o := servertest.Options{Config: c.config}
			if c.tune != nil {
				o.Tune = func(opts *datanode.Options) { c.tune(opts, &calls) }
			}
			node, e := openEngine(t, objstoretest.Mem(t), o)
			metric := []row.Point{{Tags: []row.Tag{{Name: "__name__", Value: "up"}, {Name: "job", Value: "a"}}, TS: linesBase,
				Fields: []row.Field{{Name: catalog.MetricsField, Value: row.FloatValue(1)}}}}
			if _, err := e.Write(ctx, catalog.MetricsTable, metric, datanode.WriteOptions{CreateTable: true, Metrics: true}); err != nil {
				t.Fatal(err)
			}
			writeLines(t, node, "cpu,host=a v=1 1700000000000000000\n")
			if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "created"}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "named", Regions: 2}); err != nil {
				t.Fatal(err)
			}
			for name, want := range map[string]uint32{catalog.MetricsTable: c.metrics, catalog.LinesTable: c.lines, "created": c.created, "named": 2} {
				tb, err := e.Table(name)
				if err != nil {
					t.Fatal(err)
				}
				if tb.Regions != want {
					t.Errorf("%s has %d regions, want %d", name, tb.Regions, want)
				}
			}
			if got := calls.Load() > 0; got != c.counted {
				t.Errorf("live datanodes counted: %v, want %v", got, c.counted)
			}
			// Every region opens, and the rows read back whichever took them.
			for _, name := range []string{catalog.MetricsTable, "cpu"} {
				servertest.WaitHosted(t, e, name)
			}
			if got := promQuery(t, node, "up", linesBase); len(got) != 1 {
				t.Errorf("up: %v", got)
			}
			if got := promQuery(t, node, "cpu_v", linesBase); len(got) != 1 {
				t.Errorf("cpu_v: %v", got)
			}
		})
	}
}
