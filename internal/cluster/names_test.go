package cluster_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/rwload"
)

// A datanode that holds 50,000 remote-written metric names fails over as
// one with a few does: the metrics table's regions live on both
// datanodes, one is killed with -9 before anything is flushed, its region
// reopens on the other (replaying its WAL) within the 30 s every failover
// test allows, and every series and sample is counted back through the
// survivor's query API.
func TestFailoverWithFiftyThousandNames(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and waits for a lease to expire")
	}
	store := objstoretest.MinIO(t).NewBucket(t)
	etcd := freePort(t)
	meta := start(t, "metasrv", "metasrv", "--data-dir", t.TempDir(), "--etcd-client-addr", etcd, "--grpc-addr", "127.0.0.1:0")
	var dns []*proc
	for _, id := range []string{"dn1", "dn2"} {
		dns = append(dns, start(t, id, "datanode", "--id", id, "--etcd-endpoints", "http://"+etcd,
			"--store", store, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--metrics-regions", "2"))
	}
	c := admin(t, meta.grpc)

	g, err := rwload.NewGenerator(rwload.Shape{Names: 50_000, Series: 1, Labels: 5, Scrapes: 2, Interval: 15 * time.Second,
		Start: time.Now().Add(-time.Hour).Truncate(time.Millisecond), Batch: 2000, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	write, _, err := rwload.Endpoints("http://" + dns[0].http)
	if err != nil {
		t.Fatal(err)
	}
	res, err := rwload.Run(ctx, g, rwload.Options{URL: write, Workers: 2})
	if err != nil || res.Failed != 0 {
		t.Fatalf("remote write: %+v, %v", res, err)
	}
	st := placed(t, c, 2, 30*time.Second, "")
	owners := map[string]int{}
	for _, r := range st.Regions {
		owners[r.Owner]++
	}
	if owners["dn1"] != 1 || owners["dn2"] != 1 {
		t.Fatalf("the metrics table's two regions are not one on each datanode: %v", owners)
	}

	killed := time.Now()
	dns[1].signal(syscall.SIGKILL)
	placed(t, c, 2, 60*time.Second, "dn2")
	took := time.Since(killed)
	_, base, _ := rwload.Endpoints("http://" + dns[0].http)
	chk, err := rwload.Verify(ctx, g, rwload.VerifyOptions{URL: base, Settle: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("50,000 names: dn2's region reopened on dn1 in %v; stored %d of %d series, %d of %d samples (%d queries, %v)",
		took.Round(100*time.Millisecond), chk.StoredSeries, chk.ExpectedSeries, chk.StoredSamples, chk.ExpectedSamples, chk.Queries, chk.Took.Round(100*time.Millisecond))
	if took > 30*time.Second {
		t.Errorf("failover took %v, more than 30 s", took)
	}
	if !chk.OK() {
		t.Fatalf("after failover: %+v", chk)
	}
}
