package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/fwdbatch"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/peerwire"
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
	a := &Agent{log: slog.New(slog.NewTextHandler(io.Discard, nil)), forwards: newForwards()}
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
	a := &Agent{log: slog.New(slog.NewTextHandler(io.Discard, nil)), forwards: newForwards(), nodes: map[string]cluster.NodeInfo{
		"old": {ID: "old", GRPCAddr: oldAddr},
		"cur": {ID: "cur", GRPCAddr: curAddr, Forward: fwdbatch.Latest},
	}}
	b, id := twoPoints()
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
	return serveDatanodeOn(t, nil, srv, opts...)
}

// serveDatanodeOn is serveDatanode with peer, if set, serving peerwire on
// the same port.
func serveDatanodeOn(t *testing.T, peer *peerwire.Server, srv pb.DatanodeServer, opts ...grpc.ServerOption) (string, pb.DatanodeClient) {
	t.Helper()
	var ln net.Listener
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if peer != nil {
		ln = peer.Listener(ln)
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

// shareDatanode takes forwarded shares of any version, counting rows.
type shareDatanode struct {
	pb.UnimplementedDatanodeServer
	mu   sync.Mutex
	rows int
}

func (o *shareDatanode) ForwardWrite(_ context.Context, req *pb.ForwardWriteRequest) (*pb.WriteResponse, error) {
	raw, err := fwdbatch.Decompress(fwdbatch.Codec(req.Compression), nil, req.Batch, req.Size)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	b, err := fwdbatch.Decode(raw)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if req.Table != "cpu" {
		return nil, status.Errorf(codes.NotFound, "no table %q", req.Table)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rows += len(b.Points)
	return &pb.WriteResponse{Written: int64(len(b.Points))}, nil
}

// A share goes to its owner over peerwire when the owner serves
// ForwardWrite there, with the owner's answer and errors as over gRPC; an
// owner whose peerwire lacks it (a build that reads column scans over
// peerwire only) gets it over gRPC, and is not asked over peerwire again
// until legacyRetry has passed; so does an owner older than peerwire.
func TestForwardOverPeerwire(t *testing.T) {
	for _, tc := range []struct {
		name              string
		peer, peerForward bool // the owner serves peerwire; ForwardWrite there
	}{
		{"owner takes peerwire", true, true},
		{"owner's peerwire lacks ForwardWrite", true, false},
		{"owner older than peerwire", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owner := &shareDatanode{}
			var mu sync.Mutex
			frames := map[byte]int{}      // peerwire call frames received, by method
			grpcCalls := map[string]int{} // by method
			var ps *peerwire.Server
			if tc.peer {
				handlers := map[byte]peerwire.Handler{peerwire.ScanColumns: func(context.Context, []byte, func(proto.Message) error) error { return nil }}
				if tc.peerForward {
					handlers[peerwire.ForwardWrite] = func(ctx context.Context, req []byte, send func(proto.Message) error) error {
						var r pb.ForwardWriteRequest
						if err := proto.Unmarshal(req, &r); err != nil {
							return err
						}
						resp, err := owner.ForwardWrite(ctx, &r)
						if err != nil {
							return err
						}
						return send(resp)
					}
				}
				ps = peerwire.NewServer(peerwire.ServerOptions{Handlers: handlers, Count: func(dir string, m byte, _ int) {
					if dir == "received" {
						mu.Lock()
						frames[m]++
						mu.Unlock()
					}
				}})
				t.Cleanup(ps.Close)
			}
			addr, c := serveDatanodeOn(t, ps, owner, grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				mu.Lock()
				grpcCalls[info.FullMethod]++
				mu.Unlock()
				return h(ctx, req)
			}))
			peer := peerwire.NewClient(peerwire.ClientOptions{})
			t.Cleanup(peer.Close)
			a := &Agent{log: slog.New(slog.NewTextHandler(io.Discard, nil)), forwards: newForwards(), opts: Options{Peer: peer},
				nodes: map[string]cluster.NodeInfo{"o": {ID: "o", GRPCAddr: addr, Forward: fwdbatch.Latest}}}
			b, id := twoPoints()
			for i := range 3 {
				var fb *forwarded
				resp, err := a.forwardWrite(context.Background(), c, addr, "cpu", id, b, &fb)
				fb.release()
				if err != nil || resp.Written != 2 {
					t.Fatalf("write %d: %v %v", i, resp, err)
				}
			}
			// The owner's error keeps its code across the hop.
			var fb *forwarded
			_, err := a.forwardWrite(context.Background(), c, addr, "nosuch", id, b, &fb)
			fb.release()
			if status.Code(err) != codes.NotFound {
				t.Errorf("a share of a table the owner lacks: %v, want NotFound", err)
			}
			mu.Lock()
			defer mu.Unlock()
			owner.mu.Lock()
			defer owner.mu.Unlock()
			if owner.rows != 6 {
				t.Errorf("the owner took %d rows, want 6", owner.rows)
			}
			got := fmt.Sprintf("peerwire frames %d, gRPC calls %d, counted %v over peerwire and %v over gRPC",
				frames[peerwire.ForwardWrite], grpcCalls[pb.Datanode_ForwardWrite_FullMethodName],
				testutil.ToFloat64(a.forwards.WithLabelValues("peerwire")), testutil.ToFloat64(a.forwards.WithLabelValues("grpc")))
			want := map[string]string{
				// Every share over peerwire.
				"owner takes peerwire": "peerwire frames 4, gRPC calls 0, counted 3 over peerwire and 0 over gRPC",
				// Asked once over peerwire (Unimplemented), then over gRPC.
				"owner's peerwire lacks ForwardWrite": "peerwire frames 1, gRPC calls 4, counted 0 over peerwire and 4 over gRPC",
				// The connection closed at the magic: gRPC.
				"owner older than peerwire": "peerwire frames 0, gRPC calls 4, counted 0 over peerwire and 4 over gRPC",
			}[tc.name]
			if got != want {
				t.Errorf("%s; want %s", got, want)
			}
			if tc.peer && !tc.peerForward && !a.fwd.is(&a.fwd.grpc, addr) {
				t.Error("the owner is not remembered as taking forwarded writes over gRPC only")
			}
			if !tc.peer && peer.Supported(addr) {
				t.Error("the owner is not remembered as older than peerwire")
			}
		})
	}
}

// twoPoints is a share of two points of one series, and its region.
func twoPoints() (region.Batch, layout.RegionID) {
	tags := []row.Tag{{Name: "host", Value: "a"}}
	key, _ := row.EncodeSeries(nil, tags)
	return region.Batch{Keys: [][]byte{key, key}, Points: []row.Point{
		{Tags: tags, TS: 1, Fields: []row.Field{{Name: "v", Value: row.FloatValue(2)}}},
		{Tags: tags, TS: 2, Fields: []row.Field{{Name: "v", Value: row.FloatValue(3)}}},
	}}, layout.RegionID{Table: 7, Region: 1}
}
