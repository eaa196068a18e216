// Package servertest runs Strata the way `strata standalone` does (an
// embedded etcd, a metasrv and one datanode with its agent, gRPC and HTTP
// servers) inside a test, over a store the test keeps.
package servertest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/server"
)

// Node is a running standalone.
type Node struct {
	*server.Server
	t       testing.TB
	stopped bool
}

// Options tune a test's standalone.
type Options struct {
	// Dir holds the embedded etcd (default: a new t.TempDir()); start
	// again with the same Dir and store to restart.
	Dir string
	// Tune adjusts the engine's options.
	Tune   func(*datanode.Options)
	Config func(*server.Config)
}

// Start starts a standalone over store; it shuts down at the test's end
// unless Stop ran first.
func Start(t testing.TB, store objstore.Bucket, o Options) *Node {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	cfg := server.Config{DataDir: o.Dir, Bucket: store, Standalone: true, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tune: o.Tune}
	if o.Config != nil {
		o.Config(&cfg)
	}
	s, err := server.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{Server: s, t: t}
	t.Cleanup(func() {
		if !n.stopped {
			n.Stop()
		}
	})
	return n
}

// Stop shuts the standalone down (flushing every region).
func (n *Node) Stop() {
	n.t.Helper()
	n.stopped = true
	if err := n.Shutdown(context.Background()); err != nil {
		n.t.Errorf("shutdown: %v", err)
	}
}

// WaitHosted waits until every region of table is open on this node:
// metasrv places a new table's regions, and the agent opens them, in the
// background.
func WaitHosted(t testing.TB, e *datanode.Engine, table string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		tb, err := e.Table(table)
		if err == nil && tb.Logical { // its rows are in LinesTable's regions
			tb, err = e.Table(catalog.LinesOf(tb.Name))
		}
		if err != nil {
			t.Fatal(err)
		}
		open := 0
		for _, id := range e.Hosted() {
			if id.Table == tb.ID {
				open++
			}
		}
		if open == int(tb.Regions) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("table %s: %d of %d regions open after a minute", table, open, tb.Regions)
		}
		time.Sleep(10 * time.Millisecond) // the agent opens regions in the background; no signal to wait on
	}
}
