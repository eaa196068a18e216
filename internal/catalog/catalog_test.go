package catalog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
)

// A dropped table frees its name at its first sweep, and its id stays in
// the sweeps (persisted) until the final sweep is done.
func TestDroppedTableKeepsItsSweepUntilDone(t *testing.T) {
	ctx := context.Background()
	store := objstoretest.Mem(t)
	c, err := Open(ctx, StoreBackend{store}, 1)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := c.CreateTable(ctx, TableSpec{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Forget(ctx, "t", time.Now()); !errors.Is(err, ErrTableNotFound) {
		t.Fatalf("forgetting a table not being dropped: %v", err)
	}
	if _, err := c.MarkDropping(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	swept := time.Now().UTC().Round(0)
	if err := c.Forget(ctx, "t", swept); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTable(ctx, TableSpec{Name: "t"}); err != nil {
		t.Fatalf("the name is not free after the first sweep: %v", err)
	}
	// Another process (the next leader) sees the pending final sweep.
	c2, err := Open(ctx, StoreBackend{store}, 1)
	if err != nil {
		t.Fatal(err)
	}
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
	// A catalog kept in the store keeps only its newest version.
	if objs, _ := objstore.ListAll(ctx, store, StorePrefix, 100); len(objs) != 1 {
		t.Fatalf("%d catalog versions kept", len(objs))
	}
}
