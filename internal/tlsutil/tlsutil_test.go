package tlsutil_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/tlsutil"
)

// serve accepts TLS connections and completes their handshake.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				// A refused client certificate fails the handshake here and
				// surfaces at the client's first read.
				_ = c.(*tls.Conn).Handshake()
				_, _ = c.Write([]byte("x"))
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// dial handshakes and reads one byte; it returns the server's leaf.
func dial(addr string, c tlsutil.Config) (*x509.Certificate, error) {
	cfg, err := c.ClientTLS()
	if err != nil {
		return nil, err
	}
	cfg.ServerName = "localhost"
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return nil, err
	}
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		return nil, err
	}
	return conn.ConnectionState().PeerCertificates[0], nil
}

func TestMutualTLSAndRotation(t *testing.T) {
	f, err := tlsutil.Generate(t.TempDir(), []string{"localhost", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlsutil.Generate(t.TempDir(), []string{"localhost", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	// The server's files are copies, so that rotation can replace them.
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "node.pem"), filepath.Join(dir, "node-key.pem")
	copyFile(t, f.Node, cert)
	copyFile(t, f.NodeKey, key)
	both := filepath.Join(dir, "both-cas.pem")
	if err := os.WriteFile(both, append(read(t, f.CA), read(t, other.CA)...), 0o644); err != nil {
		t.Fatal(err)
	}

	srv := tlsutil.Config{CertFile: cert, KeyFile: key, ClientCAFile: both}
	scfg, err := srv.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, scfg)

	good := tlsutil.Config{CAFile: both, CertFile: f.Client, KeyFile: f.ClientKey}
	leaf, err := dial(addr, good)
	if err != nil {
		t.Fatalf("a client with the CA and a certificate: %v", err)
	}
	for _, c := range []struct {
		name string
		cfg  tlsutil.Config
		want string
	}{
		{"no CA (system roots)", tlsutil.Config{CertFile: f.Client, KeyFile: f.ClientKey}, "certificate signed by unknown authority"},
		{"another CA", tlsutil.Config{CAFile: other.CA, CertFile: f.Client, KeyFile: f.ClientKey}, "certificate signed by unknown authority"},
		{"no client certificate", tlsutil.Config{CAFile: both}, "certificate required"},
	} {
		if _, err := dial(addr, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	// A client certificate from a CA the server does not trust.
	stranger, err := tlsutil.Generate(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(addr, tlsutil.Config{CAFile: both, CertFile: stranger.Client, KeyFile: stranger.ClientKey}); err == nil || !strings.Contains(err.Error(), "bad certificate") && !strings.Contains(err.Error(), "unknown certificate authority") {
		t.Errorf("a client certificate of an unknown CA: %v", err)
	}

	// Rotation: new files in place; new connections get the new
	// certificate, without a restart.
	copyFile(t, other.NodeKey, key)
	copyFile(t, other.Node, cert)
	want := parse(t, other.Node)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, err := dial(addr, good)
		if err == nil && got.SerialNumber.Cmp(want.SerialNumber) == 0 {
			break
		}
		if err == nil && got.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
			t.Fatalf("served certificate %v is neither the old nor the new", got.SerialNumber)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rotated certificate was not served after 30 s (last error %v)", err)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	f, err := tlsutil.Generate(t.TempDir(), []string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg  tlsutil.Config
		want string
	}{
		{tlsutil.Config{CertFile: f.Node}, "go together"},
		{tlsutil.Config{ClientCAFile: f.CA}, "needs --tls-cert-file"},
		{tlsutil.Config{CertFile: f.Node, KeyFile: f.ClientKey}, "private key does not match"},
		{tlsutil.Config{CAFile: f.NodeKey}, "no PEM certificate"},
		{tlsutil.Config{CAFile: "/no/such/file"}, "no such file"},
	} {
		if err := c.cfg.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	if err := (tlsutil.Config{CertFile: f.Node, KeyFile: f.NodeKey, CAFile: f.CA, ClientCAFile: f.CA}).Check(); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	if err := os.WriteFile(to+".tmp", read(t, from), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(to+".tmp", to); err != nil {
		t.Fatal(err)
	}
}

func parse(t *testing.T, p string) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(read(t, p))
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
