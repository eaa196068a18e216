package cluster_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/stratadb/strata/proto/strata/v1"
)

// Measurements a line-protocol write creates are logical tables: in a
// cluster of two datanodes they cost the two regions of __lines, placed
// once, wherever they are; a write through one datanode reads back
// through the other (PromQL and the CLI's scan), and a drop through
// metasrv and a truncate through a datanode leave the other tables be.
func TestLogicalTablesAcrossDatanodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	etcd := freePort(t)
	store := "file://" + t.TempDir()
	meta := start(t, "metasrv", "metasrv", "--data-dir", t.TempDir(), "--etcd-client-addr", etcd, "--grpc-addr", "127.0.0.1:0", "--store", store)
	var dns []*proc
	for _, id := range []string{"dn1", "dn2"} {
		dns = append(dns, start(t, id, "datanode", "--id", id, "--etcd-endpoints", "http://"+etcd,
			"--store", store, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--lines-regions", "2"))
	}
	c := admin(t, meta.grpc)
	const tables = 50
	var b strings.Builder
	for i := range tables {
		for h := range 4 {
			fmt.Fprintf(&b, "m%d,host=h%d v=%d,w=%di %d\n", i, h, i*10+h, h, int64(1000+h)*int64(time.Second))
		}
	}
	post := func(body string) {
		t.Helper()
		resp, err := http.Post("http://"+dns[0].http+"/write?db=x", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("write: %s", resp.Status)
		}
	}
	post(b.String())
	// Fifty tables, two regions: those of __lines.
	st := placed(t, c, 2, 30*time.Second, "")
	owners := map[string]bool{}
	for _, r := range st.Regions {
		if r.Table != "__lines" {
			t.Fatalf("a region of %s placed: %v", r.Table, st.Regions)
		}
		owners[r.Owner] = true
	}
	t.Logf("%d tables: regions %v on %d datanodes", tables, st.Regions, len(owners))
	query := func(dn *proc, q string) string {
		t.Helper()
		var out struct {
			Data struct {
				Result []struct {
					Metric map[string]string
					Value  [2]any
				}
			}
		}
		promGet(t, dn.http, "/api/v1/query?time=1010&query="+url.QueryEscape(q), &out)
		var vals []string
		for _, r := range out.Data.Result {
			vals = append(vals, fmt.Sprintf("%s=%v", r.Metric["host"], r.Value[1]))
		}
		slices.Sort(vals)
		return strings.Join(vals, ",")
	}
	for _, i := range []int{0, 7, 49} {
		want := fmt.Sprintf("h0=%d,h1=%d,h2=%d,h3=%d", i*10, i*10+1, i*10+2, i*10+3)
		for _, dn := range dns {
			if got := query(dn, fmt.Sprintf("m%d_v", i)); got != want {
				t.Fatalf("m%d_v through %s: %s, want %s", i, dn.name, got, want)
			}
		}
	}
	if out, code := cli(t, "cluster", "describe-table", "m7", "--metasrv", meta.grpc); code != 0 || !strings.Contains(out, "logical") {
		t.Fatalf("describe-table m7: exit %d\n%s", code, out)
	}
	count := func(dn *proc, table string) int {
		t.Helper()
		have, _ := readBack(t, dn.grpc, nil, table)
		return len(have)
	}
	if n := count(dns[1], "m3"); n != 4 {
		t.Fatalf("m3 through the CLI: %d rows", n)
	}
	// Drop through metasrv; a write then creates a new, empty m3.
	dn := func(p *proc) pb.DatanodeClient {
		conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pb.NewDatanodeClient(conn)
	}
	d, err := dn(dns[0]).DescribeTable(context.Background(), &pb.DescribeTableRequest{Name: "m3"})
	if err != nil {
		t.Fatal(err)
	}
	// The rows of m3's id in __lines, through either datanode.
	left := func(p *proc) int {
		t.Helper()
		st, err := dn(p).Scan(context.Background(), &pb.ScanRequest{Table: "__lines", Start: math.MinInt64, End: math.MaxInt64,
			Tags: []*pb.Tag{{Name: " ", Value: strconv.Itoa(int(d.Table.Id))}}})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			resp, err := st.Recv()
			if err == io.EOF {
				return n
			}
			if err != nil {
				t.Fatal(err)
			}
			n += len(resp.Rows)
		}
	}
	if n := left(dns[1]); n != 4 {
		t.Fatalf("m3 has %d rows in __lines before its drop", n)
	}
	if out, code := cli(t, "cluster", "drop-table", "m3", "--metasrv", meta.grpc); code != 0 {
		t.Fatalf("drop-table: exit %d\n%s", code, out)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		resp, err := http.Post("http://"+dns[1].http+"/write?db=x", "text/plain", strings.NewReader("m3,host=new v=1 1005000000000\n"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("write to m3 after its drop: %v %v", resp, err)
		}
		time.Sleep(100 * time.Millisecond) // metasrv forgets the table in the background
	}
	if got := query(dns[0], "m3_v"); got != "new=1" {
		t.Fatalf("m3_v after the drop and a write: %s", got)
	}
	// Its rows were deleted in both regions of __lines, not only hidden.
	if n := left(dns[0]); n != 0 {
		t.Fatalf("the dropped m3 has %d rows left in __lines", n)
	}
	// Truncate through the other datanode: the rows of m5 go, wherever
	// their regions are; m6 keeps its own.
	if out, code := cli(t, "table", "truncate", "m5", "--server", dns[1].grpc); code != 0 {
		t.Fatalf("truncate: exit %d\n%s", code, out)
	}
	if n := count(dns[0], "m5"); n != 0 {
		t.Fatalf("m5 after truncate: %d rows", n)
	}
	if n := count(dns[0], "m6"); n != 4 {
		t.Fatalf("m6 after m5's truncate: %d rows", n)
	}
	if st := placed(t, c, 2, 30*time.Second, ""); len(st.Regions) != 2 {
		t.Fatalf("regions: %v", st.Regions)
	}
}
