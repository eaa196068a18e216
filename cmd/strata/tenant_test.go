package main

import (
	"slices"
	"testing"

	pb "github.com/stratadb/strata/proto/strata/v1"
)

func TestGCByTenant(t *testing.T) {
	regions := []*pb.GcRegionResult{
		{Region: "1/0", Tenant: "default", RemovedFiles: 2, WalSegments: 1, Bytes: 10},
		{Region: "2/0", Tenant: "a", RemovedFiles: 1, Bytes: 5},
		{Region: "2/1", Tenant: "a", Bytes: 1, Error: "boom"},
		{Region: "9/0"},
	}
	got := gcByTenant(regions, false)
	want := []string{
		"tenant (unknown table): 1 regions, 0 removed files and WAL segments, 0 bytes, 0 failed",
		"tenant a: 2 regions, 1 removed files and WAL segments, 6 bytes, 1 failed",
		"tenant default: 1 regions, 3 removed files and WAL segments, 10 bytes, 0 failed",
	}
	if !slices.Equal(got, want) {
		t.Errorf("fast:\n%q\nwant\n%q", got, want)
	}
	full := gcByTenant([]*pb.GcRegionResult{{Region: "2/0", Tenant: "a", Orphans: []*pb.GcObject{{Key: "k"}}, Deleted: 1, Bytes: 3}}, true)
	if want := []string{"tenant a: 1 regions, 1 orphans, 1 deleted, 3 bytes, 0 failed"}; !slices.Equal(full, want) {
		t.Errorf("full: %q", full)
	}
}
