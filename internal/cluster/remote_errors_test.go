package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/prompb"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// remoteRows is the most points a region of the cluster of
// TestRemoteErrorsKeepTheirClass takes in one write.
const remoteRows = 10

// twoDatanodes starts, in this process, etcd, a metasrv and two datanodes
// on one file:// store, their engines' options adjusted by tune (what the
// binaries cannot be told).
func twoDatanodes(t *testing.T, tune func(*datanode.Options)) []*server.Server {
	t.Helper()
	return datanodes(t, 2, tune)
}

// datanodes starts n datanodes (dn1, dn2, ...) as twoDatanodes does.
func datanodes(t testing.TB, n int, tune func(*datanode.Options)) []*server.Server {
	t.Helper()
	return servertest.StartCluster(t, n, servertest.ClusterOptions{DefaultRegions: 1, Tune: tune}).Datanodes
}

// ownerOf waits until one of dns hosts the one region of table and returns
// that datanode, the other one and the region.
func ownerOf(t *testing.T, dns []*server.Server, table string) (owner, other *server.Server, id layout.RegionID) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		for i, dn := range dns {
			tb, err := dn.Engine().Table(table)
			if err != nil {
				continue
			}
			id = layout.RegionID{Table: tb.ID}
			if slices.Contains(dn.Engine().Hosted(), id) {
				return dn, dns[1-i], id
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no datanode hosts %s after a minute", table)
		}
		time.Sleep(50 * time.Millisecond) // the agent opens regions in the background
	}
}

// lineWrite posts n line-protocol points (one series each) to dn.
func lineWrite(t *testing.T, dn *server.Server, n int) (int, string) {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "cpu,host=h%d v=%d %d\n", i, i, int64(1000+i)*int64(time.Second))
	}
	return postBody(t, "http://"+dn.HTTPAddr()+"/write?db=x", "text/plain", []byte(b.String()))
}

// remoteWrite posts n samples (one series each) to dn's remote write.
func remoteWrite(t *testing.T, dn *server.Server, n int) (int, string) {
	t.Helper()
	var req prompb.WriteRequest
	for i := range n {
		req.Timeseries = append(req.Timeseries, prompb.TimeSeries{
			Labels:  []prompb.Label{{Name: "__name__", Value: "up"}, {Name: "instance", Value: fmt.Sprintf("i%d", i)}},
			Samples: []prompb.Sample{{Value: float64(i), Timestamp: int64(1000+i) * 1000}}})
	}
	raw, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return postBody(t, "http://"+dn.HTTPAddr()+"/api/v1/write", "application/x-protobuf", snappy.Encode(nil, raw))
}

// postBody posts body to url and returns the status and the answer.
func postBody(t *testing.T, url, ctype string, body []byte) (int, string) {
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	req.Header.Set("Content-Type", ctype)
	if ctype == "application/x-protobuf" {
		req.Header.Set("Content-Encoding", "snappy")
	}
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A share of a write that a datanode forwards to the region's owner, and
// the owner refuses, reaches the HTTP client with the class the owner
// gave it, as if the region were local: 413 for a batch over the owner's
// limit, 503 while the owner has closed the region. Over line protocol
// and remote write, with real servers (issue 39).
func TestRemoteErrorsKeepTheirClass(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	// Each datanode's regions refuse writes of more than remoteRows points.
	dns := twoDatanodes(t, func(o *datanode.Options) { o.Region.MaxBatchRows = remoteRows })
	// The first writes create the tables; metasrv places their regions.
	for _, w := range []func(*testing.T, *server.Server, int) (int, string){lineWrite, remoteWrite} {
		if code, body := w(t, dns[0], 1); code != http.StatusNoContent {
			t.Fatalf("first write: %d %s", code, body)
		}
	}
	cases := []struct {
		name  string
		table string
		write func(*testing.T, *server.Server, int) (int, string)
	}{
		{"line protocol", catalog.LinesTable, lineWrite},
		{"remote write", catalog.MetricsTable, remoteWrite},
	}
	type placed struct {
		owner, other *server.Server
		id           layout.RegionID
	}
	at := make([]placed, len(cases))
	for i, c := range cases {
		owner, other, id := ownerOf(t, dns, c.table)
		at[i] = placed{owner, other, id}
		t.Logf("%s: region %s on %s", c.name, id, owner.GRPCAddr())
		// Too large: refused by the owner, local or forwarded, as 413.
		for _, through := range []*server.Server{owner, other} {
			code, body := c.write(t, through, remoteRows+1)
			if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "batch too large") {
				t.Errorf("%s of %d points through the %s: %d %s (want 413, batch too large)", c.name, remoteRows+1, map[bool]string{true: "owner", false: "other datanode"}[through == owner], code, body)
			}
			if through == other && !strings.Contains(body, owner.GRPCAddr()) {
				t.Errorf("%s through the other datanode: %s (want it to name the owner %s: forwarded)", c.name, body, owner.GRPCAddr())
			}
		}
		if code, body := c.write(t, other, remoteRows); code != http.StatusNoContent {
			t.Fatalf("%s of %d points through the other datanode: %d %s", c.name, remoteRows, code, body)
		}
	}
	// Unavailable: each owner closes its region, as a region moving away
	// does, while its assignment stays: the owner answers Unavailable and
	// the other datanode retries until its routing times out (30 s), then
	// answers 503. Both writes wait at once.
	for _, p := range at {
		if err := p.owner.Engine().Unassign(context.Background(), p.id, true); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() {
			code, body := c.write(t, at[i].other, 1)
			if code != http.StatusServiceUnavailable || !strings.Contains(body, "not hosted") {
				t.Errorf("%s through the other datanode, the owner's region closed: %d %s (want 503, not hosted)", c.name, code, body)
			}
		})
	}
	wg.Wait()
}
