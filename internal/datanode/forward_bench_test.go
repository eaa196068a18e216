package datanode_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/fwdbatch"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/tsbs"
)

// BenchmarkWriteForwarded measures an owner's side of a forwarded write
// without gRPC: the snappy batch decompressed, decoded (fwdbatch, keys
// checked) and written (Engine.WriteForwarded: keys routed, the batch
// validated, the region's WAL commit). Each op is the share of region 0 of
// 3 of a TSBS batch of 10,000 lines over 4,000 hosts (about 3,300 rows, a
// host's key 2.5 times), as a sender forwards it.
func BenchmarkWriteForwarded(b *testing.B) {
	const hosts, lines, regions = 4000, 10000, 3
	ctx := context.Background()
	e := servertest.Start(b, objstoretest.Mem(b), servertest.Options{}).Engine()
	if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "cpu", Regions: regions}); err != nil {
		b.Fatal(err)
	}
	servertest.WaitHosted(b, e, "cpu")
	t, err := e.Table("cpu")
	if err != nil {
		b.Fatal(err)
	}
	id := layout.RegionID{Table: t.ID}
	tags := make([][]row.Tag, hosts)
	for h := range tags {
		tags[h] = tsbs.Tags(h)
	}
	type sent struct {
		data []byte
		size uint64
		rows int
	}
	batches := make([]sent, 16)
	for i := range batches {
		var bt region.Batch
		for j := range lines {
			p := tsbs.Point(tags, i*lines+j, benchStart.UnixNano())
			k, err := row.EncodeSeries(nil, slices.Clone(p.Tags))
			if err != nil {
				b.Fatal(err)
			}
			if layout.Route(k, regions) == id.Region {
				bt.Points, bt.Keys = append(bt.Points, p), append(bt.Keys, k)
			}
		}
		raw := fwdbatch.Append(nil, bt)
		batches[i] = sent{data: fwdbatch.Compress(fwdbatch.Snappy, nil, raw), size: uint64(len(raw)), rows: len(bt.Points)}
	}
	sc := new(fwdbatch.Scratch)
	rows := 0
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s := batches[i%len(batches)]
		i++
		raw, err := fwdbatch.Decompress(fwdbatch.Snappy, sc.Buf, s.data, s.size)
		if err != nil {
			b.Fatal(err)
		}
		sc.Buf = raw
		bt, err := sc.Decode(raw)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.WriteForwarded(ctx, "cpu", id, bt); err != nil {
			b.Fatal(err)
		}
		rows += s.rows
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rows), "ns/row")
}
