// Package tlsutil is Strata's TLS: server certificates that rotate without
// a restart, clients that verify servers against a CA, and optional mutual
// TLS. The same Config serves every process: gRPC and HTTP servers, the
// CLI, datanode-to-datanode and metasrv-to-datanode connections, and the
// etcd client.
package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Config names the PEM files of a process's TLS. The zero Config is TLS
// off.
type Config struct {
	// CertFile and KeyFile are this process's certificate and key: served
	// by its servers and, under mutual TLS, presented by its clients.
	CertFile, KeyFile string
	// CAFile verifies the servers this process dials (empty: the system
	// roots, when TLS is on).
	CAFile string
	// ClientCAFile turns on mutual TLS on this process's servers: clients
	// must present a certificate it signed.
	ClientCAFile string
}

// Server reports whether this process serves TLS.
func (c Config) Server() bool { return c.CertFile != "" }

// Client reports whether this process dials with TLS.
func (c Config) Client() bool { return c.CAFile != "" || c.CertFile != "" }

// Check validates the combination and loads every file once, so a bad
// path fails at start with a clear error.
func (c Config) Check() error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return errors.New("tls: --tls-cert-file and --tls-key-file go together")
	}
	if c.ClientCAFile != "" && c.CertFile == "" {
		return errors.New("tls: --tls-client-ca-file needs --tls-cert-file and --tls-key-file")
	}
	if c.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
			return fmt.Errorf("tls: load %s and %s: %w", c.CertFile, c.KeyFile, err)
		}
	}
	for _, f := range []string{c.CAFile, c.ClientCAFile} {
		if f != "" {
			if _, err := loadPool(f); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckNode is Check for a server process, which also dials its peers
// (and, standalone, itself): with TLS on it needs the CA that verifies
// them.
func (c Config) CheckNode() error {
	if err := c.Check(); err != nil {
		return err
	}
	if c.Server() && c.CAFile == "" {
		return errors.New("tls: --tls-cert-file needs --tls-ca-file too: the node calls the others (and itself) over TLS")
	}
	return nil
}

func loadPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls: read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("tls: %s holds no PEM certificate", path)
	}
	return pool, nil
}

// keypair serves the certificate in a pair of files, reloading it when
// either file changes (checked at most once a second), so certificates
// rotate without a restart. A reload that fails keeps the previous one.
type keypair struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	mtimes  [2]time.Time
	checked time.Time
}

func newKeypair(certFile, keyFile string) (*keypair, error) {
	k := &keypair{certFile: certFile, keyFile: keyFile}
	if _, err := k.get(); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *keypair) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	if k.cert != nil && now.Sub(k.checked) < time.Second {
		return k.cert, nil
	}
	k.checked = now
	var mtimes [2]time.Time
	for i, f := range []string{k.certFile, k.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			if k.cert != nil {
				return k.cert, nil
			}
			return nil, fmt.Errorf("tls: %w", err)
		}
		mtimes[i] = st.ModTime()
	}
	if k.cert != nil && mtimes == k.mtimes {
		return k.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		if k.cert != nil {
			return k.cert, nil // mid-rotation: one file written, not yet the other
		}
		return nil, fmt.Errorf("tls: load %s and %s: %w", k.certFile, k.keyFile, err)
	}
	k.cert, k.mtimes = &cert, mtimes
	return k.cert, nil
}

// ServerTLS is the tls.Config of this process's servers.
func (c Config) ServerTLS() (*tls.Config, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	k, err := newKeypair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return k.get() }}
	if c.ClientCAFile != "" {
		pool, err := loadPool(c.ClientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientTLS is the tls.Config of this process's clients: servers are
// verified against CAFile (or the system roots), and CertFile is
// presented when a server asks for a certificate.
func (c Config) ClientTLS() (*tls.Config, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" {
		k, err := newKeypair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return k.get() }
	}
	return cfg, nil
}

// ForEndpoints is the client TLS for a set of URLs (etcd's): the
// configuration if any is https://, else nil (plaintext).
func (c Config) ForEndpoints(urls []string) (*tls.Config, error) {
	for _, u := range urls {
		if strings.HasPrefix(u, "https://") {
			return c.ClientTLS()
		}
	}
	return nil, nil
}

// ServerOptions are the gRPC server options: TLS credentials, or none.
func (c Config) ServerOptions() ([]grpc.ServerOption, error) {
	if !c.Server() {
		return nil, nil
	}
	cfg, err := c.ServerTLS()
	if err != nil {
		return nil, err
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}, nil
}

// DialOption is the gRPC transport of this process's clients: TLS when
// configured, else plaintext.
func (c Config) DialOption() (grpc.DialOption, error) {
	if !c.Client() {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	cfg, err := c.ClientTLS()
	if err != nil {
		return nil, err
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
}
