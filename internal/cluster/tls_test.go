package cluster_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/tlsutil"
)

// TestTLSCluster runs metasrv and two datanodes with mutual TLS on every
// listener and every connection between them (certificates made here):
// the CLI and HTTPS clients with the CA and a client certificate create a
// table, write through one datanode to regions on both, and read it back
// over gRPC and PromQL. A client without TLS, without the CA, or with a
// certificate of another CA is refused with an error saying why.
func TestTLSCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	// The certificates, made as docs/deploy.md says.
	dir := filepath.Join(t.TempDir(), "tls")
	if out, code := cli(t, "tls", "generate", "--dir", dir, "--hosts", "localhost,127.0.0.1"); code != 0 {
		t.Fatalf("strata tls generate: %d\n%s", code, out)
	}
	certs := tlsutil.Files{CA: filepath.Join(dir, "ca.pem"), Node: filepath.Join(dir, "node.pem"), NodeKey: filepath.Join(dir, "node-key.pem"),
		Client: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem")}
	stranger, err := tlsutil.Generate(filepath.Join(t.TempDir(), "other"), []string{"localhost", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	node := []string{"--tls-cert-file", certs.Node, "--tls-key-file", certs.NodeKey, "--tls-ca-file", certs.CA, "--tls-client-ca-file", certs.CA}
	client := []string{"--tls-ca-file", certs.CA, "--tls-cert-file", certs.Client, "--tls-key-file", certs.ClientKey}

	// etcd with mutual TLS too: an external one where Debian's etcd is
	// installed, else metasrv's embedded one (TLS with the node's flags).
	store := "file://" + t.TempDir()
	metaArgs := []string{"--data-dir", t.TempDir(), "--grpc-addr", "127.0.0.1:0", "--store", store}
	etcd := externalEtcdTLS(t, &certs)
	if etcd != "" {
		metaArgs = append(metaArgs, "--etcd-endpoints", etcd)
	} else {
		addr := freePort(t)
		metaArgs, etcd = append(metaArgs, "--etcd-client-addr", addr), "https://"+addr
	}
	t.Logf("etcd at %s", etcd)
	meta := start(t, "metasrv", "metasrv", append(metaArgs, node...)...)
	var dns []*proc
	for i := range 2 {
		dns = append(dns, start(t, fmt.Sprintf("dn%d", i+1), "datanode", append([]string{"--id", fmt.Sprintf("dn%d", i+1), "--etcd-endpoints", etcd,
			"--store", store, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, node...)...))
	}
	run := func(args ...string) string {
		t.Helper()
		out, code := cli(t, append(args, client...)...)
		if code != 0 {
			t.Fatalf("strata %v: exit %d\n%s", args, code, out)
		}
		return out
	}
	m := []string{"--metasrv", meta.grpc}
	run(append([]string{"cluster", "create-table", "cpu", "--regions", "2"}, m...)...)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) { // polling another process's view
		out := run(append([]string{"cluster", "status"}, m...)...)
		if strings.Count(out, " live") == 2 && strings.Contains(out, "dn1") && strings.Contains(out, "dn2") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("regions not placed over TLS in a minute:\n%s", out)
		}
	}

	// HTTPS with the CA and a client certificate: rows for both regions,
	// through dn1 (it forwards dn2's share over TLS).
	cert, err := tls.LoadX509KeyPair(certs.Client, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := (tlsutil.Config{CAFile: certs.CA}).ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	cc.Certificates = []tls.Certificate{cert}
	httpsClient := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: cc}}
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, "cpu,host=h%d v=%d %d\n", i%40, i, int64(i+1)*1e9)
	}
	resp, err := httpsClient.Post("https://"+dns[0].http+"/write?db=x", "text/plain", strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write over HTTPS: %s", resp.Status)
	}
	// metasrv asks the datanodes for their regions' statistics, over TLS.
	if out := run(append([]string{"cluster", "regions", "-o", "csv"}, m...)...); strings.Count(out, "\n1/") != 2 || strings.Contains(out, "did not report") {
		t.Fatalf("regions over TLS:\n%s", out)
	}
	if out := run("query", "cpu", "--server", dns[0].grpc, "-o", "csv"); strings.Count(out, "\n") != 201 {
		t.Fatalf("query over TLS: %d lines, want 201:\n%.500s", strings.Count(out, "\n"), out)
	}
	if out := run("query", "--promql", "sum(count_over_time(cpu_v[100y]))", "--http", dns[1].http); !strings.Contains(out, " 200") {
		t.Fatalf("PromQL over HTTPS:\n%s", out)
	}
	// dn2 read dn1's region over peerwire, in TLS.
	resp, err = httpsClient.Get("https://" + dns[1].http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`(?m)^strata_remote_column_scans_total\{transport="peerwire"\} [1-9]`).Match(metrics) ||
		strings.Contains(string(metrics), `strata_remote_column_scans_total{transport="grpc"}`) {
		t.Fatalf("dn2's remote column scans:\n%s", regexp.MustCompile(`(?m)^strata_remote_column_scans_total.*$`).FindAll(metrics, -1))
	}

	// Refused, each with an error that says why.
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"plaintext", nil, "if the server uses TLS, pass --tls-ca-file"},
		{"no CA", []string{"--tls-cert-file", certs.Client, "--tls-key-file", certs.ClientKey}, "certificate signed by unknown authority"},
		{"no client certificate", []string{"--tls-ca-file", certs.CA}, "certificate required"},
		{"another CA's certificate", []string{"--tls-ca-file", certs.CA, "--tls-cert-file", stranger.Client, "--tls-key-file", stranger.ClientKey}, "unknown certificate authority"},
	} {
		out, code := cli(t, append([]string{"cluster", "status", "--metasrv", meta.grpc, "--timeout", "10s"}, c.args...)...)
		if code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, want an error saying %q:\n%s", c.name, code, c.want, out)
		}
	}
	if resp, err := http.Post("http://"+dns[0].http+"/write?db=x", "text/plain", strings.NewReader("cpu v=1 1\n")); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS") {
			t.Errorf("a plaintext HTTP write: %s %q, want 400 saying the server is HTTPS", resp.Status, body)
		}
	}
	if _, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cc.RootCAs}}}).Post("https://"+dns[0].http+"/write?db=x", "text/plain", strings.NewReader("cpu v=1 1\n")); err == nil {
		t.Error("an HTTPS write without a client certificate was answered")
	}
}
