package grpcapi_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/wire"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// countingConn counts the bytes a connection reads.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// BenchmarkRemoteRegionScan reads one field of a region (200 series of
// 2,000 points of gauge-like floats, flushed) over loopback gRPC as a
// datanode reading a region another hosts does, into region.Columns: the
// row Scan turned back into columns (region.ColumnsOf, as the agent did),
// and the column scan (ScanColumns). wire-B/op counts the bytes the client
// read off the connection; ns/op includes the owner's work (one process).
func BenchmarkRemoteRegionScan(b *testing.B) {
	n := servertest.Start(b, objstoretest.Mem(b), servertest.Options{})
	ctx := context.Background()
	eng := n.Engine()
	tb, err := eng.CreateTable(ctx, catalog.TableSpec{Name: "cpu", Regions: 1})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const series, points = 200, 2000
	for s := range series {
		batch := make([]row.Point, 0, points)
		v := float64(rng.IntN(100))
		for i := range points {
			v = max(0, v+float64(rng.IntN(21)-10)/10)
			batch = append(batch, row.Point{Tags: []row.Tag{{Name: "host", Value: fmt.Sprintf("host_%d", s)}, {Name: "region", Value: "eu-west-1"}},
				TS: int64(1_700_000_000+10*i) * int64(time.Second), Fields: []row.Field{{Name: "usage_user", Value: row.FloatValue(v)}}})
		}
		if _, err := eng.Write(ctx, "cpu", batch, datanode.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if err := eng.Flush(ctx, "cpu"); err != nil {
		b.Fatal(err)
	}
	var read atomic.Int64
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			return countingConn{c, &read}, err
		}))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewDatanodeClient(conn)
	req := &pb.ScanRequest{Table: "cpu", Region: fmt.Sprintf("%d/0", tb.ID), Fields: []string{"usage_user"}}
	run := func(b *testing.B, columns func(emit func(*scan.Column) error) error) {
		got := 0
		emit := func(c *scan.Column) error { got += len(c.TS); return nil }
		if err := columns(emit); err != nil || got != series*points {
			b.Fatalf("%d points, %v", got, err)
		}
		read.Store(0)
		b.ResetTimer()
		for b.Loop() {
			if err := columns(emit); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(read.Load())/float64(b.N), "wire-B/op")
	}
	b.Run("rows", func(b *testing.B) {
		run(b, func(emit func(*scan.Column) error) error {
			st, err := c.Scan(ctx, req)
			if err != nil {
				return err
			}
			return region.ColumnsOf(&rowsIter{st: st}, row.Float, emit)
		})
	})
	b.Run("columns", func(b *testing.B) {
		run(b, func(emit func(*scan.Column) error) error {
			st, err := c.ScanColumns(ctx, req)
			if err != nil {
				return err
			}
			col := scan.Column{Kind: row.Float}
			for {
				m, err := st.Recv()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				for _, pc := range m.Columns {
					if err := wire.ToColumn(pc, &col); err != nil {
						return err
					}
					if err := emit(&col); err != nil {
						return err
					}
				}
			}
		})
	})
}

// rowsIter reads a row Scan as the agent does.
type rowsIter struct {
	st   grpc.ServerStreamingClient[pb.ScanResponse]
	resp *pb.ScanResponse
	keys []string
	pos  int
	cur  row.Entry
	err  error
}

func (it *rowsIter) Next() bool {
	for it.resp == nil || it.pos >= len(it.resp.Rows) {
		resp, err := it.st.Recv()
		if err != nil {
			if err != io.EOF {
				it.err = err
			}
			return false
		}
		it.resp, it.pos, it.keys = resp, 0, it.keys[:0]
		for _, s := range resp.Series {
			k, _ := row.EncodeSeries(nil, wire.ToTags(s.Tags))
			it.keys = append(it.keys, string(k))
		}
	}
	r := it.resp.Rows[it.pos]
	it.pos++
	it.cur = row.Entry{Series: it.keys[r.Series], TS: r.Ts, Fields: []row.Value{wire.ToValue(r.Values[0])}}
	return true
}

func (it *rowsIter) Entry() *row.Entry { return &it.cur }
func (it *rowsIter) Err() error        { return it.err }
func (it *rowsIter) Close() error      { return nil }
