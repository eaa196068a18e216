package agent

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

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

// forwardRecorder answers ForwardWrite, decoding each batch as the codec
// it names says.
type forwardRecorder struct {
	pb.UnimplementedDatanodeServer
	mu     sync.Mutex
	codecs []fwdbatch.Codec
	sizes  []int // of the batch as sent
	rows   []int // decoded
}

func (f *forwardRecorder) ForwardWrite(_ context.Context, req *pb.ForwardWriteRequest) (*pb.WriteResponse, error) {
	raw, err := fwdbatch.Decompress(fwdbatch.Codec(req.Compression), nil, req.Batch, req.Size)
	if err != nil {
		return nil, err
	}
	b, err := fwdbatch.Decode(raw)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.codecs = append(f.codecs, fwdbatch.Codec(req.Compression))
	f.sizes = append(f.sizes, len(req.Batch))
	f.rows = append(f.rows, len(b.Points))
	return &pb.WriteResponse{Written: int64(len(b.Points))}, nil
}

// A batch forwarded to an owner on another machine is compressed, to one
// on this machine (a loopback address) is not; a batch whose region moved
// from one to the other meanwhile is sent each way, from one encoding.
func TestForwardedBatchesAreCompressedBetweenMachinesOnly(t *testing.T) {
	for addr, want := range map[string]fwdbatch.Codec{
		"127.0.0.1:4001": fwdbatch.None, "127.3.2.1:4001": fwdbatch.None, "[::1]:4001": fwdbatch.None, "localhost:4001": fwdbatch.None,
		"10.0.0.7:4001": forwardCodec, "dn2:4001": forwardCodec, "[2001:db8::1]:4001": forwardCodec, "dn2.example.com:4001": forwardCodec,
	} {
		if got := codecFor(addr); got != want {
			t.Errorf("codecFor(%q) = %d, want %d", addr, got, want)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &forwardRecorder{}
	g := grpc.NewServer()
	pb.RegisterDatanodeServer(g, rec)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := pb.NewDatanodeClient(conn)
	a := &Agent{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var b region.Batch
	for i := range 500 {
		tags := []row.Tag{{Name: "host", Value: "host_" + strconv.Itoa(i%50)}}
		key, _ := row.EncodeSeries(nil, tags)
		b.Points = append(b.Points, row.Point{Tags: tags, TS: int64(i), Fields: []row.Field{{Name: "v", Value: row.FloatValue(float64(i % 7))}}})
		b.Keys = append(b.Keys, key)
	}
	id := layout.RegionID{Table: 7, Region: 1}
	var fb *forwarded
	defer func() { fb.release() }()
	// The client reaches the recorder on loopback whatever addr says: addr
	// is the owner's address as the agent knows it.
	for _, addr := range []string{"10.0.0.7:4001", ln.Addr().String(), "10.0.0.8:4001"} {
		if resp, err := a.forwardWrite(context.Background(), c, addr, "cpu", id, b, &fb); err != nil || resp.Written != 500 {
			t.Fatalf("to %s: %v %v", addr, resp, err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if want := []fwdbatch.Codec{forwardCodec, fwdbatch.None, forwardCodec}; !slices.Equal(rec.codecs, want) {
		t.Fatalf("codecs sent: %v, want %v", rec.codecs, want)
	}
	if !slices.Equal(rec.rows, []int{500, 500, 500}) {
		t.Fatalf("rows decoded: %v", rec.rows)
	}
	if rec.sizes[0] >= rec.sizes[1] || rec.sizes[2] != rec.sizes[0] {
		t.Fatalf("bytes sent: %v (compressed, raw, compressed)", rec.sizes)
	}
}
