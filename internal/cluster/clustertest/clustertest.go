// Package clustertest starts what cluster tests need in-process: an
// embedded etcd and a client of it, or many etcds in turn.
package clustertest

import (
	"io"
	"log/slog"
	"os"
	"sync"
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

// EtcdPool starts embedded etcds ahead of a test's need, in the
// background: a test that runs on a fresh etcd many times (a cluster for
// each section of a test file) does not wait for each one's start, most
// of which is its election. Those not taken close when the test ends.
type EtcdPool struct {
	ready chan pooledEtcd
	stop  chan struct{}
	wg    sync.WaitGroup
}

type pooledEtcd struct {
	e   *cluster.Etcd
	dir string
	err error
}

// NewEtcdPool keeps ahead etcds starting or started, each in a new
// directory under the test's temporary directory.
func NewEtcdPool(t testing.TB, ahead int) *EtcdPool {
	t.Helper()
	p := &EtcdPool{ready: make(chan pooledEtcd), stop: make(chan struct{})}
	base := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for range ahead {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for {
				var pe pooledEtcd
				var err error
				if pe.dir, err = os.MkdirTemp(base, "etcd"); err == nil {
					pe.e, err = cluster.StartEtcd(pe.dir, "", tlsutil.Config{}, quiet)
				}
				pe.err = err
				select {
				case p.ready <- pe:
				case <-p.stop:
					pe.close()
					return
				}
			}
		}()
	}
	t.Cleanup(func() { close(p.stop); p.wg.Wait() })
	return p
}

// Get returns a started etcd's client endpoints, and what closes it and
// deletes its data (over 120 MB on disk: its WAL preallocates 64 MB
// files), for the caller to call once done with it.
func (p *EtcdPool) Get(t testing.TB) (endpoints []string, stop func()) {
	t.Helper()
	pe := <-p.ready
	if pe.err != nil {
		pe.close()
		t.Fatal(pe.err)
	}
	return pe.e.Endpoints, pe.close
}

func (pe pooledEtcd) close() {
	if pe.e != nil {
		pe.e.Close()
	}
	if pe.dir != "" {
		_ = os.RemoveAll(pe.dir)
	}
}
