package fsck_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/catalog/storecat"
	"github.com/stratadb/strata/internal/fsck"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/tenant"
)

// TestCountsPerTenant: fsck sums its regions up by their tables'
// tenant, through the catalog: a's cpu and the default tenant's cpu are
// two tables, two tenants.
func TestCountsPerTenant(t *testing.T) {
	ctx := context.Background()
	store := objstoretest.Mem(t)
	cat, err := catalog.Open(ctx, storecat.Backend{Store: store}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	var a catalog.Table
	for _, spec := range []catalog.TableSpec{{Name: "cpu", Regions: 1}, {Name: tenant.Qualify("a", "cpu"), Regions: 2}, {Name: tenant.Qualify("a", "mem"), Regions: 1}} {
		tb, err := cat.CreateTable(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if spec.Name == tenant.Qualify("a", "cpu") {
			a = tb
		}
	}
	// An unowned object in a's first region.
	if err := store.Put(ctx, layout.RegionID{Table: a.ID, Region: 0}.String()+"/stray", []byte("x")); err != nil {
		t.Fatal(err)
	}
	rep, err := fsck.Check(ctx, store, fsck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Tenants) != 2 {
		t.Fatalf("tenants %v", rep.Tenants)
	}
	// No region has a manifest: each is missing one.
	if c := rep.Tenants["a"]; c.Regions != 3 || c.Missing != 3 || c.Orphans != 1 {
		t.Errorf("tenant a: %+v", *c)
	}
	if c := rep.Tenants[tenant.Default]; c.Regions != 1 || c.Missing != 1 || c.Orphans != 0 {
		t.Errorf("the default tenant: %+v", *c)
	}
	for _, g := range rep.Regions {
		if g.Table != "cpu" && g.Table != "mem" {
			t.Errorf("region %s: table %q, want the tenant's own name", g.ID, g.Table)
		}
	}
	// --table of a tenant.
	rep, err = fsck.Check(ctx, store, fsck.Options{Table: "cpu", Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Regions) != 2 || rep.Regions[0].Tenant != "a" {
		t.Errorf("a's cpu: %+v", rep.Regions)
	}
	if _, err := fsck.Check(ctx, store, fsck.Options{Table: "mem"}); err == nil {
		t.Error("the default tenant's mem: found")
	}
	// A name is the tenant's only: b has no cpu (the default tenant's is
	// not b's), and a catalog name is no name of the default tenant's.
	for _, o := range []fsck.Options{{Table: "cpu", Tenant: "b"}, {Table: tenant.Qualify("a", "cpu")}} {
		if rep, err := fsck.Check(ctx, store, o); !errors.Is(err, fsck.ErrNoTable) {
			t.Errorf("table %q of tenant %q: %v (%d regions), want ErrNoTable", o.Table, o.Tenant, err, len(rep.Regions))
		}
	}
	// An id names a table whatever its tenant (the store's operator's).
	if rep, err := fsck.Check(ctx, store, fsck.Options{Table: strconv.FormatUint(uint64(a.ID), 10)}); err != nil || len(rep.Regions) != 2 {
		t.Errorf("table id %d: %v", a.ID, err)
	}
	// A catalog given (a cluster's) is the one used.
	rep, err = fsck.Check(ctx, store, fsck.Options{Tables: []catalog.Table{a}})
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Tenants["a"]; len(rep.Tenants) != 1 || c.Regions != 2 {
		t.Errorf("with a's cpu the catalog: %v", rep.Tenants)
	}
}
