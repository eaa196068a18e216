package walstream_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/walstream"
)

// A range whose segments are deleted in a batch is collected only when
// every delete succeeded: a segment whose delete failed keeps the range
// in the region's garbage (and in the writer's index), and the next run
// finishes it.
func TestCollectKeepsARangeWithAFailedDelete(t *testing.T) {
	ctx := context.Background()
	mem := objstoretest.Mem(t)
	self := layout.RegionID{Table: 1, Region: 0}
	for n := uint64(1); n <= 3; n++ {
		if err := mem.Put(ctx, layout.StreamKey("dn1/1", n), []byte("segment")); err != nil {
			t.Fatal(err)
		}
	}
	var forgot []uint64
	peers := walstream.Peers{
		Regions: func(string, uint64) ([]layout.RegionID, bool) { return []layout.RegionID{self}, true },
		State:   func(context.Context, layout.RegionID) (*manifest.State, error) { return nil, nil },
		Forget:  func(_ string, n uint64) { forgot = append(forgot, n) },
	}
	ranges := []manifest.StreamRef{{Stream: "dn1/1", From: 1, End: 4}}
	failing := faultstore.New(mem, faultstore.Rule{Match: faultstore.KeyContains(layout.StreamKey("dn1/1", 2)), N: 1, Action: faultstore.Fail})
	rep, err := walstream.Collect(ctx, failing, self, ranges, peers, false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Deleted != 2 || len(rep.Collected) != 0 || !slices.Equal(forgot, []uint64{1, 3}) {
		t.Fatalf("with segment 2's delete failing: %+v, forgot %v; want 2 deleted, nothing collected, 1 and 3 forgotten", rep, forgot)
	}
	if _, err := mem.Attributes(ctx, layout.StreamKey("dn1/1", 2)); err != nil {
		t.Fatalf("segment 2: %v", err)
	}
	forgot = nil
	rep, err = walstream.Collect(ctx, mem, self, ranges, peers, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Collected, ranges) || !slices.Contains(forgot, 2) {
		t.Fatalf("the next run: %+v, forgot %v; want the range collected", rep, forgot)
	}
	if objs, _ := objstore.ListAll(ctx, mem, layout.StreamPrefix("dn1/1"), 10); len(objs) != 0 {
		t.Fatalf("left %v", objs)
	}
}
