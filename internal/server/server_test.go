package server_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/catalog/storecat"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

func TestHealthReflectionAndFlushingShutdown(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := server.Config{DataDir: dir, Standalone: true, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s, err := server.Start(ctx, cfg)
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
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
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
	if err := rc.CloseSend(); err != nil {
		t.Fatal(err)
	}
	pt := row.Point{Tags: []row.Tag{{Name: "h", Value: "a"}}, TS: 1, Fields: []row.Field{{Name: "v", Value: row.FloatValue(1)}}}
	if _, err := s.Engine().Write(ctx, "t", []row.Point{pt}, datanode.WriteOptions{CreateTable: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The shutdown flushed: the restarted engine has the row in an SST and
	// nothing in memtables.
	s2, err := server.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s2.Shutdown(ctx) }()
	servertest.WaitHosted(t, s2.Engine(), "t")
	st, err := s2.Engine().Stats(context.Background(), "t")
	if err != nil || st[0].Files != 1 || st[0].MemtableBytes != 0 {
		t.Fatalf("after restart: %+v %v", st, err)
	}
	// Address in use: a clear error, nothing left running.
	if _, err := server.Start(ctx, server.Config{DataDir: t.TempDir(), Standalone: true, HTTPAddr: s2.HTTPAddr(), GRPCAddr: "127.0.0.1:0", Logger: cfg.Logger}); err == nil {
		t.Fatal("second server on a used address started")
	}
	// No etcd and not standalone: refused, with the fix in the message.
	if _, err := server.Start(ctx, server.Config{DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Logger: cfg.Logger}); err == nil || !strings.Contains(err.Error(), "standalone") {
		t.Fatalf("a datanode without etcd: %v", err)
	}
}

// A store written by a standalone without metasrv (catalog in the store)
// opens under the standalone that runs metasrv: the catalog moves to etcd
// (and leaves the store), the table's regions are placed on this process,
// the data reads back, and the admin API answers on the gRPC address.
func TestStandaloneRunsMetasrvAndImportsTheStoreCatalog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := objstore.Open(ctx, "file://"+dir+"/store", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// What such a standalone left: a catalog in the store, and unflushed
	// WALs (they replay under the new owner).
	cat, err := catalog.Open(ctx, storecat.Backend{Store: store}, 1)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := cat.CreateTable(ctx, catalog.TableSpec{Name: "legacy", Regions: 3})
	if err != nil {
		t.Fatal(err)
	}
	var pts []row.Point
	for i := range 30 {
		pts = append(pts, row.Point{Tags: []row.Tag{{Name: "h", Value: string(rune('a' + i%7))}}, TS: int64(i), Fields: []row.Field{{Name: "v", Value: row.FloatValue(float64(i))}}})
	}
	base, _ := schema.New(schema.DefaultTimestamp)
	add, err := region.ValidateBatch(pts, base)
	if err != nil {
		t.Fatal(err)
	}
	sch, _ := add.Result()
	if _, err := cat.UpdateTable(ctx, "legacy", func(t *catalog.Table) error { t.Schema = sch.Manifest(); return nil }); err != nil {
		t.Fatal(err)
	}
	shares := make([][]row.Point, tb.Regions)
	for _, p := range pts {
		key, _ := row.EncodeSeries(nil, p.Tags)
		i := layout.Route(key, tb.Regions)
		shares[i] = append(shares[i], p)
	}
	for i, share := range shares {
		r, err := region.Open(ctx, store, layout.RegionID{Table: tb.ID, Region: uint32(i)}, region.Options{Create: true, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Write(ctx, share); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(ctx, region.CloseOptions{}); err != nil { // unflushed
			t.Fatal(err)
		}
	}
	store.Close()

	s, err := server.Start(ctx, server.Config{DataDir: dir, Standalone: true, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Logger: quiet, GCInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Shutdown(ctx) }()
	sc, err := s.Engine().Scan(ctx, "legacy", scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for sc.Next() {
		n += len(sc.Batch())
	}
	sc.Close()
	if sc.Err() != nil || n != 30 {
		t.Fatalf("after the catalog moved: %d rows, %v", n, sc.Err())
	}
	after, err := objstore.Open(ctx, "file://"+dir+"/store", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if objs, _ := objstore.ListAll(ctx, after, storecat.Prefix, 100); len(objs) != 0 {
		t.Fatalf("%d catalog objects left in the store", len(objs))
	}
	conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin := pb.NewMetaAdminClient(conn)
	st, err := admin.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
	if err != nil || len(st.Datanodes) != 1 || st.Datanodes[0].Id != "standalone" || len(st.Regions) != 3 {
		t.Fatalf("cluster status: %v %v", st, err)
	}
	o, err := admin.GetGcOptions(ctx, &pb.GetGcOptionsRequest{})
	if err != nil || !o.Enabled || o.FastIntervalSeconds != 60 {
		t.Fatalf("gc options from --gc-interval: %v %v", o, err)
	}
}
