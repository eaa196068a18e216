package rules_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/rules"
	"github.com/stratadb/strata/internal/tlsutil"
)

// TestAlertmanagerTLSAndBearerToken: alerts reach a real Alertmanager
// that serves TLS only and requires a client certificate its CA signed
// (--alertmanager-tls-ca-file, -cert-file, -key-file), and a server that
// also checks a bearer token (--alertmanager-bearer-token-file) gets it
// with every request; without the client certificate nothing reaches
// Alertmanager.
func TestAlertmanagerTLSAndBearerToken(t *testing.T) {
	bin := clustertest.AlertmanagerBinary(t)
	dir := t.TempDir()
	certs, err := tlsutil.Generate(filepath.Join(dir, "tls"), []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	clientCert, err := tls.LoadX509KeyPair(certs.Client, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	// The test's own client of Alertmanager.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}}}}

	// A real Alertmanager: TLS only, client certificates required.
	conf, web := filepath.Join(dir, "alertmanager.yml"), filepath.Join(dir, "web.yml")
	writeFile(t, conf, "route:\n  receiver: none\nreceivers:\n  - name: none\n")
	writeFile(t, web, fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: %s\n",
		certs.Node, certs.NodeKey, certs.CA))
	addr := clustertest.FreeAddr(t)
	clustertest.Run(t, "alertmanager", bin, "--config.file="+conf, "--web.config.file="+web, "--storage.path="+dir,
		"--web.listen-address="+addr, "--cluster.listen-address=")
	am := "https://" + addr
	clustertest.Until(t, time.Minute, "alertmanager ready over TLS", func() (bool, string) {
		resp, err := hc.Get(am + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	amActive := func() (bool, string) {
		resp, err := hc.Get(am + "/api/v2/alerts")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var as []amAlert
		if err := json.Unmarshal(body, &as); err != nil {
			return false, string(body)
		}
		return len(as) == 1 && as[0].Labels["alertname"] == "Always" && as[0].Status.State == "active", string(body)
	}

	// A server that checks the bearer token too, behind the same TLS.
	const token = "s3cret-token"
	tokenFile := filepath.Join(dir, "token")
	writeFile(t, tokenFile, token+"\n")
	var mu sync.Mutex
	var auths []string
	fake := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	nodeCert, err := tls.LoadX509KeyPair(certs.Node, certs.NodeKey)
	if err != nil {
		t.Fatal(err)
	}
	fake.TLS = &tls.Config{Certificates: []tls.Certificate{nodeCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	fake.StartTLS()
	defer fake.Close()

	rulesFile := filepath.Join(rulesDir(t), "always.yml")
	writeFile(t, rulesFile, "groups:\n  - name: a\n    interval: 1s\n    rules:\n      - alert: Always\n        expr: vector(1)\n")

	// Without a client certificate: refused by Alertmanager (the CA is
	// given, so the failure is the missing certificate, not the server's).
	n := start(t, t.TempDir(), objstoretest.Mem(t), rules.Options{Files: []string{rulesFile}, AlertmanagerURLs: []string{am},
		Alertmanager: rules.AlertmanagerClient{CAFile: certs.CA}})
	clustertest.Until(t, time.Minute, "notifications to Alertmanager failing without a client certificate", func() (bool, string) {
		resp, err := http.Get(n.base + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`(?m)^prometheus_notifications_errors_total\{alertmanager="` + regexp.QuoteMeta(am) + `/api/v2/alerts"\} ([1-9]\d*)$`).FindSubmatch(body)
		return m != nil, fmt.Sprintf("%s", regexp.MustCompile(`(?m)^prometheus_notifications_errors.*$`).FindAll(body, -1))
	})
	if ok, body := amActive(); ok || strings.Contains(body, "Always") {
		t.Fatalf("Alertmanager got the alert from a client without a certificate: %s", body)
	}
	n.Stop()

	// With the client certificate and the token: both get the alert.
	n = start(t, t.TempDir(), objstoretest.Mem(t), rules.Options{Files: []string{rulesFile}, AlertmanagerURLs: []string{am, fake.URL},
		Alertmanager: rules.AlertmanagerClient{CAFile: certs.CA, CertFile: certs.Client, KeyFile: certs.ClientKey, BearerTokenFile: tokenFile}})
	clustertest.Until(t, time.Minute, "the alert active in Alertmanager", amActive)
	clustertest.Until(t, time.Minute, "the bearer token sent", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range auths {
			if a != "Bearer "+token {
				return false, fmt.Sprintf("Authorization %q", a)
			}
		}
		return len(auths) > 0, fmt.Sprint(auths)
	})
}
