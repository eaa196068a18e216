package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/schema"
)

// etcdRequestLimit is etcd's default --max-request-bytes (the embedded
// etcd's too): the single value the catalog used to be passed it at about
// 623 tables of 40 columns.
const etcdRequestLimit = 1.5 * (1 << 20)

// wideColumns returns n field columns after the timestamp, with names as
// long as a real schema's.
func wideColumns(t catalog.Table, n int) schema.Persisted {
	s := t.Schema
	s.Version++
	for i := range n {
		s.Columns = append(s.Columns, schema.Column{Name: fmt.Sprintf("field_measurement_with_a_long_name_%05d", i), Role: "field", Type: "float64"})
	}
	return s
}

// prefixValues returns the sizes of the values under the catalog's prefix.
func prefixValues(t testing.TB, cli *clientv3.Client) (largest, total int) {
	t.Helper()
	resp, err := cli.Get(context.Background(), catalog.EtcdPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		largest = max(largest, len(kv.Value))
		total += len(kv.Value)
	}
	return largest, total
}

// 700 tables of 40 columns: the single value the catalog used to be would
// be past etcd's request limit (and the catalog wedged), but one key per
// table keeps every value, and every commit, the size of one table.
func TestManyWideTablesKeepEveryEtcdValueSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("1,400 etcd commits")
	}
	ctx := context.Background()
	cli := clustertest.Etcd(t)
	c := open(t, catalog.NewEtcdBackend(cli))
	const tables, columns = 700, 40
	for i := range tables {
		name := fmt.Sprintf("table_%04d", i)
		tb, err := c.CreateTable(ctx, catalog.TableSpec{Name: name})
		if err != nil {
			t.Fatalf("create table %d: %v", i, err)
		}
		if _, err := c.UpdateTable(ctx, name, func(t *catalog.Table) error { t.Schema = wideColumns(tb, columns); return nil }); err != nil {
			t.Fatalf("record the columns of table %d: %v", i, err)
		}
	}
	largest, total := prefixValues(t, cli)
	t.Logf("%d tables of %d columns: largest value %d bytes, all values %d bytes", tables, columns, largest, total)
	if total <= etcdRequestLimit {
		t.Fatalf("the catalog holds %d bytes: the test does not reach the size the single value failed at", total)
	}
	if largest >= 64<<10 {
		t.Fatalf("the largest value under %s is %d bytes", catalog.EtcdPrefix, largest)
	}
	// Another process loads it all (in pages).
	c2 := open(t, catalog.NewEtcdBackend(cli))
	all := c2.List(false)
	if len(all) != tables {
		t.Fatalf("another process loads %d tables", len(all))
	}
	for _, tb := range all {
		if len(tb.Schema.Columns) != columns+1 {
			t.Fatalf("table %s has %d columns", tb.Name, len(tb.Schema.Columns))
		}
	}
}

// A commit etcd refuses (one table's columns past the request limit)
// says which table and why, and leaves the copy as it was: the table keeps
// its schema, and other tables are created and changed as before.
func TestARefusedCommitLeavesTheCatalogUsable(t *testing.T) {
	ctx := context.Background()
	cli := clustertest.Etcd(t)
	c := open(t, catalog.NewEtcdBackend(cli))
	wide, err := c.CreateTable(ctx, catalog.TableSpec{Name: "wide"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTable(ctx, catalog.TableSpec{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.UpdateTable(ctx, "wide", func(t *catalog.Table) error { t.Schema = wideColumns(wide, 21_000); return nil })
	t.Logf("the refused commit: %v", err)
	if err == nil || !strings.Contains(err.Error(), "table wide") || !strings.Contains(err.Error(), "request is too large") {
		t.Fatalf("a table past etcd's limit: %v", err)
	}
	if got, _ := c.Lookup("wide"); len(got.Schema.Columns) != len(wide.Schema.Columns) {
		t.Fatalf("the refused schema is in the copy: %d columns", len(got.Schema.Columns))
	}
	if _, err := c.CreateTable(ctx, catalog.TableSpec{Name: "after"}); err != nil {
		t.Fatalf("create a table after the refused commit: %v", err)
	}
	for _, name := range []string{"wide", "other"} {
		if _, err := c.UpdateTable(ctx, name, func(t *catalog.Table) error { t.TTL = time.Hour; return nil }); err != nil {
			t.Fatalf("change table %s after the refused commit: %v", name, err)
		}
	}
	c2 := open(t, catalog.NewEtcdBackend(cli))
	if got, err := c2.Table(ctx, "wide"); err != nil || got.TTL != time.Hour || len(got.Schema.Columns) != len(wide.Schema.Columns) {
		t.Fatalf("another process reads %d columns, TTL %v, %v", len(got.Schema.Columns), got.TTL, err)
	}
}

// Two processes create the same tables at once: each name is created once
// (the loser gets ErrTableExists), every id is distinct, and concurrent
// updates of one table all land.
func TestTwoProcessesRacing(t *testing.T) {
	ctx := context.Background()
	cli := clustertest.Etcd(t)
	cli2, err := cluster.Connect(cli.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cli2.Close()
	procs := []*catalog.Catalog{open(t, catalog.NewEtcdBackend(cli)), open(t, catalog.NewEtcdBackend(cli2))}
	const names = 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := map[string][]uint32{}
	var errs []error
	for p, c := range procs {
		for w := range 2 { // two writers in each process
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range names {
					name := fmt.Sprintf("t%02d", (i+p*7+w*3)%names)
					tb, err := c.CreateTable(ctx, catalog.TableSpec{Name: name})
					mu.Lock()
					switch {
					case err == nil:
						created[name] = append(created[name], tb.ID)
					case !errors.Is(err, catalog.ErrTableExists):
						errs = append(errs, err)
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	ids := map[uint32]string{}
	for name, got := range created {
		if len(got) != 1 {
			t.Fatalf("table %s was created %d times: %v", name, len(got), got)
		}
		if other, dup := ids[got[0]]; dup {
			t.Fatalf("tables %s and %s both got id %d", name, other, got[0])
		}
		ids[got[0]] = name
	}
	if len(created) != names {
		t.Fatalf("%d of %d tables created", len(created), names)
	}

	// Every process adds its own columns to one table at once.
	const adds = 10
	for p, c := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range adds {
				_, err := c.UpdateTable(ctx, "t00", func(t *catalog.Table) error {
					t.Schema.Version++
					t.Schema.Columns = append(t.Schema.Columns, schema.Column{Name: fmt.Sprintf("p%d_%d", p, i), Role: "field", Type: "int64"})
					return nil
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, c := range procs {
		got, err := c.Table(ctx, "t00")
		if err != nil || len(got.Schema.Columns) != 1+len(procs)*adds {
			t.Fatalf("t00 has %d columns after %d additions: %v", len(got.Schema.Columns), len(procs)*adds, err)
		}
	}
}

// legacyCatalog is the single JSON value the catalog was kept in before
// one key per table.
type legacyCatalog struct {
	Version uint64                    `json:"version"`
	NextID  uint32                    `json:"next_id"`
	Tables  map[string]*catalog.Table `json:"tables"`
	Sweeps  map[uint32]time.Time      `json:"sweeps,omitempty"`
}

// A cluster whose etcd holds the catalog as one value (the layout before
// one key per table) opens with every table, the sweeps and the id counter
// as they were, even with records left by a move that did not finish; the
// old value is replaced by one an old binary fails to read.
func TestTheSingleValueCatalogIsMovedOnOpen(t *testing.T) {
	ctx := context.Background()
	cli := clustertest.Etcd(t)
	swept := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	old := legacyCatalog{Version: 812, NextID: 400, Tables: map[string]*catalog.Table{}, Sweeps: map[uint32]time.Time{3: swept}}
	const tables = 250 // more than one transaction's worth
	for i := range tables {
		name := fmt.Sprintf("legacy_%03d", i)
		old.Tables[name] = &catalog.Table{ID: uint32(10 + i), Name: name, Regions: 2, CreatedAt: swept,
			Schema: schema.Persisted{Version: 1, Columns: []schema.Column{{Name: "time", Role: "timestamp", Type: "int64"}}}}
	}
	old.Tables["legacy_000"].Dropping = true
	data, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, catalog.LegacyEtcdKey, string(data)); err != nil {
		t.Fatal(err)
	}
	// What a move over an older value that stopped half way left.
	if _, err := cli.Put(ctx, catalog.EtcdPrefix+"tables/gone", `{"id":7,"name":"gone","regions":1}`); err != nil {
		t.Fatal(err)
	}
	// Two processes open at once: both move it, or wait for the other.
	procs := make([]*catalog.Catalog, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			procs[i], errs[i] = catalog.Open(ctx, catalog.NewEtcdBackend(cli), 1)
		}()
	}
	wg.Wait()
	for i, c := range procs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		t.Cleanup(c.Close)
		if live, dropping := c.List(false), c.List(true); len(live) != tables-1 || len(dropping) != 1 || dropping[0].Name != "legacy_000" {
			t.Fatalf("process %d: %d tables, %d dropping after the move", i, len(live), len(dropping))
		}
		if _, ok := c.Lookup("gone"); ok {
			t.Fatalf("process %d: a record the old value does not have survived the move", i)
		}
		if got, ok := c.Lookup("legacy_123"); !ok || got.ID != 133 || got.Regions != 2 {
			t.Fatalf("process %d: legacy_123 is %+v", i, got)
		}
		sweeps, err := c.Sweeps(ctx)
		if err != nil || len(sweeps) != 1 || !sweeps[3].Equal(swept) {
			t.Fatalf("process %d: sweeps %v, %v", i, sweeps, err)
		}
	}
	tb, err := procs[1].CreateTable(ctx, catalog.TableSpec{Name: "new"})
	if err != nil || tb.ID != old.NextID {
		t.Fatalf("the first table after the move: %+v, %v (want id %d)", tb, err, old.NextID)
	}
	resp, err := cli.Get(ctx, catalog.LegacyEtcdKey)
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Version uint64 }
	if len(resp.Kvs) != 1 || json.Unmarshal(resp.Kvs[0].Value, &v) == nil {
		t.Fatalf("the old key after the move: %q, which a binary from before would read", resp.Kvs)
	}
	// Opening again moves nothing.
	c3 := open(t, catalog.NewEtcdBackend(cli))
	if got, ok := c3.Lookup("new"); !ok || got.ID != tb.ID || len(c3.List(false)) != tables {
		t.Fatalf("opening again: %d tables", len(c3.List(false)))
	}
}

// heldWatch is an EtcdBackend whose first watch starts only once release
// is closed: the copy falls behind meanwhile.
type heldWatch struct {
	*catalog.EtcdBackend
	release chan struct{}
	held    sync.Once
}

func (b *heldWatch) Watch(ctx context.Context, rev int64, apply func([]catalog.Record, int64)) error {
	b.held.Do(func() {
		select {
		case <-b.release:
		case <-ctx.Done():
		}
	})
	return b.EtcdBackend.Watch(ctx, rev, apply)
}

// A copy whose watch fell behind etcd's compaction loads everything
// again: it sees the tables created meanwhile, and not those deleted.
func TestACopyBehindACompactionLoadsAgain(t *testing.T) {
	ctx := context.Background()
	cli := clustertest.Etcd(t)
	a := open(t, catalog.NewEtcdBackend(cli))
	gone, err := a.CreateTable(ctx, catalog.TableSpec{Name: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	held := &heldWatch{EtcdBackend: catalog.NewEtcdBackend(cli), release: make(chan struct{})}
	behind := open(t, held)
	if _, err := a.CreateTable(ctx, catalog.TableSpec{Name: "new"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.MarkDropping(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := a.Forget(ctx, "gone", time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, catalog.EtcdPrefix+"head")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	close(held.release)
	wctx, cancel := context.WithTimeout(ctx, time.Minute) // fail, not hang, if the copy never catches up
	defer cancel()
	tables, err := behind.Tables(wctx)
	if err != nil || len(tables) != 1 || tables[0].Name != "new" {
		t.Fatalf("tables after the compaction: %+v, %v", tables, err)
	}
	if _, ok := behind.Lookup("gone"); ok {
		t.Fatal("a table deleted before the compaction is still in the copy")
	}
	if sweeps, err := behind.Sweeps(ctx); err != nil || len(sweeps) != 1 || sweeps[gone.ID].IsZero() {
		t.Fatalf("sweeps after the compaction: %v, %v", sweeps, err)
	}
}
