package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// pointData is a 3-datanode cluster in this process and a standalone
// holding the same data: table cpu of 3 regions, field usage_user of 100
// hosts every 10 s for an hour from base, flushed.
func pointData(b *testing.B) (dns []*server.Server, sa *servertest.Node, base time.Time) {
	b.Helper()
	ctx := context.Background()
	dns = datanodes(b, 3, nil)
	sa = servertest.Start(b, objstoretest.Mem(b), servertest.Options{})
	base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var points []row.Point
	for h := range 100 {
		for i := range 360 {
			points = append(points, row.Point{Tags: []row.Tag{{Name: "hostname", Value: fmt.Sprint("host_", h)}},
				TS: base.Add(time.Duration(i) * 10 * time.Second).UnixNano(), Fields: []row.Field{{Name: "usage_user", Value: row.FloatValue(float64(i % 100))}}})
		}
	}
	for _, e := range []*datanode.Engine{dns[0].Engine(), sa.Engine()} {
		if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "cpu", Regions: 3}); err != nil {
			b.Fatal(err)
		}
	}
	placedOn(b, dns, "cpu")
	servertest.WaitHosted(b, sa.Engine(), "cpu")
	for _, e := range []*datanode.Engine{dns[0].Engine(), sa.Engine()} {
		if _, err := e.Write(ctx, "cpu", points, datanode.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, e := range []*datanode.Engine{dns[0].Engine(), dns[1].Engine(), dns[2].Engine(), sa.Engine()} {
		if err := e.Flush(ctx, "cpu"); err != nil {
			b.Fatal(err)
		}
	}
	return dns, sa, base
}

// BenchmarkPointQuery asks one host's hour (the point query of
// scripts/bench-cluster.sh) of a standalone and of a 3-datanode cluster
// in this process, through HTTP, the same data in both (pointData): the
// cluster's extra cost is its remote column scans. All in one process,
// it measures their CPU more than the round trips between processes,
// which scripts/bench-cluster.sh does.
func BenchmarkPointQuery(b *testing.B) {
	dns, sa, base := pointData(b)
	q := "/api/v1/query_range?" + url.Values{"query": {`max(max_over_time(cpu_usage_user{hostname=~"host_1"}[1m]))`},
		"start": {fmt.Sprint(base.Unix())}, "end": {fmt.Sprint(base.Unix() + 3600)}, "step": {"60"}}.Encode()
	for _, c := range []struct {
		name, addr string
	}{{"standalone", sa.HTTPAddr()}, {"cluster", dns[0].HTTPAddr()}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := http.Get("http://" + c.addr + q)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || len(body) < 100 {
					b.Fatalf("%s: %s", resp.Status, body)
				}
			}
		})
	}
}

// BenchmarkPointScan is BenchmarkPointQuery's column scan alone.
func BenchmarkPointScan(b *testing.B) {
	ctx := context.Background()
	dns, sa, base := pointData(b)
	req := scan.Request{Start: base.UnixNano(), End: base.Add(time.Hour).UnixNano(), Fields: []string{"usage_user"}, Tags: []row.Tag{{Name: "hostname", Value: "host_1"}}}
	for _, c := range []struct {
		name string
		e    *datanode.Engine
	}{{"standalone", sa.Engine()}, {"cluster", dns[0].Engine()}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				n := 0
				var mu sync.Mutex
				if err := c.e.ScanColumns(ctx, "cpu", req, func(col *scan.Column) error { mu.Lock(); n += len(col.TS); mu.Unlock(); return nil }); err != nil {
					b.Fatal(err)
				}
				if n != 360 {
					b.Fatalf("%d samples", n)
				}
			}
		})
	}
}
