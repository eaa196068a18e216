package grpcapi_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stratadb/strata/internal/fsck"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/wal"
	"github.com/stratadb/strata/internal/wire"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// TestDropReleasesStreamSegments: two tables write through the node's one
// WAL stream, so its segments hold blocks of both. Dropping one deletes
// every segment only it needed and keeps those the other needs: no stream
// segment left holds a block of the dropped table but for ones the kept
// table shares, and fsck finds nothing unowned.
func TestDropReleasesStreamSegments(t *testing.T) {
	ctx := context.Background()
	store := objstoretest.Mem(t)
	n := servertest.Start(t, store, servertest.Options{})
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewDatanodeClient(conn)
	point := func(ts int64) []*pb.Point {
		return []*pb.Point{{Ts: ts, Tags: []*pb.Tag{{Name: "host", Value: "a"}}, Fields: []*pb.Field{{Name: "v", Value: wire.FromValue(row.FloatValue(1))}}}}
	}
	// Physical tables (created explicitly), each with regions of its own:
	// a logical table has no regions or WAL ranges of its own to release.
	for _, table := range []string{"gone", "kept"} {
		if _, err := c.CreateTable(ctx, &pb.CreateTableRequest{Name: table}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		for _, table := range []string{"gone", "kept"} {
			if _, err := c.Write(ctx, &pb.WriteRequest{Table: table, Points: point(int64(i)), CreateTable: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var gone uint32
	if d, err := c.DescribeTable(ctx, &pb.DescribeTableRequest{Name: "gone"}); err != nil {
		t.Fatal(err)
	} else {
		gone = d.Table.Id
	}
	if _, err := c.DropTable(ctx, &pb.DropTableRequest{Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	// The drop ends with the table's prefix swept.
	deadline := time.Now().Add(time.Minute)
	for {
		objs, err := objstore.ListAll(ctx, store, layout.TablePrefix(gone), 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d objects of the dropped table after a minute", len(objs))
		}
		time.Sleep(50 * time.Millisecond) // polling the store: the drop finishes in the background
	}
	objs, err := objstore.ListAll(ctx, store, layout.StreamsPrefix, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var data, fences, shared int
	for _, o := range objs {
		_, num, _ := layout.ParseStreamKey(o.Key)
		b, err := store.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		seg, err := wal.DecodeStream(num, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		if seg.Fence {
			fences++
			continue
		}
		data++
		hasGone, hasKept := false, false
		for _, blk := range seg.Blocks {
			hasGone = hasGone || blk.Region.Table == gone
			hasKept = hasKept || blk.Region.Table != gone
		}
		if hasGone && !hasKept {
			t.Errorf("segment %s holds only the dropped table's entries", o.Key)
		}
		if hasGone {
			shared++
		}
	}
	if fences == 0 {
		t.Error("the drop did not seal the node's stream")
	}
	t.Logf("after the drop: %d stream segments (%d shared with the dropped table), %d fences", data, shared, fences)
	rep, err := fsck.Check(ctx, store, fsck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OrphanCount() != 0 {
		t.Fatalf("fsck: %d unowned: %+v", rep.OrphanCount(), rep.Orphans)
	}
	// The node rolled over and writes on.
	if _, err := c.Write(ctx, &pb.WriteRequest{Table: "kept", Points: point(99)}); err != nil {
		t.Fatalf("write after the drop: %v", err)
	}
}
