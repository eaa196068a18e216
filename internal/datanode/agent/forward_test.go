package agent

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/fwdbatch"
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
	old := &oldDatanode{}
	var mu sync.Mutex
	calls := map[string]int{} // by method
	addr, c := serveDatanode(t, old, grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		mu.Lock()
		calls[info.FullMethod]++
		mu.Unlock()
		return h(ctx, req)
	}))
	a := &Agent{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	tags := []row.Tag{{Name: "host", Value: "a"}}
	key, _ := row.EncodeSeries(nil, tags)
	b := region.Batch{Points: []row.Point{{Tags: tags, TS: 1, Fields: []row.Field{{Name: "v", Value: row.FloatValue(2)}}}}, Keys: [][]byte{key}}
	id := layout.RegionID{Table: 7, Region: 1}
	for i := range 2 {
		var fb *forwarded
		resp, err := a.forwardWrite(context.Background(), c, addr, "cpu", id, b, &fb)
		fb.release()
		if err != nil || resp.Written != 1 {
			t.Fatalf("write %d: %v %v", i, resp, err)
		}
		if !a.fwd.isLegacy(addr) {
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

// v1Datanode reads forwarded batches as a build before version 2 did: it
// refuses any other version as a malformed batch.
type v1Datanode struct {
	pb.UnimplementedDatanodeServer
	mu       sync.Mutex
	versions []byte
}

func (o *v1Datanode) ForwardWrite(_ context.Context, req *pb.ForwardWriteRequest) (*pb.WriteResponse, error) {
	raw, err := fwdbatch.Decompress(fwdbatch.Codec(req.Compression), nil, req.Batch, req.Size)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	o.mu.Lock()
	o.versions = append(o.versions, raw[0])
	o.mu.Unlock()
	if raw[0] != fwdbatch.V1 {
		return nil, status.Errorf(codes.InvalidArgument, "malformed forwarded batch: version %d, not 1", raw[0])
	}
	b, err := fwdbatch.Decode(raw)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &pb.WriteResponse{Written: int64(len(b.Points))}, nil
}

// A share goes to an owner in the newest encoding it announces
// (cluster.NodeInfo.Forward): version 1 to a build that announces none,
// version 2 to this one's, and version 1 again to one that refuses version
// 2; the share encoded for one owner is encoded again when it is retried
// on an owner of the other kind.
func TestForwardVersionByOwner(t *testing.T) {
	serve := func() (*v1Datanode, string, pb.DatanodeClient) {
		o := &v1Datanode{}
		addr, c := serveDatanode(t, o)
		return o, addr, c
	}
	old, oldAddr, oldc := serve()
	cur, curAddr, curc := serve()
	a := &Agent{log: slog.New(slog.NewTextHandler(io.Discard, nil)), nodes: map[string]cluster.NodeInfo{
		"old": {ID: "old", GRPCAddr: oldAddr},
		"cur": {ID: "cur", GRPCAddr: curAddr, Forward: fwdbatch.Latest},
	}}
	tags := []row.Tag{{Name: "host", Value: "a"}}
	key, _ := row.EncodeSeries(nil, tags)
	b := region.Batch{Keys: [][]byte{key, key}, Points: []row.Point{
		{Tags: tags, TS: 1, Fields: []row.Field{{Name: "v", Value: row.FloatValue(2)}}},
		{Tags: tags, TS: 2, Fields: []row.Field{{Name: "v", Value: row.FloatValue(3)}}},
	}}
	id := layout.RegionID{Table: 7, Region: 1}
	var fb *forwarded
	defer func() { fb.release() }()
	send := func(c pb.DatanodeClient, addr string) {
		t.Helper()
		if resp, err := a.forwardWrite(context.Background(), c, addr, "cpu", id, b, &fb); err != nil || resp.Written != 2 {
			t.Fatalf("to %s: %v %v", addr, resp, err)
		}
	}
	send(oldc, oldAddr)
	// The region moved to an owner that announces version 2: the same
	// share, in version 2. That owner is an older build that took the
	// address (a rollback this node has not heard of yet): it refuses
	// version 2, and the share goes again in version 1, as do the next
	// ones to that address.
	send(curc, curAddr)
	send(oldc, oldAddr)
	send(curc, curAddr)
	old.mu.Lock()
	cur.mu.Lock()
	defer old.mu.Unlock()
	defer cur.mu.Unlock()
	if string(old.versions) != "\x01\x01" || string(cur.versions) != "\x02\x01\x01" {
		t.Errorf("versions sent: older owner %v, the owner announcing version 2 %v; want [1 1] and [2 1 1]", old.versions, cur.versions)
	}
}

// serveDatanode serves srv over gRPC on a loopback port until the test
// ends, and returns its address and a client of it.
func serveDatanode(t *testing.T, srv pb.DatanodeServer, opts ...grpc.ServerOption) (string, pb.DatanodeClient) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	pb.RegisterDatanodeServer(g, srv)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return ln.Addr().String(), pb.NewDatanodeClient(conn)
}
