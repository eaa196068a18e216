package gc_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/fsck"
	"github.com/stratadb/strata/internal/gc"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/sst"
	"github.com/stratadb/strata/internal/testseed"
)

var crid = layout.RegionID{Table: 9, Region: 0}

// life is one owner's run over the region: a writer, a compactor whose jobs
// are cancelled at random stages, a scanner, and both GC modes with no
// lingering and no minimum age, all at once, until the writer has written
// its batches or the store crashes at a random call.
type life struct {
	r       *region.Region
	crashed func() bool
	armAt   int    // the batch at which the crash is armed (-1: never)
	arm     func() // arms it
	onFlush func()
	sched   *compact.Scheduler
	rng     *rand.Rand
	// acked: (host, ts) -> value of every acknowledged write; maybe: the
	// keys of writes that failed (applied wholly or not at all).
	mu     sync.Mutex
	acked  map[string]float64
	maybe  map[string]float64
	nextTS *int64
	// Failures that break the invariants.
	missingScans atomic.Int64
	gcErrs       atomic.Int64
	committed    atomic.Int64 // compactions
	deleted      atomic.Int64 // objects deleted by GC
}

func key(host string, ts int64) string { return host + "/" + strconv.FormatInt(ts, 10) }

func (l *life) write(ctx context.Context, batches int) {
	for b := range batches {
		if b == l.armAt {
			l.arm()
		}
		pts := make([]row.Point, 20)
		l.mu.Lock()
		vals := map[string]float64{}
		for i := range pts {
			host := fmt.Sprintf("h%d", l.rng.IntN(6))
			*l.nextTS++
			ts := *l.nextTS
			v := l.rng.Float64()
			vals[key(host, ts)] = v
			pts[i] = row.Point{Tags: []row.Tag{{Name: "host", Value: host}}, TS: ts, Fields: []row.Field{{Name: "v", Value: row.FloatValue(v)}}}
		}
		l.mu.Unlock()
		_, err := l.r.Write(ctx, pts)
		l.mu.Lock()
		for k, v := range vals {
			if err == nil {
				l.acked[k] = v
			} else {
				l.maybe[k] = v
			}
		}
		l.mu.Unlock()
		if err != nil {
			return // crashed: this life is over
		}
		if err := l.r.Flush(ctx); err != nil {
			return
		}
		l.onFlush()
	}
}

func (l *life) run(t *testing.T, batches int, seed uint64) {
	ctx := context.Background()
	done := make(chan struct{})
	var wg sync.WaitGroup
	stream := uint64(100)
	// loop runs f each time trigger fires (nil: continuously) until done.
	loop := func(trigger <-chan struct{}, f func(rng *rand.Rand)) {
		stream++
		rng := rand.New(rand.NewPCG(seed, stream))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case <-trigger:
				default:
					if trigger != nil {
						select {
						case <-done:
							return
						case <-trigger:
						}
					}
				}
				f(rng)
			}
		}()
	}
	signal := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	toCompact, toGC := make(chan struct{}, 1), make(chan struct{}, 1)
	l.onFlush = func() { signal(toCompact); signal(toGC) }
	// A compaction of every file after each flush, cancelled from its
	// stage hook at random.
	loop(toCompact, func(rng *rand.Rand) {
		if res, err := l.sched.Compact(ctx, l.r, true); err == nil && len(res.Inputs) > 0 {
			l.committed.Add(1)
		}
		signal(toGC)
	})
	// Scans, continuously: they may fail once the store has crashed;
	// before that, any failure means a file was deleted under the scan.
	loop(nil, func(rng *rand.Rand) {
		sc, err := l.r.Scan(ctx, scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
		if err == nil {
			for sc.Next() {
			}
			err = sc.Err()
			sc.Close()
		}
		if err != nil && !l.crashed() {
			l.missingScans.Add(1)
			t.Errorf("a scan failed with the store up: %v", err)
		}
	})
	// Both GC modes after every flush and compaction, with nothing held
	// back by age: safety must come from ownership alone.
	loop(toGC, func(rng *rand.Rand) {
		var err error
		if rng.IntN(3) == 0 {
			var rep gc.FullReport
			rep, err = gc.Full(ctx, l.r, gc.FullOptions{MinAge: -1, PageSize: 7})
			l.deleted.Add(int64(rep.Deletes - rep.Failures))
		} else {
			var rep gc.Report
			rep, err = gc.Fast(ctx, l.r, gc.Options{Lingering: -1, JobRunning: l.sched.JobRunning})
			if err == nil {
				l.deleted.Add(int64(rep.Requests))
			}
		}
		if err != nil {
			l.gcErrs.Add(1)
		}
	})
	l.write(ctx, batches)
	close(done)
	wg.Wait()
}

// TestGCSafeUnderConcurrency runs writes, flushes, compactions with random
// cancellations, scans, and fast and full-listing GC (no lingering, no
// minimum age) concurrently, over several lives of the region, each ended
// by a crash of the store at a random call. No scan may fail for a missing
// file; afterwards every acknowledged row reads back with its value, and
// fsck finds zero missing and zero unowned objects.
func TestGCSafeUnderConcurrency(t *testing.T) {
	s0 := testseed.Seed(t) // replays the faults and choices; goroutine interleavings vary
	rng := rand.New(rand.NewPCG(s0, 1))
	// Ranged reads: a scan reads its files while it iterates, not all at
	// open, so a file deleted under a scan is noticed.
	defer func(v int64) { sst.WholeFileLimit = v }(sst.WholeFileLimit)
	sst.WholeFileLimit = 0
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	acked, maybe := map[string]float64{}, map[string]float64{}
	var nextTS int64
	lives := 8
	if testing.Short() {
		lives = 3
	}
	crashes, committed, deleted := 0, int64(0), int64(0)
	for n := range lives + 1 {
		last := n == lives // the final life runs without faults
		fs := faultstore.New(inner)
		// The crash comes at a random call once the writer has reached a
		// random batch, so that every life is cut somewhere in its work.
		var armed atomic.Bool
		armAt := -1
		if !last {
			armAt = 5 + rng.IntN(15)
			fs.AddRule(faultstore.Rule{Match: func(faultstore.Call) bool { return armed.Load() }, N: 1 + rng.IntN(150), Action: faultstore.Crash})
		}
		r, err := region.Open(ctx, objstoretest.Fast(fs), crid, region.Options{Create: n == 0, Logger: quiet, FlushBytes: 1 << 30})
		if err != nil {
			if last {
				t.Fatal(err)
			}
			continue // crashed while opening
		}
		l := &life{r: r, crashed: fs.Crashed, armAt: armAt, arm: func() { armed.Store(true) }, rng: rand.New(rand.NewPCG(s0, uint64(n)+2)), acked: acked, maybe: maybe, nextTS: &nextTS}
		l.sched = compact.NewScheduler(compact.SchedulerOptions{Logger: quiet, Options: compact.Options{OnStage: func(ctx context.Context, s compact.Stage) {
			l.mu.Lock()
			cancel := l.rng.IntN(8) == 0
			l.mu.Unlock()
			if cancel {
				go func() { _, _ = l.sched.Cancel(l.r) }() // acknowledged asynchronously
			}
		}}})
		sched := l.sched
		l.run(t, 20, s0+uint64(n))
		// The store may have crashed under both: what counts is what reads back
		// (below) and that nothing is left unowned.
		_ = sched.Close()
		_ = r.Close(ctx, region.CloseOptions{})
		if fs.Crashed() {
			crashes++
		}
		committed += l.committed.Load()
		deleted += l.deleted.Load()
		if l.missingScans.Load() > 0 {
			t.Fatalf("life %d: %d scans read deleted files", n, l.missingScans.Load())
		}
	}
	// A clean owner reclaims everything the crashes left, and every
	// acknowledged row is there with its value.
	r, err := region.Open(ctx, inner, crid, region.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gc.Fast(ctx, r, gc.Options{Lingering: -1}); err != nil {
		t.Fatal(err)
	}
	full, err := gc.Full(ctx, r, gc.FullOptions{MinAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	sc, err := r.Scan(ctx, scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
	if err != nil {
		t.Fatal(err)
	}
	for sc.Next() {
		for _, e := range sc.Batch() {
			got[key(row.SeriesTag(e.Series, "host"), e.TS)] = e.Fields[0].Float()
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	sc.Close()
	if err := r.Close(ctx, region.CloseOptions{}); err != nil {
		t.Fatal(err)
	}
	for k, v := range acked {
		if g, ok := got[k]; !ok || g != v {
			t.Fatalf("acknowledged %s=%v reads back as %v (present %v)", k, v, g, ok)
		}
	}
	for k, v := range got {
		if _, ok := acked[k]; !ok && maybe[k] != v {
			t.Fatalf("%s=%v was never written", k, v)
		}
	}
	rep, err := fsck.Check(ctx, inner, fsck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gc concurrency: lives=%d crashes=%d acked=%d rows=%d compactions=%d gc-deleted=%d full-gc orphans in the clean life=%d fsck missing=%d orphans=%d",
		lives, crashes, len(acked), len(got), committed, deleted, len(full.Orphans), rep.Missing(), rep.OrphanCount())
	if rep.Missing() != 0 || rep.OrphanCount() != 0 || len(full.Orphans) != 0 {
		t.Fatalf("fsck: %d missing, %d unowned; full GC found %v", rep.Missing(), rep.OrphanCount(), full.Orphans)
	}
	if len(acked) == 0 || crashes == 0 || committed == 0 || deleted == 0 {
		t.Fatalf("the workload did not exercise enough: %d acked rows, %d crashes, %d compactions, %d objects deleted by GC", len(acked), crashes, committed, deleted)
	}
}
