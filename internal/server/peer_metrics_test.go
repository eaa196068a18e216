package server

import (
	"context"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/stratadb/strata/internal/peerwire"
)

// TestPeerBytesCountsMessages: a call on a connection dialled with the
// peer stats handler counts its request and response, each as its
// marshalled size plus the 5-byte gRPC message header, under its method.
func TestPeerBytesCountsMessages(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	pb := newPeerBytes(prometheus.NewRegistry())
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(pb))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &healthpb.HealthCheckRequest{Service: ""}
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	h := pb.bytes
	const method = "/grpc.health.v1.Health/Check"
	if got, want := testutil.ToFloat64(h.WithLabelValues("sent", method)), float64(proto.Size(req)+5); got != want {
		t.Errorf("sent %v bytes, want %v", got, want)
	}
	if got, want := testutil.ToFloat64(h.WithLabelValues("received", method)), float64(proto.Size(resp)+5); got != want {
		t.Errorf("received %v bytes, want %v", got, want)
	}
}

// TestPeerBytesCountsPeerwireFrames: peerwire's frames count under the
// gRPC method's name, each direction apart, every frame added (the
// counters are kept after the first frame, not looked up again).
func TestPeerBytesCountsPeerwireFrames(t *testing.T) {
	pb := newPeerBytes(prometheus.NewRegistry())
	pb.peerwire("sent", peerwire.ScanColumns, 100)
	pb.peerwire("sent", peerwire.ScanColumns, 20)
	pb.peerwire("received", peerwire.ScanColumns, 7)
	pb.peerwire("sent", peerwire.ForwardWrite, 3)
	for _, c := range []struct {
		dir, method string
		want        float64
	}{
		{"sent", "/strata.v1.Datanode/ScanColumns", 120},
		{"received", "/strata.v1.Datanode/ScanColumns", 7},
		{"sent", "/strata.v1.Datanode/ForwardWrite", 3},
		{"received", "/strata.v1.Datanode/ForwardWrite", 0},
	} {
		if got := testutil.ToFloat64(pb.bytes.WithLabelValues(c.dir, c.method)); got != c.want {
			t.Errorf("%s %s: %v bytes, want %v", c.dir, c.method, got, c.want)
		}
	}
}
