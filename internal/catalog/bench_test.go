package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/schema"
)

// benchSizes are the catalog sizes the benchmarks run at: each change
// should cost the same at every size. Select one with
// -bench 'CreateTable/tables=1000$'.
var benchSizes = []int{1_000, 10_000, 100_000}

// populate puts n tables of 40 columns into etcd directly (100 to a
// transaction), as the catalog writes them, and returns the catalog over
// them, opened by a process that starts now.
func populate(b *testing.B, n int) (*catalog.Catalog, *clientv3.Client) {
	b.Helper()
	ctx := context.Background()
	cli := clustertest.Etcd(b)
	began := time.Now()
	base := catalog.Table{Regions: 1, CreatedAt: began.UTC(), Schema: wideColumns(catalog.Table{Schema: schema.Persisted{Version: 1,
		Columns: []schema.Column{{Name: "time", Role: "timestamp", Type: "int64"}}}}, 40)}
	var ops []clientv3.Op
	for i := range n {
		t := base
		t.ID, t.Name = uint32(i+1), fmt.Sprintf("populated_%06d", i)
		data, err := json.Marshal(t)
		if err != nil {
			b.Fatal(err)
		}
		ops = append(ops, clientv3.OpPut(catalog.EtcdPrefix+"tables/"+t.Name, string(data)))
		if len(ops) == 100 || i == n-1 {
			if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
				b.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	if _, err := cli.Put(ctx, catalog.EtcdPrefix+"next_id", strconv.Itoa(n+1)); err != nil {
		b.Fatal(err)
	}
	put := time.Since(began)
	began = time.Now()
	c, err := catalog.Open(ctx, catalog.NewEtcdBackend(cli), 1)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	b.Logf("%d tables of 40 columns: put into etcd in %v, opened (loaded) in %v", n, put.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	return c, cli
}

// BenchmarkCreateTable creates tables in a catalog that holds N already:
// one transaction of two small records, whatever N.
func BenchmarkCreateTable(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("tables=%d", n), func(b *testing.B) {
			c, _ := populate(b, n)
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				if _, err := c.CreateTable(ctx, catalog.TableSpec{Name: fmt.Sprintf("created_%d", i)}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRecordColumns adds a column to a table of a catalog of N
// tables (another table each time), as a write with a new field does: one
// transaction of that table's record, whatever N.
func BenchmarkRecordColumns(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("tables=%d", n), func(b *testing.B) {
			c, _ := populate(b, n)
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				_, err := c.UpdateTable(ctx, fmt.Sprintf("populated_%06d", i%n), func(t *catalog.Table) error {
					t.Schema.Version++
					t.Schema.Columns = append(t.Schema.Columns, schema.Column{Name: fmt.Sprintf("added_%d", i), Role: "field", Type: "float64"})
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
