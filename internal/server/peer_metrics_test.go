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
