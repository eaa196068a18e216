package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/stratadb/strata/internal/tlsutil"
)

// Etcd is an embedded single-node etcd.
type Etcd struct {
	e         *embed.Etcd
	Endpoints []string
}

// freeAddr returns a loopback address with a free port (a variable, so
// tests can hand out one that is taken).
var freeAddr = func() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartEtcd starts an embedded etcd with its data under dir, serving
// clients on clientAddr (host:port; empty: a free loopback port). With a
// server certificate in tc (tc.Server()), its client and peer listeners
// serve TLS only, and its Endpoints are https:// (see etcdTLS).
func StartEtcd(dir, clientAddr string, tc tlsutil.Config, log *slog.Logger) (*Etcd, error) {
	var e *embed.Etcd
	var cu *url.URL
	// A free port found here can be taken by another process before etcd
	// binds it (tests start many servers at once): the ports this picked
	// are picked again (not a client address it was given). etcd binds its
	// listeners before it writes anything under dir, and closes them when
	// it fails, so a failed start leaves nothing behind.
	for attempt := 1; ; attempt++ {
		var err error
		e, cu, err = startEtcd(dir, clientAddr, tc)
		if err == nil {
			break
		}
		inUse := errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
		if !inUse || clientAddr != "" && strings.Contains(err.Error(), clientAddr) || attempt == 5 {
			return nil, fmt.Errorf("start embedded etcd: %w", err)
		}
		log.Warn("embedded etcd: a port it picked was taken before it bound it; picking again", "err", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd not ready after 60s")
	}
	log.Info("embedded etcd ready", "client", cu.String(), "dir", dir)
	return &Etcd{e: e, Endpoints: []string{cu.String()}}, nil
}

// startEtcd starts etcd once, on clientAddr (empty: a free port) and a
// free peer port.
func startEtcd(dir, clientAddr string, tc tlsutil.Config) (e *embed.Etcd, cu *url.URL, err error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "metasrv"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if clientAddr == "" {
		if clientAddr, err = freeAddr(); err != nil {
			return nil, nil, err
		}
	}
	peer, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	scheme := "http://"
	if tc.Server() {
		scheme = "https://"
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = etcdTLS(tc)
	}
	cu, _ = url.Parse(scheme + clientAddr)
	pu, _ := url.Parse(scheme + peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err = embed.StartEtcd(cfg)
	return e, cu, err
}

// etcdTLS is the embedded etcd's TLS for a node's configuration: both
// listeners serve the node's certificate (etcd reads the files again on
// every handshake, so they rotate as the node's other listeners do).
// Clients must present a certificate the client CA signed when mutual TLS
// is on; peers, one the node CA signed (a single node has none, but a
// certificate is never waived).
func etcdTLS(tc tlsutil.Config) (client, peer transport.TLSInfo) {
	client = transport.TLSInfo{CertFile: tc.CertFile, KeyFile: tc.KeyFile, TrustedCAFile: tc.ClientCAFile, ClientCertAuth: tc.ClientCAFile != ""}
	peer = transport.TLSInfo{CertFile: tc.CertFile, KeyFile: tc.KeyFile, TrustedCAFile: tc.CAFile, ClientCertAuth: tc.CAFile != ""}
	return client, peer
}

// Close stops etcd.
func (e *Etcd) Close() { e.e.Close() }

// Connect opens a client to endpoints.
func Connect(endpoints []string) (*clientv3.Client, error) {
	return ConnectTLS(endpoints, nil)
}

// ConnectTLS is Connect with a TLS configuration for https:// endpoints
// (nil: plaintext) and extra gRPC dial options (EtcdMetrics.DialOptions).
func ConnectTLS(endpoints []string, tlsCfg *tls.Config, opts ...grpc.DialOption) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: tlsCfg, DialOptions: opts})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd %v: %w", endpoints, err)
	}
	return cli, nil
}
