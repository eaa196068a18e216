// Package benchutil holds helpers shared by Strata's benchmarks.
package benchutil

import (
	"os"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/sst"
)

// PeakHeap samples the heap every few milliseconds until Report: the live
// heap as of the last GC (what the process must hold) and the heap's
// objects including garbage not yet collected (what it does hold; up to
// about twice the live heap at GOGC=100).
type PeakHeap struct {
	peak, live atomic.Uint64
	stop       chan struct{}
	done       sync.WaitGroup
}

// WatchHeap starts sampling.
func WatchHeap() *PeakHeap {
	p := &PeakHeap{stop: make(chan struct{})}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > p.peak.Load() {
				p.peak.Store(v)
			}
			if v := s[1].Value.Uint64(); v > p.live.Load() {
				p.live.Store(v)
			}
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// Report stops sampling and reports peak-heap-MiB and peak-live-MiB.
func (p *PeakHeap) Report(b *testing.B) {
	close(p.stop)
	p.done.Wait()
	b.ReportMetric(float64(p.peak.Load())/(1<<20), "peak-heap-MiB")
	b.ReportMetric(float64(p.live.Load())/(1<<20), "peak-live-MiB")
}

// PageKBEnv names the SST page size, in KiB, that SetPageBytes applies.
const PageKBEnv = "STRATA_BENCH_PAGE_KB"

// SetPageBytes sets sst.DefaultPageBytes from PageKBEnv, if set, for the
// benchmark's duration.
func SetPageBytes(b *testing.B) {
	v := os.Getenv(PageKBEnv)
	if v == "" {
		return
	}
	kb, err := strconv.Atoi(v)
	if err != nil || kb <= 0 {
		b.Fatalf("%s=%q: want a positive number of KiB", PageKBEnv, v)
	}
	old := sst.DefaultPageBytes
	sst.DefaultPageBytes = kb << 10
	b.Cleanup(func() { sst.DefaultPageBytes = old })
}
