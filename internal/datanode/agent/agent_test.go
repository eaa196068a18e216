package agent_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/datanode/agent"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
)

// A region moved away and back before the agent saw the move (A→B→A, the
// watch coalesced into one "owner A" state with a newer generation) may
// have been fenced by B: the agent closes its instance and opens the region
// again, with a new epoch.
func TestAgentReopensARegionReassignedSinceItOpened(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cli := clustertest.Etcd(t)
	ctx := context.Background()
	cat, err := catalog.Open(ctx, catalog.NewEtcdBackend(cli), 1)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := cat.CreateTable(ctx, catalog.TableSpec{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	id := layout.RegionID{Table: tb.ID, Region: 0}
	assign := func(gen uint64) {
		data, _ := json.Marshal(cluster.Assignment{Owner: "a", Gen: gen, At: time.Now().UTC()})
		if _, err := cli.Put(ctx, cluster.RegionKey(id), string(data)); err != nil {
			t.Fatal(err)
		}
	}
	agent := agent.New(agent.Options{Client: cli, Node: cluster.NodeInfo{ID: "a"}, Logger: quiet})
	eng, err := datanode.Open(ctx, objstoretest.Mem(t), datanode.Options{Logger: quiet, Catalog: catalog.NewEtcdBackend(cli),
		Remote: agent})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = eng.Close(ctx, false) }()
	agent.SetAddrs("127.0.0.1:1", "127.0.0.1:2")
	if err := agent.Start(ctx, eng); err != nil {
		t.Fatal(err)
	}
	defer agent.Close(ctx)
	// epoch waits until the region is open here with an epoch above min.
	epoch := func(min uint64) uint64 {
		t.Helper()
		for end := time.Now().Add(30 * time.Second); ; {
			if st, err := eng.Stats(context.Background(), "t"); err == nil && len(st) == 1 && st[0].Epoch > min {
				return st[0].Epoch
			}
			if time.Now().After(end) {
				t.Fatalf("region %s not open here with an epoch above %d", id, min)
			}
			time.Sleep(10 * time.Millisecond) // the agent opens in the background
		}
	}
	assign(1)
	first := epoch(0)
	assign(3) // moved to b (gen 2) and back (gen 3), unseen
	if second := epoch(first); second <= first {
		t.Fatalf("epoch %d after the reassignment, %d before", second, first)
	}
}
