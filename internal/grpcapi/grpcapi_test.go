package grpcapi_test

import (
	"context"
	"io"
	"math"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/wire"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

func client(t *testing.T) (pb.DatanodeClient, *datanode.Engine) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewDatanodeClient(conn), n.Engine()
}

func scanRows(t *testing.T, c pb.DatanodeClient, req *pb.ScanRequest) ([]*pb.FieldInfo, []*pb.Row, [][]*pb.Tag) {
	t.Helper()
	st, err := c.Scan(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var fields []*pb.FieldInfo
	var rows []*pb.Row
	var series [][]*pb.Tag
	for {
		resp, err := st.Recv()
		if err == io.EOF {
			return fields, rows, series
		}
		if err != nil {
			t.Fatal(err)
		}
		if resp.Fields != nil {
			fields = resp.Fields
		}
		for _, r := range resp.Rows {
			rows = append(rows, r)
			series = append(series, resp.Series[r.Series].Tags)
		}
	}
}

func TestServiceRoundTrip(t *testing.T) {
	ctx := context.Background()
	c, e := client(t)
	vals := []row.Value{row.FloatValue(1.5), row.IntValue(math.MinInt64), row.UintValue(math.MaxUint64), row.StringValue("s"), row.BoolValue(true)}
	var points []*pb.Point
	for i, v := range vals {
		points = append(points, &pb.Point{Tags: []*pb.Tag{{Name: "host", Value: "a"}}, Ts: int64(i),
			Fields: []*pb.Field{{Name: "f" + v.Kind().String(), Value: wire.FromValue(v)}}})
	}
	if _, err := c.Write(ctx, &pb.WriteRequest{Table: "t", Points: points}); status.Code(err) != codes.NotFound {
		t.Fatalf("write to a missing table: %v", err)
	}
	resp, err := c.Write(ctx, &pb.WriteRequest{Table: "t", Points: points, CreateTable: true})
	if err != nil || resp.Written != 5 {
		t.Fatalf("write: %v %v", resp, err)
	}
	fields, rows, series := scanRows(t, c, &pb.ScanRequest{Table: "t", BatchRows: 2})
	if len(fields) != 5 || len(rows) != 5 || len(series[4]) != 1 || series[4][0].Value != "a" {
		t.Fatalf("scan: %v %v %v", fields, rows, series)
	}
	// A table create_table made is logical: its rows are in __lines, and
	// its scan shows its own tags only.
	if tb, err := e.Table("t"); err != nil || !tb.Logical {
		t.Fatalf("t: %+v %v", tb, err)
	}
	for i, v := range vals {
		if got := wire.ToValue(rows[i].Values[i]); !got.Equal(v) {
			t.Fatalf("row %d: %v, want %v", i, got, v)
		}
		if !wire.ToValue(rows[i].Values[(i+1)%5]).IsNull() {
			t.Fatalf("row %d: null field is set", i)
		}
	}
	// Projection and time range.
	fields, rows, _ = scanRows(t, c, &pb.ScanRequest{Table: "t", Start: 1, End: 3, Fields: []string{"fint64"}})
	if len(fields) != 1 || len(rows) != 2 || wire.ToValue(rows[0].Values[0]).Int() != math.MinInt64 {
		t.Fatalf("projected scan: %v %v", fields, rows)
	}
	// Set filters travel over gRPC.
	if _, rows, _ = scanRows(t, c, &pb.ScanRequest{Table: "t", In: []*pb.TagIn{{Name: "host", Values: []string{"a", "b"}}}}); len(rows) != 5 {
		t.Fatalf("host in (a, b): %d rows", len(rows))
	}
	if _, rows, _ = scanRows(t, c, &pb.ScanRequest{Table: "t", In: []*pb.TagIn{{Name: "host", Values: []string{"b"}}}}); len(rows) != 0 {
		t.Fatalf("host in (b): %d rows", len(rows))
	}
	// An empty result still names the fields.
	fields, rows, _ = scanRows(t, c, &pb.ScanRequest{Table: "t", Tags: []*pb.Tag{{Name: "host", Value: "zz"}}})
	if len(fields) != 5 || len(rows) != 0 {
		t.Fatalf("empty scan: %v %v", fields, rows)
	}
	if _, err := c.Delete(ctx, &pb.DeleteRequest{Table: "t", Tags: []*pb.Tag{{Name: "host", Value: "a"}}, Start: 0, End: 1}); err != nil {
		t.Fatal(err)
	}
	if _, rows, _ = scanRows(t, c, &pb.ScanRequest{Table: "t"}); len(rows) != 3 {
		t.Fatalf("after delete: %d rows", len(rows))
	}
	if _, err := c.Flush(ctx, &pb.FlushRequest{Table: "t"}); err != nil {
		t.Fatal(err)
	}
	st, err := c.RegionStats(ctx, &pb.RegionStatsRequest{Table: "t"})
	if err != nil || len(st.Regions) != 1 || st.Regions[0].Files != 1 {
		t.Fatalf("stats: %v %v", st, err)
	}
	// Errors map to codes.
	checks := []struct {
		err  error
		code codes.Code
	}{
		{func() error {
			_, err := c.Write(ctx, &pb.WriteRequest{Table: "t", Points: []*pb.Point{{Ts: 9, Fields: []*pb.Field{{Name: "ffloat64", Value: wire.FromValue(row.StringValue("x"))}}}}})
			return err
		}(), codes.InvalidArgument},
		{func() error { _, err := c.CreateTable(ctx, &pb.CreateTableRequest{Name: "t"}); return err }(), codes.AlreadyExists},
		{func() error { _, err := c.CreateTable(ctx, &pb.CreateTableRequest{Name: "__bad"}); return err }(), codes.InvalidArgument},
		{func() error {
			_, err := c.CreateTable(ctx, &pb.CreateTableRequest{Name: "x", TtlSeconds: -1})
			return err
		}(), codes.InvalidArgument},
		{func() error { _, err := c.DescribeTable(ctx, &pb.DescribeTableRequest{Name: "nope"}); return err }(), codes.NotFound},
		{func() error { _, err := c.DropTable(ctx, &pb.DropTableRequest{Name: "nope"}); return err }(), codes.NotFound},
		{func() error {
			st, err := c.Scan(ctx, &pb.ScanRequest{Table: "t", Fields: []string{"nope"}})
			if err == nil {
				_, err = st.Recv()
			}
			return err
		}(), codes.InvalidArgument},
	}
	for i, ch := range checks {
		if status.Code(ch.err) != ch.code {
			t.Errorf("check %d: %v, want %v", i, ch.err, ch.code)
		}
	}
	// Table lifecycle.
	if _, err := c.CreateTable(ctx, &pb.CreateTableRequest{Name: "u", Regions: 3, TtlSeconds: 3600}); err != nil {
		t.Fatal(err)
	}
	servertest.WaitHosted(t, e, "u") // placed and opened in the background
	d, err := c.DescribeTable(ctx, &pb.DescribeTableRequest{Name: "u"})
	if err != nil || d.Table.Regions != 3 || d.Table.TtlSeconds != 3600 || len(d.Regions) != 3 {
		t.Fatalf("describe: %v %v", d, err)
	}
	if _, err := c.DropTable(ctx, &pb.DropTableRequest{Name: "u"}); err != nil {
		t.Fatal(err)
	}
	if l, _ := c.ListTables(ctx, &pb.ListTablesRequest{}); len(l.Tables) != 1 || l.Tables[0].Name != "t" {
		t.Fatalf("list: %v", l)
	}
}
