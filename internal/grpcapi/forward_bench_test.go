package grpcapi_test

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/fwdbatch"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/peerwire"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/tsbs"
	"github.com/stratadb/strata/internal/wire"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// BenchmarkForwardWrite: a datanode's share of a TSBS cpu write (400
// rows: 10 tags, 10 int fields) forwarded to the region's owner over
// loopback gRPC, as the old Write (points, validated and keys encoded
// again) and as ForwardWrite with each compression, and over peerwire as
// the agent sends it. Sender and owner are
// one process: cpu-ns/row is both sides' CPU (getrusage), wire-B/row the
// request's size.
func BenchmarkForwardWrite(b *testing.B) {
	const hosts, rows = 4000, 400
	ctx := context.Background()
	n := servertest.Start(b, objstoretest.Mem(b), servertest.Options{})
	e := n.Engine()
	if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "cpu", Regions: 1}); err != nil {
		b.Fatal(err)
	}
	servertest.WaitHosted(b, e, "cpu")
	t, err := e.Table("cpu")
	if err != nil {
		b.Fatal(err)
	}
	id := layout.RegionID{Table: t.ID}
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	c := pb.NewDatanodeClient(conn)
	tags := make([][]row.Tag, hosts)
	for h := range tags {
		tags[h] = tsbs.Tags(h)
	}
	// Prepared batches, as the engine holds them: keys encoded.
	batch := func(i int) region.Batch {
		var bt region.Batch
		for j := range rows {
			p := tsbs.Point(tags, i*rows+j, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
			k, err := row.EncodeSeries(nil, slices.Clone(p.Tags))
			if err != nil {
				b.Fatal(err)
			}
			bt.Points, bt.Keys = append(bt.Points, p), append(bt.Keys, k)
		}
		return bt
	}
	run := func(b *testing.B, send func(region.Batch) (proto.Message, error)) {
		batches := make([]region.Batch, 64)
		for i := range batches {
			batches[i] = batch(i)
		}
		var wireBytes int64
		cpu0 := cpuTime()
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			req, err := send(batches[i%len(batches)])
			i++
			if err != nil {
				b.Fatal(err)
			}
			wireBytes += int64(proto.Size(req))
		}
		total := float64(b.N) * rows
		b.ReportMetric(float64(cpuTime()-cpu0)/total, "cpu-ns/row")
		b.ReportMetric(float64(wireBytes)/total, "wire-B/row")
		b.ReportMetric(total/b.Elapsed().Seconds(), "rows/s")
	}
	b.Run("Write", func(b *testing.B) {
		run(b, func(bt region.Batch) (proto.Message, error) {
			req := &pb.WriteRequest{Table: "cpu", Region: id.String(), Points: wire.FromPoints(bt.Points)}
			_, err := c.Write(ctx, req)
			return req, err
		})
	})
	for _, codec := range []struct {
		name string
		c    fwdbatch.Codec
	}{{"None", fwdbatch.None}, {"Snappy", fwdbatch.Snappy}, {"Zstd", fwdbatch.Zstd}} {
		for _, v := range []int{fwdbatch.V1, fwdbatch.V2} {
			b.Run(fmt.Sprintf("ForwardWrite/V%d/%s", v, codec.name), func(b *testing.B) {
				var raw, comp []byte // kept from batch to batch, as the agent does
				enc := new(fwdbatch.Encoder)
				run(b, func(bt region.Batch) (proto.Message, error) {
					raw = enc.Append(raw[:0], bt, v)
					data := fwdbatch.Compress(codec.c, comp, raw)
					if codec.c != fwdbatch.None {
						comp = data
					}
					req := &pb.ForwardWriteRequest{Table: "cpu", Region: id.String(), Compression: uint32(codec.c), Size: uint64(len(raw)), Batch: data}
					_, err := c.ForwardWrite(ctx, req)
					return req, err
				})
			})
		}
	}
	// The agent's way: version 2, snappy, over peerwire.
	b.Run("Peerwire/V2/Snappy", func(b *testing.B) {
		p := peerwire.NewClient(peerwire.ClientOptions{})
		defer p.Close()
		var raw, comp []byte
		enc := new(fwdbatch.Encoder)
		run(b, func(bt region.Batch) (proto.Message, error) {
			raw = enc.Append(raw[:0], bt, fwdbatch.V2)
			comp = fwdbatch.Compress(fwdbatch.Snappy, comp, raw)
			req := &pb.ForwardWriteRequest{Table: "cpu", Region: id.String(), Compression: uint32(fwdbatch.Snappy), Size: uint64(len(raw)), Batch: comp}
			return req, p.Unary(ctx, n.GRPCAddr(), peerwire.ForwardWrite, req, new(pb.WriteResponse))
		})
	})
}

// cpuTime is the process's user and system CPU time so far, in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
