package datanode_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/fwdbatch"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/wal"
	"github.com/stratadb/strata/internal/walstream"
)

// regionRows is every row of r, one line each.
func regionRows(t *testing.T, r *region.Region) []string {
	t.Helper()
	sc, err := r.Scan(context.Background(), scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	var out []string
	for sc.Next() {
		for _, e := range sc.Batch() {
			line := fmt.Sprintf("%s %d", row.FormatSeries(e.Series), e.TS)
			for i, f := range sc.Fields() {
				if v := e.Field(i); !v.IsNull() {
					line += fmt.Sprintf(" %s=%v/%x", f.Name, v.Kind(), v.Bits()) + v.Str()
				}
			}
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestForwardedWALReplaysWithFwdbatch: batches as a datanode forwards them
// (internal/fwdbatch, Snappy), written to a region as an owner writes them
// (region.Batch.Encoded), replay from the WAL into what the region held
// before a crash: decimals, NaN and staleness markers to the bit, ints,
// uints, bools, strings, sparse rows and columns a batch adds.
func TestForwardedWALReplaysWithFwdbatch(t *testing.T) {
	ctx := context.Background()
	store := objstoretest.Mem(t)
	id := layout.RegionID{Table: 9, Region: 0}
	opts := region.Options{Create: true, DecodeForwarded: datanode.DecodeForwarded}
	r, err := region.Open(ctx, store, id, opts)
	if err != nil {
		t.Fatal(err)
	}
	var enc fwdbatch.Encoder
	host := func(i int) []row.Tag { return []row.Tag{{Name: "host", Value: fmt.Sprint("h", i)}} }
	for n := range 5 {
		var pts []row.Point
		for i := range 40 {
			p := row.Point{Tags: host(i % 7), TS: int64(n*1000 + i)}
			p.Fields = append(p.Fields, row.Field{Name: "usage", Value: row.FloatValue(float64(i*37%1000) / 100)})
			switch i % 5 {
			case 1:
				p.Fields = append(p.Fields, row.Field{Name: "n", Value: row.IntValue(int64(-i))})
			case 2:
				p.Fields = append(p.Fields, row.Field{Name: "state", Value: row.StringValue("s" + fmt.Sprint(i))}, row.Field{Name: "up", Value: row.BoolValue(i%2 == 0)})
			case 3:
				p.Fields[0].Value = row.FloatValue(math.NaN())
				p.Fields = append(p.Fields, row.Field{Name: "u", Value: row.UintValue(uint64(i) << 50)})
			case 4:
				p.Fields[0].Value = row.NumberValue(row.Float, 0x7ff0000000000002) // a staleness marker
			}
			pts = append(pts, p)
		}
		keys := make([][]byte, len(pts))
		for i, p := range pts {
			keys[i], _ = row.EncodeSeries(nil, p.Tags)
		}
		raw := enc.Append(nil, region.Batch{Points: pts, Keys: keys}, fwdbatch.Latest)
		wire := fwdbatch.Compress(fwdbatch.Snappy, nil, raw)
		b, err := fwdbatch.Decode(raw) // as the owner gets it
		if err != nil {
			t.Fatal(err)
		}
		b.Encoded = wire
		if _, err := r.WriteBatch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	before := regionRows(t, r)
	if len(before) != 200 {
		t.Fatalf("%d rows, want 200", len(before))
	}
	if err := r.Close(ctx, region.CloseOptions{}); err != nil { // no flush: the reopen replays the WAL
		t.Fatal(err)
	}
	if n := mixedBlocks(t, store); n == 0 {
		t.Fatal("the WAL holds no forwarded chunk")
	}
	if r, err = region.Open(ctx, store, id, opts); err != nil {
		t.Fatal(err)
	}
	if after := regionRows(t, r); !slices.Equal(after, before) {
		t.Fatalf("after the reopen:\n%s\nbefore:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
	if err := r.Close(ctx, region.CloseOptions{}); err != nil {
		t.Fatal(err)
	}
}

// mixedBlocks counts the WAL blocks in store that hold a forwarded chunk.
func mixedBlocks(t *testing.T, store objstore.Bucket) int {
	t.Helper()
	ctx := context.Background()
	objs, err := objstore.ListAll(ctx, store, layout.StreamsPrefix, 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range objs {
		data, err := store.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		seg, err := walstream.Decode(0, data)
		if err != nil {
			continue // not a segment
		}
		for _, b := range seg.Blocks {
			if b.Codec == wal.CodecMixed {
				n++
			}
		}
	}
	return n
}

// TestClusterOwnerLogsForwardedBatchesAsTheyCame: in a cluster, the share
// of a write that a datanode forwards lands in its owner's WAL as it came
// over the wire, and reads back whole.
func TestClusterOwnerLogsForwardedBatchesAsTheyCame(t *testing.T) {
	dir := t.TempDir()
	c := servertest.StartCluster(t, 2, servertest.ClusterOptions{DefaultRegions: 2, Config: func(cfg *server.Config) { cfg.Store = "file://" + dir }})
	var lines strings.Builder
	for i := range 200 {
		fmt.Fprintf(&lines, "cpu,host=h%d usage=%d.5 %d\n", i, i, int64(i+1)*1e9)
	}
	resp, err := http.Post("http://"+c.Datanodes[0].HTTPAddr()+"/write?db=x", "text/plain", strings.NewReader(lines.String()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("write: %s", resp.Status)
	}
	store, err := objstore.OpenBackend(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if n := mixedBlocks(t, store); n == 0 {
		t.Fatal("no WAL block holds a forwarded chunk: the owner encoded the share again")
	}
	if n, _ := count(t, c.Datanodes[1].Engine(), "cpu", scan.Request{}); n != 200 {
		t.Fatalf("datanode 2 reads %d rows, want 200", n)
	}
}
