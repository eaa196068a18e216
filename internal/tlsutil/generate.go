package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files are the PEM files Generate writes.
type Files struct {
	CA, CAKey         string // the certificate authority
	Node, NodeKey     string // for every server (and, under mutual TLS, its clients)
	Client, ClientKey string // for the CLI under mutual TLS
}

// Generate writes a new CA into dir, and a node and a client certificate
// it signed, valid for the given host names and IP addresses, for a year.
// It is for tests and for setting up a cluster (strata tls generate);
// production CAs usually come from elsewhere.
func Generate(dir string, hosts []string) (Files, error) {
	f := Files{
		CA: filepath.Join(dir, "ca.pem"), CAKey: filepath.Join(dir, "ca-key.pem"),
		Node: filepath.Join(dir, "node.pem"), NodeKey: filepath.Join(dir, "node-key.pem"),
		Client: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return f, err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	caTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "Strata CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return f, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	if err := writePEM(f.CA, "CERTIFICATE", caDER, 0o644); err != nil {
		return f, err
	}
	if err := writeKey(f.CAKey, caKey); err != nil {
		return f, err
	}
	leaf := func(cn string, usage []x509.ExtKeyUsage, hosts []string, certPath, keyPath string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
		return writeKey(keyPath, key)
	}
	if err := leaf("strata-node", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, hosts, f.Node, f.NodeKey); err != nil {
		return f, err
	}
	if err := leaf("strata-client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, f.Client, f.ClientKey); err != nil {
		return f, err
	}
	return f, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
	// Written aside and renamed, so a server reloading it never reads half.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("tls: write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}
