package cluster

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is an embedded single-node etcd.
type Etcd struct {
	e         *embed.Etcd
	Endpoints []string
}

// freeAddr returns a loopback address with a free port.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartEtcd starts an embedded etcd with its data under dir, serving
// clients on clientAddr (host:port; empty: a free loopback port).
func StartEtcd(dir, clientAddr string, log *slog.Logger) (*Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "metasrv"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if clientAddr == "" {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		clientAddr = a
	}
	peer, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cu, _ := url.Parse("http://" + clientAddr)
	pu, _ := url.Parse("http://" + peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
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

// Close stops etcd.
func (e *Etcd) Close() { e.e.Close() }

// Connect opens a client to endpoints.
func Connect(endpoints []string) (*clientv3.Client, error) {
	return ConnectTLS(endpoints, nil)
}

// ConnectTLS is Connect with a TLS configuration for https:// endpoints
// (an external etcd with TLS; nil: plaintext).
func ConnectTLS(endpoints []string, tlsCfg *tls.Config) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: tlsCfg})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd %v: %w", endpoints, err)
	}
	return cli, nil
}
