package gcsched

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/layout"
)

type fakeRunner struct {
	mu       sync.Mutex
	inFlight map[layout.RegionID]int
	runs     map[layout.RegionID]int
	fulls    map[layout.RegionID]int
	overlap  int
	failLeft map[layout.RegionID]int
}

func (f *fakeRunner) RunGC(ctx context.Context, id layout.RegionID, full bool, opts Options) (Result, error) {
	f.mu.Lock()
	f.inFlight[id]++
	if f.inFlight[id] > 1 {
		f.overlap++
	}
	f.mu.Unlock()
	select { // a run takes a moment, so overlaps would show
	case <-ctx.Done():
	case <-time.After(5 * time.Millisecond):
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inFlight[id]--
	if f.failLeft[id] > 0 {
		f.failLeft[id]--
		return Result{}, errors.New("injected")
	}
	f.runs[id]++
	if full {
		f.fulls[id]++
	}
	return Result{Deleted: 1}, nil
}

// Two leadership terms in a row over one etcd: the second continues from
// the state the first stored; every region runs, none twice at once; a
// failing region is retried with backoff and recovers.
func TestSchedulerStateSurvivesLeaderChange(t *testing.T) {
	cli := clustertest.Etcd(t)
	ctx := context.Background()
	if err := SaveOptions(ctx, cli, Options{Enabled: true, FastInterval: 50 * time.Millisecond, FullInterval: 200 * time.Millisecond, Concurrency: 3}); err != nil {
		t.Fatal(err)
	}
	if err := SaveOptions(ctx, cli, Options{Enabled: true}); err == nil {
		t.Fatal("invalid options were accepted")
	}
	var ids []layout.RegionID
	for i := range 8 {
		ids = append(ids, layout.RegionID{Table: 1, Region: uint32(i)})
	}
	f := &fakeRunner{inFlight: map[layout.RegionID]int{}, runs: map[layout.RegionID]int{}, fulls: map[layout.RegionID]int{}, failLeft: map[layout.RegionID]int{ids[3]: 2}}
	term := func(d time.Duration) {
		s := New(cli, f, func(context.Context) ([]layout.RegionID, error) { return ids, nil }, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
		s.tick = 10 * time.Millisecond
		tctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		s.Run(tctx) // returns once its runs have stopped
	}
	term(time.Second)
	first, err := States(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	term(time.Second)
	second, _ := States(ctx, cli)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.overlap != 0 {
		t.Fatalf("%d runs overlapped a run of the same region", f.overlap)
	}
	for _, id := range ids {
		a, b := first[id], second[id]
		if a.Runs == 0 || b.Runs <= a.Runs || f.fulls[id] == 0 {
			t.Fatalf("region %s: %d runs after the first term, %d after the second, %d full runs", id, a.Runs, b.Runs, f.fulls[id])
		}
		if b.LastResult != "ok" || b.NextFast.IsZero() || b.LastFast.IsZero() || b.LastFull.IsZero() || b.Deleted == 0 {
			t.Fatalf("region %s state %+v", id, b)
		}
	}
	if first[ids[3]].Runs < 3 || second[ids[3]].Failures != 0 {
		t.Fatalf("the failing region: %+v then %+v", first[ids[3]], second[ids[3]])
	}
	// Disabled: nothing runs.
	o, _ := LoadOptions(ctx, cli)
	o.Enabled = false
	if err := SaveOptions(ctx, cli, o); err != nil {
		t.Fatal(err)
	}
	before := f.runs[ids[0]]
	f.mu.Unlock()
	term(200 * time.Millisecond)
	f.mu.Lock()
	if f.runs[ids[0]] != before {
		t.Fatal("GC ran while disabled")
	}
}

// Shortening an interval re-plans the runs already planned under the
// longer one: every region runs within the new interval (the cluster
// suite once saw one region of four run after `gc options
// --fast-interval 1s`, the others kept next runs planned hours ahead).
func TestShorterIntervalReplansRuns(t *testing.T) {
	cli := clustertest.Etcd(t)
	ctx := context.Background()
	if err := SaveOptions(ctx, cli, Options{Enabled: true, FastInterval: time.Hour, FullInterval: 24 * time.Hour, Concurrency: 4}); err != nil {
		t.Fatal(err)
	}
	var ids []layout.RegionID
	for i := range 4 {
		ids = append(ids, layout.RegionID{Table: 1, Region: uint32(i)})
	}
	f := &fakeRunner{inFlight: map[layout.RegionID]int{}, runs: map[layout.RegionID]int{}, fulls: map[layout.RegionID]int{}, failLeft: map[layout.RegionID]int{}}
	s := New(cli, f, func(context.Context) ([]layout.RegionID, error) { return ids, nil }, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	s.tick = 10 * time.Millisecond
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(tctx) }()
	defer func() { cancel(); <-done }()
	// Wait until every region has a plan under the hour-long interval.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := States(ctx, cli)
		if err == nil && len(st) == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("regions not planned: %v %v", st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := SaveOptions(ctx, cli, Options{Enabled: true, FastInterval: 200 * time.Millisecond, FullInterval: 24 * time.Hour, Concurrency: 4}); err != nil {
		t.Fatal(err)
	}
	// Generous deadline for a loaded machine; each region needs one run.
	deadline = time.Now().Add(60 * time.Second)
	for {
		f.mu.Lock()
		ran := 0
		for _, id := range ids {
			if f.runs[id] > 0 {
				ran++
			}
		}
		f.mu.Unlock()
		if ran == len(ids) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after shortening the interval only %d of %d regions ran", ran, len(ids))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
