package datanode_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server/servertest"
)

// patience bounds every wait on a signal: far above what any step takes on
// a loaded machine, far below a test's timeout.
const patience = time.Minute

// gatedCatalog is the engine's etcd catalog backend with a gate: while it
// is shut for an operation ("head", "commit"), each call of it reports on
// blocked and waits until the gate opens or the call's context ends, as
// a call to an unreachable etcd does.
type gatedCatalog struct {
	catalog.Backend
	watch catalog.Watcher

	mu      sync.Mutex
	shut    map[string]chan struct{}
	blocked chan string
	heads   atomic.Int64 // Head calls that met the shut gate
}

func gate(t *testing.T) (*gatedCatalog, servertest.Options) {
	g := &gatedCatalog{shut: map[string]chan struct{}{}, blocked: make(chan string, 64)}
	t.Cleanup(g.openAll) // before the node's cleanup runs (cleanups run last first)
	return g, servertest.Options{Tune: func(o *datanode.Options) {
		g.Backend, g.watch = o.Catalog, o.Catalog.(catalog.Watcher)
		o.Catalog = g
	}}
}

func (g *gatedCatalog) close(op string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut[op] == nil {
		g.shut[op] = make(chan struct{})
	}
}

func (g *gatedCatalog) open(op string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ch := g.shut[op]; ch != nil {
		close(ch)
		delete(g.shut, op)
	}
}

func (g *gatedCatalog) openAll() {
	for _, op := range []string{"head", "commit"} {
		g.open(op)
	}
}

func (g *gatedCatalog) pass(ctx context.Context, op string) error {
	g.mu.Lock()
	ch := g.shut[op]
	g.mu.Unlock()
	if ch == nil {
		return nil
	}
	if op == "head" {
		g.heads.Add(1)
	}
	select {
	case g.blocked <- op:
	default:
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gatedCatalog) Head(ctx context.Context) (int64, error) {
	if err := g.pass(ctx, "head"); err != nil {
		return 0, err
	}
	return g.Backend.Head(ctx)
}

func (g *gatedCatalog) Commit(ctx context.Context, cmps []catalog.Cmp, ops []catalog.Op) (int64, []catalog.Record, error) {
	if err := g.pass(ctx, "commit"); err != nil {
		return 0, nil, err
	}
	return g.Backend.Commit(ctx, cmps, ops)
}

func (g *gatedCatalog) Watch(ctx context.Context, rev int64, apply func([]catalog.Record, int64)) error {
	return g.watch.Watch(ctx, rev, apply)
}

// waitBlocked waits until a call of op is held at the gate.
func (g *gatedCatalog) waitBlocked(t *testing.T, op string) {
	t.Helper()
	deadline := time.After(patience)
	for {
		select {
		case got := <-g.blocked:
			if got == op {
				return
			}
		case <-deadline:
			t.Fatalf("no %s call reached the shut gate in %v", op, patience)
		}
	}
}

// async runs f in a goroutine; the channel gets its error.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// await is the error f's goroutine returns, or a failure if it returns
// none within patience.
func await(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(patience):
		t.Fatalf("%s: still waiting after %v", what, patience)
		return nil
	}
}

func floats(n int) []row.Point {
	return pts(n, "v", func(i int) row.Value { return row.FloatValue(float64(i)) })
}

// A write that creates a table while etcd does not answer holds up no
// request to a table the node knows: the create's commit runs without the
// engine's lock. Cancelling the write ends its wait on etcd.
func TestACreateWaitingOnEtcdHoldsUpNoOtherTable(t *testing.T) {
	ctx := context.Background()
	g, o := gate(t)
	_, e := openEngine(t, objstoretest.Mem(t), o)
	if _, err := e.Write(ctx, "cpu", floats(10), WriteOptions{CreateTable: true}); err != nil {
		t.Fatal(err)
	}
	servertest.WaitHosted(t, e, "cpu")

	g.close("commit")
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	create := async(func() error {
		_, err := e.Write(cctx, "fresh", floats(10), WriteOptions{CreateTable: true})
		return err
	})
	g.waitBlocked(t, "commit")

	later := floats(10)
	for i := range later {
		later[i].TS += 100
	}
	if err := await(t, "a write to a known table while another table's create waits on etcd", async(func() error {
		_, err := e.Write(ctx, "cpu", later, WriteOptions{})
		return err
	})); err != nil {
		t.Fatal(err)
	}
	if err := await(t, "a scan of a known table while another table's create waits on etcd", async(func() error {
		sc, err := e.Scan(ctx, "cpu", scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
		if err != nil {
			return err
		}
		defer sc.Close()
		n := 0
		for sc.Next() {
			n += len(sc.Batch())
		}
		if n != 20 {
			return fmt.Errorf("%d rows, want 20", n)
		}
		return sc.Err()
	})); err != nil {
		t.Fatal(err)
	}

	cancel()
	if err := await(t, "the cancelled create", create); !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled create: %v", err)
	}
}

// A request naming a table the catalog's copy lacks looks for it in etcd
// with the request's context: when the client gives up, so does the wait.
func TestAReloadOfAnUnknownTableStopsWithItsCaller(t *testing.T) {
	g, o := gate(t)
	_, e := openEngine(t, objstoretest.Mem(t), o)
	g.close("head")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	write := async(func() error {
		_, err := e.Write(ctx, "unknown", floats(10), WriteOptions{})
		return err
	})
	g.waitBlocked(t, "head")
	cancel()
	if err := await(t, "the cancelled write", write); !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled write: %v", err)
	}
	g.open("head")
	if _, err := e.Write(context.Background(), "unknown", floats(10), WriteOptions{}); !errors.Is(err, catalog.ErrTableNotFound) {
		t.Fatalf("a write to a missing table: %v", err)
	}
}

// Writes that miss one table at once share one reload of the catalog, and
// one create: all of them land.
func TestWritesMissingOneTableShareOneReload(t *testing.T) {
	g, o := gate(t)
	_, e := openEngine(t, objstoretest.Mem(t), o)
	g.close("head")
	const writers = 8
	done := make([]<-chan error, writers)
	for i := range done {
		p := floats(10)
		for j := range p {
			p[j].TS += int64(100 * i)
		}
		done[i] = async(func() error {
			_, err := e.Write(context.Background(), "shared", p, WriteOptions{CreateTable: true})
			return err
		})
	}
	g.waitBlocked(t, "head")
	deadline := time.Now().Add(patience)
	for e.ReloadWaiters("shared", true) != writers {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d writers wait on the shared reload after %v", e.ReloadWaiters("shared", true), writers, patience)
		}
		time.Sleep(time.Millisecond) // no signal for a writer joining a reload
	}
	if n := g.heads.Load(); n != 1 {
		t.Fatalf("%d writers missing one table read etcd's head %d times", writers, n)
	}
	g.open("head")
	for i, ch := range done {
		if err := await(t, "a writer of the new table", ch); err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	if n, _ := count(t, e, "shared", scan.Request{}); n != writers*10 {
		t.Fatalf("%d rows, want %d", n, writers*10)
	}
}
