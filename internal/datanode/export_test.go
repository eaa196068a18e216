package datanode

import "github.com/stratadb/strata/internal/region"

// WaitCompactions waits until no compaction runs.
func (e *Engine) WaitCompactions() { e.sched.Wait() }

// LocalRegions are the regions of table open here.
func (e *Engine) LocalRegions(table string) []*region.Region {
	_, rs, _ := e.localRegions(table)
	return rs
}
