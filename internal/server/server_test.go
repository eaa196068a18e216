package server

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
)

func TestHealthReflectionAndFlushingShutdown(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := Config{DataDir: dir, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	rc, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	resp, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, svc := range resp.GetListServicesResponse().GetService() {
		found = found || svc.Name == "strata.v1.Datanode"
	}
	if !found {
		t.Fatalf("reflection lists %v", resp.GetListServicesResponse().GetService())
	}
	rc.CloseSend()
	pt := region.Point{Tags: []row.Tag{{Name: "h", Value: "a"}}, TS: 1, Fields: []region.Field{{Name: "v", Value: row.FloatValue(1)}}}
	if _, err := s.Engine().Write(ctx, "t", []region.Point{pt}, datanode.WriteOptions{CreateTable: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The shutdown flushed: the restarted engine has the row in an SST and
	// nothing in memtables.
	s2, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Shutdown(ctx)
	st, err := s2.Engine().Stats("t")
	if err != nil || st[0].Files != 1 || st[0].MemtableBytes != 0 {
		t.Fatalf("after restart: %+v %v", st, err)
	}
	// Address in use: a clear error, nothing left running.
	if _, err := Start(ctx, Config{DataDir: t.TempDir(), HTTPAddr: s2.HTTPAddr(), GRPCAddr: "127.0.0.1:0", Logger: cfg.Logger}); err == nil {
		t.Fatal("second server on a used address started")
	}
}
