package agent

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// oldDatanode is a datanode of a version before ForwardWrite: it answers
// Write only (ForwardWrite: Unimplemented).
type oldDatanode struct {
	pb.UnimplementedDatanodeServer
	mu     sync.Mutex
	writes []*pb.WriteRequest
}

func (o *oldDatanode) Write(_ context.Context, req *pb.WriteRequest) (*pb.WriteResponse, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.writes = append(o.writes, req)
	return &pb.WriteResponse{Written: int64(len(req.Points))}, nil
}

// An owner older than ForwardWrite (a rolling upgrade) gets the share
// through Write, as points, and is not asked with ForwardWrite again
// until legacyRetry has passed.
func TestForwardFallsBackToWriteForAnOlderOwner(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	old := &oldDatanode{}
	var mu sync.Mutex
	calls := map[string]int{} // by method
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		mu.Lock()
		calls[info.FullMethod]++
		mu.Unlock()
		return h(ctx, req)
	}))
	pb.RegisterDatanodeServer(g, old)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := pb.NewDatanodeClient(conn)
	a := &Agent{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	tags := []row.Tag{{Name: "host", Value: "a"}}
	key, _ := row.EncodeSeries(nil, tags)
	b := region.Batch{Points: []row.Point{{Tags: tags, TS: 1, Fields: []row.Field{{Name: "v", Value: row.FloatValue(2)}}}}, Keys: [][]byte{key}}
	id := layout.RegionID{Table: 7, Region: 1}
	for i := range 2 {
		var fb *forwarded
		resp, err := a.forwardWrite(context.Background(), c, ln.Addr().String(), "cpu", id, b, &fb)
		fb.release()
		if err != nil || resp.Written != 1 {
			t.Fatalf("write %d: %v %v", i, resp, err)
		}
		if !a.fwd.isLegacy(ln.Addr().String()) {
			t.Fatalf("write %d: the owner is not remembered as older", i)
		}
	}
	mu.Lock()
	if calls[pb.Datanode_ForwardWrite_FullMethodName] != 1 || calls[pb.Datanode_Write_FullMethodName] != 2 {
		t.Errorf("calls: %v (want ForwardWrite once, then Write twice)", calls)
	}
	mu.Unlock()
	old.mu.Lock()
	defer old.mu.Unlock()
	if len(old.writes) != 2 || old.writes[0].Region != id.String() || old.writes[0].Table != "cpu" || len(old.writes[0].Points) != 1 ||
		old.writes[0].Points[0].Fields[0].Value.GetFloat() != 2 {
		t.Fatalf("writes the older owner got: %v", old.writes)
	}
}
