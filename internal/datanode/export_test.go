package datanode

import (
	"context"

	"github.com/stratadb/strata/internal/region"
)

// WaitCompactions waits until no compaction runs.
func (e *Engine) WaitCompactions() { e.sched.Wait() }

// LocalRegions are the regions of table open here.
func (e *Engine) LocalRegions(table string) []*region.Region {
	_, rs, _ := e.localRegions(context.Background(), table)
	return rs
}

// ReloadWaiters is the number of requests waiting on the shared reload of
// table (with create: the one that creates it if missing).
func (e *Engine) ReloadWaiters(table string, create bool) int {
	return e.reloads.waiting(reloadKey{table, create})
}
