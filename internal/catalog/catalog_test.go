package catalog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/catalog/storecat"
	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
)

// backends runs test against every backend: newBackend returns a backend
// over the same catalog each time, as another process would open it.
func backends(t *testing.T, test func(t *testing.T, newBackend func() catalog.Backend)) {
	t.Run("store", func(t *testing.T) {
		store := objstoretest.Mem(t)
		test(t, func() catalog.Backend { return storecat.Backend{Store: store} })
	})
	t.Run("etcd", func(t *testing.T) {
		cli := clustertest.Etcd(t)
		test(t, func() catalog.Backend { return catalog.NewEtcdBackend(cli) })
	})
}

func open(t *testing.T, b catalog.Backend) *catalog.Catalog {
	t.Helper()
	c, err := catalog.Open(context.Background(), b, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// A dropped table frees its name at its first sweep, and its id stays in
// the sweeps (persisted) until the final sweep is done.
func TestDroppedTableKeepsItsSweepUntilDone(t *testing.T) {
	backends(t, func(t *testing.T, newBackend func() catalog.Backend) {
		ctx := context.Background()
		c := open(t, newBackend())
		tb, err := c.CreateTable(ctx, catalog.TableSpec{Name: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Forget(ctx, "t", time.Now()); !errors.Is(err, catalog.ErrTableNotFound) {
			t.Fatalf("forgetting a table not being dropped: %v", err)
		}
		if _, err := c.MarkDropping(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CreateTable(ctx, catalog.TableSpec{Name: "t"}); !errors.Is(err, catalog.ErrTableExists) {
			t.Fatalf("creating a table being dropped: %v", err)
		}
		swept := time.Now().UTC().Round(0)
		if err := c.Forget(ctx, "t", swept); err != nil {
			t.Fatal(err)
		}
		again, err := c.CreateTable(ctx, catalog.TableSpec{Name: "t"})
		if err != nil {
			t.Fatalf("the name is not free after the first sweep: %v", err)
		}
		if again.ID == tb.ID {
			t.Fatalf("the table created again got the dropped table's id %d", tb.ID)
		}
		// Another process (the next leader) sees the pending final sweep.
		c2 := open(t, newBackend())
		sweeps, err := c2.Sweeps(ctx)
		if err != nil || !sweeps[tb.ID].Equal(swept) || len(sweeps) != 1 {
			t.Fatalf("sweeps %v %v, want table %d at %v", sweeps, err, tb.ID, swept)
		}
		if err := c2.SweepDone(ctx, tb.ID); err != nil {
			t.Fatal(err)
		}
		if sweeps, _ := c.Sweeps(ctx); len(sweeps) != 0 {
			t.Fatalf("sweeps after the final one: %v", sweeps)
		}
		if b, ok := newBackend().(storecat.Backend); ok {
			// A catalog kept in the store keeps only its newest version.
			if objs, _ := objstore.ListAll(ctx, b.Store, storecat.Prefix, 100); len(objs) != 1 {
				t.Fatalf("%d catalog versions kept", len(objs))
			}
		}
	})
}

// Each process's changes reach the other's copy, and a change made from a
// copy that is behind (a table the other process changed meanwhile) is
// made again from the newest record, not lost.
func TestTwoProcessesSeeEachOthersChanges(t *testing.T) {
	backends(t, func(t *testing.T, newBackend func() catalog.Backend) {
		ctx := context.Background()
		a, b := open(t, newBackend()), open(t, newBackend())
		if _, err := a.CreateTable(ctx, catalog.TableSpec{Name: "x", Regions: 3}); err != nil {
			t.Fatal(err)
		}
		got, err := b.Table(ctx, "x")
		if err != nil || got.Regions != 3 {
			t.Fatalf("the other process reads %+v, %v", got, err)
		}
		// b's copy of x is current; a's is not once b changes it.
		if _, err := b.UpdateTable(ctx, "x", func(t *catalog.Table) error { t.TTL = time.Hour; return nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := a.UpdateTable(ctx, "x", func(t *catalog.Table) error { t.CompactionWindow = time.Minute; return nil }); err != nil {
			t.Fatal(err)
		}
		got, err = b.Table(ctx, "x")
		if err != nil || got.TTL != time.Hour || got.CompactionWindow != time.Minute {
			t.Fatalf("after both updates: %+v, %v (an update was lost)", got, err)
		}
		if _, err := b.CreateTable(ctx, catalog.TableSpec{Name: "y"}); err != nil {
			t.Fatal(err)
		}
		tables, err := a.Tables(ctx)
		if err != nil || len(tables) != 2 || tables[0].Name != "x" || tables[1].Name != "y" || tables[0].ID == tables[1].ID {
			t.Fatalf("tables %+v, %v", tables, err)
		}
		if _, err := a.MarkDropping(ctx, "y"); err != nil {
			t.Fatal(err)
		}
		if err := b.Forget(ctx, "y", time.Now()); err != nil {
			t.Fatalf("forgetting a table another process marked dropping: %v", err)
		}
		if _, err := a.Table(ctx, "y"); !errors.Is(err, catalog.ErrTableNotFound) {
			t.Fatalf("a forgotten table: %v", err)
		}
		if _, ok := a.Lookup("y"); ok {
			t.Fatal("a forgotten table is still in the copy after Sync")
		}
	})
}

// A logical table has no regions, TTL or compaction window; it persists
// as logical; LinesTable is not dropped.
func TestLogicalTables(t *testing.T) {
	backends(t, func(t *testing.T, newBackend func() catalog.Backend) {
		ctx := context.Background()
		c := open(t, newBackend())
		for _, bad := range []catalog.TableSpec{
			{Name: "a", Logical: true, Regions: 2},
			{Name: "a", Logical: true, TTL: time.Hour},
			{Name: "a", Logical: true, CompactionWindow: time.Hour},
			{Name: catalog.LinesTable, Logical: true},
			{Name: catalog.MetricsTable, Logical: true},
		} {
			if _, err := c.CreateTable(ctx, bad); !errors.Is(err, catalog.ErrInvalidTable) {
				t.Fatalf("create %+v: %v", bad, err)
			}
		}
		lines, err := c.CreateTable(ctx, catalog.TableSpec{Name: catalog.LinesTable})
		if err != nil || lines.Regions != 1 || lines.Logical || !lines.Schema.Labels {
			t.Fatalf("%s: %+v %v", catalog.LinesTable, lines, err)
		}
		a, err := c.CreateTable(ctx, catalog.TableSpec{Name: "a", Logical: true})
		if err != nil || a.Regions != 0 || !a.Logical || a.Schema.Labels {
			t.Fatalf("a: %+v %v", a, err)
		}
		if got, err := open(t, newBackend()).Table(ctx, "a"); err != nil || !got.Logical || got.Regions != 0 {
			t.Fatalf("a as another process reads it: %+v %v", got, err)
		}
		if _, err := c.MarkDropping(ctx, catalog.LinesTable); !errors.Is(err, catalog.ErrInvalidTable) {
			t.Fatalf("drop %s: %v", catalog.LinesTable, err)
		}
		// Gone: given to a table no longer live; not an id never given.
		if c.Gone(a.ID) || c.Gone(lines.ID) || c.Gone(a.ID+1) || c.Gone(0) {
			t.Fatal("a live table's id, or one never given, is gone")
		}
		if _, err := c.MarkDropping(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if !c.Gone(a.ID) {
			t.Fatal("the id of a table being dropped is not gone")
		}
		if err := c.Forget(ctx, "a", time.Now()); err != nil {
			t.Fatal(err)
		}
		other := open(t, newBackend())
		if !c.Gone(a.ID) || !other.Gone(a.ID) || other.Gone(a.ID+1) {
			t.Fatal("a forgotten table's id is not gone")
		}
	})
}

// The count rule itself: a flag's value if set, else one region per live
// datanode, within 1 and MaxRegions.
func TestDefaultRegionCount(t *testing.T) {
	for _, c := range []struct {
		def  uint32
		live int
		want uint32
	}{
		{0, 1, 1}, // a standalone
		{0, 3, 3}, // a cluster of three
		{0, 0, 1}, // nobody registered yet (a write reaches a datanode before its own registration)
		{2, 3, 2}, // the flag wins
		{5, 1, 5}, // even over fewer datanodes
		{0, 1000, catalog.MaxRegions},
	} {
		if got := catalog.DefaultRegionCount(c.def, c.live); got != c.want {
			t.Errorf("DefaultRegionCount(%d, %d) = %d, want %d", c.def, c.live, got, c.want)
		}
	}
}

func TestValidateQualifiedTableName(t *testing.T) {
	for _, ok := range []string{"cpu", catalog.MetricsTable, catalog.LinesTable, "__t/a/cpu", "__t/a/__metrics", "__t/a/__lines", "__t/a/x/y"} {
		if err := catalog.ValidateTableName(ok); err != nil {
			t.Errorf("catalog.ValidateTableName(%q) = %v", ok, err)
		}
	}
	// A default tenant's name that is not tenant.Qualify's, a bad tenant,
	// a tenant's reserved-prefix name.
	for _, bad := range []string{"__t/default/cpu", "__t/default/__t/b/cpu", "__t/a|b/cpu", "__t/../cpu", "__t/a/__x", "__t/nocut", "__t/a/"} {
		if err := catalog.ValidateTableName(bad); !errors.Is(err, catalog.ErrInvalidTable) {
			t.Errorf("catalog.ValidateTableName(%q) = %v, want ErrInvalidTable", bad, err)
		}
	}
	if !catalog.IsMetrics("__t/a/__metrics") || !catalog.IsLines("__t/a/__lines") || !catalog.Reserved("__t/a/__lines") || catalog.Reserved("__t/a/cpu") {
		t.Error("a tenant's reserved tables")
	}
	if catalog.LinesOf("__t/a/cpu") != "__t/a/__lines" || catalog.LinesOf("cpu") != catalog.LinesTable || catalog.MetricsOf("a") != "__t/a/__metrics" || catalog.MetricsOf("default") != catalog.MetricsTable {
		t.Error("catalog.LinesOf, MetricsOf")
	}
}
