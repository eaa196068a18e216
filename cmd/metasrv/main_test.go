package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/gcsched"
	"github.com/stratadb/strata/internal/tlsutil"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// metasrvProc is a metasrv run in this process by its own command line.
type metasrvProc struct {
	etcd, grpc, http string
}

// runMetasrv runs the metasrv command with args added to an embedded etcd
// and listeners on free loopback ports, until the test ends.
func runMetasrv(t *testing.T, args ...string) metasrvProc {
	t.Helper()
	p := metasrvProc{etcd: clustertest.FreeAddr(t), grpc: clustertest.FreeAddr(t), http: clustertest.FreeAddr(t)}
	c := command()
	c.SetArgs(append([]string{"--data-dir", t.TempDir(), "--etcd-client-addr", p.etcd, "--grpc-addr", p.grpc, "--http-addr", p.http,
		"--log-level", "warn"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("metasrv: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("metasrv did not stop in a minute")
		}
	})
	return p
}

// scrape returns the value of the sample whose line starts with series
// (name and labels as exposed), and whether it is there.
func scrape(t *testing.T, client *http.Client, url, series string) (float64, string, bool) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, string(body), false
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0, string(body), false
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v, string(body), true
}

// waitMetric waits until series reaches at least want.
func waitMetric(t *testing.T, client *http.Client, url, series string, want float64) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for { // polling another component's view through its endpoint
		v, body, ok := scrape(t, client, url, series)
		if ok && v >= want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not reach %v in a minute (now %v, exposed %v):\n%.3000s", series, want, v, ok, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fakeDatanode answers GcRegion and counts the calls.
type fakeDatanode struct {
	pb.UnimplementedDatanodeServer
	gcCalls atomic.Int64
}

func (f *fakeDatanode) GcRegion(_ context.Context, req *pb.GcRegionRequest) (*pb.GcRegionResponse, error) {
	f.gcCalls.Add(1)
	return &pb.GcRegionResponse{Regions: []*pb.GcRegionResult{{Region: req.GetRegion()}}}, nil
}

// TestMetasrvServesMetrics runs metasrv by its command line with an
// embedded etcd and a fake datanode registered in it. /metrics says it
// leads and which build it is, times its etcd requests, counts the
// region it placed, a scheduled GC run, and the datanode lease that
// expired, but not the datanode that left cleanly.
func TestMetasrvServesMetrics(t *testing.T) {
	p := runMetasrv(t)
	metrics := "http://" + p.http + "/metrics"
	hc := &http.Client{Timeout: 10 * time.Second}

	body := waitMetric(t, hc, metrics, "strata_metasrv_leader", 1)
	if !regexp.MustCompile(`(?m)^strata_build_info\{goversion="go[^"]+",revision="[^"]+",version="[^"]+"\} 1$`).MatchString(body) {
		t.Errorf("no strata_build_info in /metrics:\n%.3000s", body)
	}
	for _, name := range []string{"strata_metasrv_elections_won_total 1", "strata_metasrv_elections_lost_total 0", "strata_metasrv_datanode_lease_expiries_total 0"} {
		if !strings.Contains(body, "\n"+name+"\n") {
			t.Errorf("want %q in /metrics", name)
		}
	}
	resp, err := hc.Get("http://" + p.http + "/health")
	if err != nil {
		t.Fatal(err)
	}
	var health struct{ Status, Role string }
	if err := json.NewDecoder(resp.Body).Decode(&health); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if health.Status != "ok" || health.Role != "leader" {
		t.Errorf("/health: %+v, want ok and leader", health)
	}

	// A datanode (a fake that answers GC), registered under a lease kept
	// alive until the test lets it expire.
	ctx := context.Background()
	ec, err := cluster.Connect([]string{"http://" + p.etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	dn := &fakeDatanode{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterDatanodeServer(g, dn)
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()
	register := func(id string, ttl int64) (clientv3.LeaseID, context.CancelFunc) {
		t.Helper()
		lease, err := ec.Grant(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(cluster.NodeInfo{ID: id, GRPCAddr: ln.Addr().String(), Started: time.Now()})
		if _, err := ec.Put(ctx, cluster.DatanodesPrefix+id, string(data), clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		kctx, stop := context.WithCancel(ctx)
		ka, err := ec.KeepAlive(kctx, lease.ID)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for range ka {
			}
		}()
		return lease.ID, stop
	}
	_, stopDN1 := register("dn1", 2)
	defer stopDN1()

	// Fast GC due a second after a region appears.
	if err := gcsched.SaveOptions(ctx, ec, gcsched.Options{Enabled: true, FastInterval: time.Second, FullInterval: 24 * time.Hour,
		Concurrency: 1, RunTimeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := pb.NewMetaAdminClient(conn).CreateTable(ctx, &pb.CreateTableRequest{Name: "cpu", Regions: 1}); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, hc, metrics, `strata_metasrv_placement_moves_total{reason="placed"}`, 1)
	waitMetric(t, hc, metrics, `strata_metasrv_gc_runs_total{mode="fast",result="ok"}`, 1)
	if dn.gcCalls.Load() == 0 {
		t.Error("the GC run counted reached no datanode")
	}
	for _, series := range []string{`strata_metasrv_gc_lag_seconds_count{mode="fast",result="ok"}`, `strata_etcd_request_duration_seconds_count{op="Txn"}`} {
		if v, _, ok := scrape(t, hc, metrics, series); !ok || v == 0 {
			t.Errorf("%s: %v (exposed %v), want more than 0", series, v, ok)
		}
	}

	// A datanode that leaves cleanly marks itself leaving, then revokes
	// its lease: no expiry. dn1's lease runs out: one.
	lease2, stop2 := register("dn2", 10)
	stop2()
	data, _ := json.Marshal(cluster.NodeInfo{ID: "dn2", GRPCAddr: ln.Addr().String(), Leaving: true})
	if _, err := ec.Put(ctx, cluster.DatanodesPrefix+"dn2", string(data), clientv3.WithIgnoreLease()); err != nil {
		t.Fatal(err)
	}
	if _, err := ec.Revoke(ctx, lease2); err != nil {
		t.Fatal(err)
	}
	stopDN1()
	waitMetric(t, hc, metrics, "strata_metasrv_datanode_lease_expiries_total", 1)
	time.Sleep(500 * time.Millisecond) // a late count of dn2 would show now
	if v, _, _ := scrape(t, hc, metrics, "strata_metasrv_datanode_lease_expiries_total"); v != 1 {
		t.Errorf("lease expiries: %v, want 1 (dn1 expired; dn2 left cleanly)", v)
	}
}

// TestMetasrvEmbeddedEtcdServesTLS runs metasrv with certificates and
// mutual TLS: its embedded etcd answers an https:// client that has the CA
// and a client certificate, and refuses a plaintext client and one
// without a certificate. Its HTTP endpoint is HTTPS too.
func TestMetasrvEmbeddedEtcdServesTLS(t *testing.T) {
	f, err := tlsutil.Generate(filepath.Join(t.TempDir(), "tls"), []string{"localhost", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	p := runMetasrv(t, "--tls-cert-file", f.Node, "--tls-key-file", f.NodeKey, "--tls-ca-file", f.CA, "--tls-client-ca-file", f.CA)

	withCert, err := (tlsutil.Config{CAFile: f.CA, CertFile: f.Client, KeyFile: f.ClientKey}).ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: withCert}}
	waitMetric(t, hc, "https://"+p.http+"/metrics", "strata_metasrv_leader", 1)

	get := func(url string, tc *tls.Config) error {
		cli, err := cluster.ConnectTLS([]string{url}, tc)
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = cli.Get(ctx, cluster.ElectionPrefix, clientv3.WithPrefix())
		return err
	}
	if err := get("https://"+p.etcd, withCert); err != nil {
		t.Fatalf("a TLS client with a certificate: %v", err)
	}
	if err := get("http://"+p.etcd, nil); err == nil {
		t.Error("a plaintext etcd client was answered")
	}
	noCert, err := (tlsutil.Config{CAFile: f.CA}).ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	if err := get("https://"+p.etcd, noCert); err == nil {
		t.Error("a TLS etcd client without a client certificate was answered under mutual TLS")
	}
}
