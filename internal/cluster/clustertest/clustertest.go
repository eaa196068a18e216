// Package clustertest starts what cluster tests need in-process: an
// embedded etcd and a client of it.
package clustertest

import (
	"io"
	"log/slog"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/tlsutil"
)

// Etcd starts an embedded single-node etcd under a temporary directory and
// returns a client of it (its Endpoints name the server). Both close when
// the test ends.
func Etcd(t testing.TB) *clientv3.Client {
	t.Helper()
	e, err := cluster.StartEtcd(t.TempDir(), "", tlsutil.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	cli, err := cluster.Connect(e.Endpoints)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
