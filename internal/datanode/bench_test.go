package datanode_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/tsbs"
)

var benchStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// loadTSBS writes rounds × hosts TSBS cpu-only rows (10 tags, 10 fields,
// 10 s apart) into table cpu of a file:// engine and flushes them.
func loadTSBS(b *testing.B, hosts, rounds int) *datanode.Engine {
	b.Helper()
	ctx := context.Background()
	s, err := objstore.Open(ctx, "file://"+b.TempDir(), objstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	e := servertest.Start(b, s, servertest.Options{}).Engine()
	tags := make([][]row.Tag, hosts)
	for h := range tags {
		tags[h] = tsbs.Tags(h)
	}
	for r := range rounds {
		batch := make([]row.Point, hosts)
		for h := range hosts {
			batch[h] = tsbs.Point(tags, r*hosts+h, benchStart.UnixNano())
		}
		if _, err := e.Write(ctx, "cpu", batch, datanode.WriteOptions{CreateTable: true}); err != nil {
			b.Fatal(err)
		}
	}
	if err := e.Flush(ctx, "cpu"); err != nil {
		b.Fatal(err)
	}
	return e
}

// BenchmarkQuery: 1.4M TSBS rows (4000 hosts × 350 rounds, about an hour)
// flushed to SSTs on file://. host-hour reads one host's series over the
// hour; all streams every row.
func BenchmarkQuery(b *testing.B) {
	const hosts, rounds = 4000, 350
	e := loadTSBS(b, hosts, rounds)
	st, _ := e.Stats(context.Background(), "cpu")
	b.Logf("%d SSTs, %d rows", st[0].Files, st[0].Rows)
	count := func(b *testing.B, req scan.Request) int {
		sc, err := e.Scan(context.Background(), "cpu", req)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for sc.Next() {
			n += len(sc.Batch())
		}
		if err := sc.Err(); err != nil {
			b.Fatal(err)
		}
		sc.Close()
		return n
	}
	b.Run("host-hour", func(b *testing.B) {
		req := scan.Request{Start: benchStart.UnixNano(), End: benchStart.Add(time.Hour).UnixNano(), Tags: []row.Tag{{Name: "hostname", Value: "host_1234"}}}
		var lat []time.Duration
		for b.Loop() {
			t0 := time.Now()
			if n := count(b, req); n != rounds {
				b.Fatalf("%d rows", n)
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	})
	b.Run("all", func(b *testing.B) {
		n := 0
		for b.Loop() {
			n = count(b, scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
		}
		if n != hosts*rounds {
			b.Fatalf("%d rows", n)
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}

// BenchmarkWrite measures the engine's write path (validation, routing,
// series keys, the regions' WAL commits) for TSBS batches of 1000 rows
// into a table of 4 regions on a memory store, in a standalone. Each op is
// one batch; WriteTables splits it over two tables. Logical writes logical
// tables (catalog.Table.Logical), their rows in __lines of 4 regions.
func BenchmarkWrite(b *testing.B) {
	const hosts, batch = 4000, 1000
	tags := make([][]row.Tag, hosts)
	for h := range tags {
		tags[h] = tsbs.Tags(h)
	}
	points := func(i int) []row.Point {
		out := make([]row.Point, batch)
		for j := range out {
			out[j] = tsbs.Point(tags, i*batch+j, benchStart.UnixNano())
		}
		return out
	}
	for _, logical := range []bool{false, true} {
		for _, multi := range []bool{false, true} {
			name := "Write"
			if multi {
				name = "WriteTables"
			}
			if logical {
				name += "/Logical"
			}
			b.Run(name, func(b *testing.B) { benchWrite(b, points, batch, multi, logical) })
		}
	}
	// As the line-protocol parser gives a batch of 100 hosts' rows: a
	// host's points share its series key.
	const few = 100
	keys := make([][]byte, few)
	for h := range keys {
		k, err := row.EncodeSeries(nil, tags[h])
		if err != nil {
			b.Fatal(err)
		}
		keys[h] = k
	}
	keyed := func(i int) []row.Point {
		out := make([]row.Point, batch)
		for j := range out {
			out[j] = tsbs.Point(tags[:few], i*batch+j, benchStart.UnixNano())
			out[j].Tags, out[j].Series = tags[(i*batch+j)%few], keys[(i*batch+j)%few]
		}
		return out
	}
	b.Run("Keyed", func(b *testing.B) { benchWrite(b, keyed, batch, false, false) })
}

func benchWrite(b *testing.B, points func(int) []row.Point, batch int, multi, logical bool) {
	ctx := context.Background()
	e := servertest.Start(b, objstoretest.Mem(b), servertest.Options{Tune: func(o *datanode.Options) { o.LinesRegions = 4 }}).Engine()
	for _, tb := range []string{"cpu", "mem"} {
		spec := catalog.TableSpec{Name: tb, Regions: 4}
		if logical {
			spec = catalog.TableSpec{Name: tb, Logical: true}
		}
		if _, err := e.CreateTable(ctx, spec); err != nil {
			b.Fatal(err)
		}
		servertest.WaitHosted(b, e, tb)
	}
	batches := make([][]row.Point, 64)
	for i := range batches {
		batches[i] = points(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ps := batches[i%len(batches)]
		i++
		var err error
		if multi {
			_, err = e.WriteTables(ctx, []datanode.TableBatch{{Table: "cpu", Points: ps[:batch/2]}, {Table: "mem", Points: ps[batch/2:]}}, datanode.WriteOptions{})
		} else {
			_, err = e.Write(ctx, "cpu", ps, datanode.WriteOptions{})
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*float64(batch)/b.Elapsed().Seconds(), "rows/s")
}
