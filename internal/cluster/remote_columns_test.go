package cluster_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// staleBits are Prometheus' stale marker's bits.
const staleBits = 0x7ff0000000000002

// colPoint is one value of a column scan with what its column said of it.
type colPoint struct {
	TS     int64
	Bits   uint64
	Null   bool
	Finite bool
	Kind   row.Kind
}

// columns collects a column scan of table's field on dn: each series'
// values in the order they came. A remote region's long column comes in
// pieces, so columns are not compared one by one, but their values, in
// order, with their columns' flags.
func columns(t *testing.T, dn *server.Server, table, field string) map[string][]colPoint {
	t.Helper()
	var mu sync.Mutex
	out := map[string][]colPoint{}
	err := dn.Engine().ScanColumns(context.Background(), table, scan.Request{Start: region.AllTime, End: region.AllTimeEnd, Fields: []string{field}}, func(c *scan.Column) error {
		mu.Lock()
		defer mu.Unlock()
		for i, ts := range c.TS {
			out[c.Series] = append(out[c.Series], colPoint{TS: ts, Bits: c.Bits[i], Null: c.Null != nil && c.Null[i], Finite: c.Finite, Kind: c.Kind})
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: column scan of %s.%s: %v", dn.GRPCAddr(), table, field, err)
	}
	return out
}

// placedOn waits until every region of table is open on one of dns and
// returns, for each datanode, the regions it hosts.
func placedOn(t testing.TB, dns []*server.Server, table string) [][]layout.RegionID {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		var hosted [][]layout.RegionID
		n := 0
		for _, dn := range dns {
			var mine []layout.RegionID
			if tb, err := dn.Engine().Table(table); err == nil {
				for _, id := range dn.Engine().Hosted() {
					if id.Table == tb.ID {
						mine = append(mine, id)
					}
				}
				if n += len(mine); n == int(tb.Regions) && len(hosted) == len(dns)-1 {
					return append(hosted, mine)
				}
			}
			hosted = append(hosted, mine)
		}
		if time.Now().After(deadline) {
			t.Fatalf("regions of %s not all open after a minute: %v", table, hosted)
		}
		time.Sleep(50 * time.Millisecond) // the agents open regions in the background
	}
}

// A column scan of a table whose regions another datanode hosts answers
// exactly what that datanode's own scan of them does: NaN, infinities and
// stale markers bit for bit, rows without the field, a series of many
// points (in more than one message), empty regions, series in both a file
// and the memtable, an int field.
func TestRemoteColumnScanIsTheLocalOne(t *testing.T) {
	dns := twoDatanodes(t, nil)
	ctx := context.Background()
	if _, err := dns[0].Engine().CreateTable(ctx, catalog.TableSpec{Name: "m", Regions: 4}); err != nil {
		t.Fatal(err)
	}
	hosted := placedOn(t, dns, "m")
	t.Logf("regions of m: %v on dn1, %v on dn2", hosted[0], hosted[1])
	write := func(points []row.Point) {
		t.Helper()
		if _, err := dns[0].Engine().Write(ctx, "m", points, datanode.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	point := func(host string, ts int64, fields ...row.Field) row.Point {
		return row.Point{Tags: []row.Tag{{Name: "host", Value: host}}, TS: ts, Fields: fields}
	}
	odd := []float64{math.NaN(), math.Float64frombits(staleBits), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 1.5}
	var batch []row.Point
	for i := range 200_000 { // one long series
		batch = append(batch, point("long", int64(i+1)*int64(time.Second), row.Field{Name: "v", Value: row.FloatValue(float64(i) / 3)}, row.Field{Name: "n", Value: row.IntValue(int64(i))}))
		if len(batch) == 20_000 {
			write(batch)
			batch = batch[:0]
		}
	}
	for h := range 2 { // two series only: of four regions, some are empty
		for i := range 50 {
			p := point(fmt.Sprintf("h%d", h), int64(i+1)*int64(time.Second), row.Field{Name: "v", Value: row.FloatValue(odd[i%len(odd)])})
			if i%7 == 3 {
				p.Fields = []row.Field{{Name: "n", Value: row.IntValue(-int64(i))}} // no v
			}
			batch = append(batch, p)
		}
	}
	write(batch)
	for _, dn := range dns {
		if err := dn.Engine().Flush(ctx, "m"); err != nil {
			t.Fatal(err)
		}
	}
	// Newer values for some of the same timestamps, in the memtables.
	write([]row.Point{point("h0", 2*int64(time.Second), row.Field{Name: "v", Value: row.FloatValue(math.Float64frombits(staleBits))}),
		point("h1", 60*int64(time.Second), row.Field{Name: "v", Value: row.FloatValue(-7)}),
		point("long", 5*int64(time.Second), row.Field{Name: "v", Value: row.FloatValue(math.NaN())})})
	for _, field := range []string{"v", "n"} {
		a, b := columns(t, dns[0], "m", field), columns(t, dns[1], "m", field)
		if len(a) != 3 || len(a[key("long")]) < 200_000 {
			keys := []string{}
			for k := range a {
				keys = append(keys, fmt.Sprintf("%q: %d", k, len(a[k])))
			}
			t.Fatalf("%s: series %v", field, keys)
		}
		if !reflect.DeepEqual(a, b) {
			for k := range a {
				if !reflect.DeepEqual(a[k], b[k]) {
					t.Errorf("%s: series %q: %d values on dn1, %d on dn2", field, k, len(a[k]), len(b[k]))
				}
			}
			t.Fatalf("%s: the column scans of dn1 and dn2 differ", field)
		}
	}
	// Each region is local to one datanode and remote to the other: the
	// values compared above crossed the wire on one side. They include
	// what a float's value cannot tell apart.
	stale, nulls := 0, 0
	for _, p := range columns(t, dns[1], "m", "v")[key("h0")] {
		if p.Bits == staleBits {
			stale++
		}
		if p.Null {
			nulls++
		}
	}
	if stale == 0 || nulls == 0 {
		t.Fatalf("series h0: %d stale markers, %d rows without v", stale, nulls)
	}
	// They crossed it over peerwire, each datanode's scans of the other's
	// regions; none over gRPC.
	for i, dn := range dns {
		over := func(transport string) float64 {
			return servertest.Counter(t, dn, "strata_remote_column_scans_total", func(l map[string]string) bool { return l["transport"] == transport })
		}
		if pw, g := over("peerwire"), over("grpc"); pw == 0 || g != 0 {
			t.Fatalf("dn%d: %v column scans over peerwire, %v over gRPC", i+1, pw, g)
		}
	}
}

// key is the series key of host=h.
func key(h string) string {
	k, err := row.EncodeSeries(nil, []row.Tag{{Name: "host", Value: h}})
	if err != nil {
		panic(err)
	}
	return string(k)
}

// A row scan of a region another datanode hosts ends once: a Scanner asks
// its input for more after a short last batch, and the stream, ended, must
// not be opened again (it was, and read the region again, forever).
func TestRemoteRowScanEndsOnce(t *testing.T) {
	dns := twoDatanodes(t, nil)
	ctx := context.Background()
	if _, err := dns[0].Engine().CreateTable(ctx, catalog.TableSpec{Name: "m", Regions: 1}); err != nil {
		t.Fatal(err)
	}
	owner, other, _ := ownerOf(t, dns, "m")
	var points []row.Point
	for i := range 3 {
		points = append(points, row.Point{Tags: []row.Tag{{Name: "host", Value: "a"}}, TS: int64(i + 1), Fields: []row.Field{{Name: "v", Value: row.FloatValue(1)}}})
	}
	if _, err := owner.Engine().Write(ctx, "m", points, datanode.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	sc, err := other.Engine().Scan(sctx, "m", scan.Request{Start: region.AllTime, End: region.AllTimeEnd, BatchRows: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	n := 0
	for sc.Next() && n <= 3 {
		n += len(sc.Batch())
	}
	if n != 3 || sc.Err() != nil {
		t.Fatalf("%d rows, %v; want 3", n, sc.Err())
	}
}
