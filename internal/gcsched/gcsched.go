// Package gcsched is metasrv's GC scheduler. It runs on the leader only,
// asks each region's owner to run fast GC every FastInterval and
// full-listing GC every FullInterval, and keeps its options and every
// region's state (last runs, results, counts, next due) in etcd, so a new
// leader continues where the old one stopped. Work is spread with jitter,
// bounded by a concurrency limit, and failed regions are retried with
// backoff.
package gcsched

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/layout"
)

// Options are the scheduler's options, stored at cluster.GCOptionsKey and
// changeable at run time.
type Options struct {
	Enabled      bool          `json:"enabled"`
	FastInterval time.Duration `json:"fast_interval_ns"`
	FullInterval time.Duration `json:"full_interval_ns"`
	Lingering    time.Duration `json:"lingering_ns"`
	MinAge       time.Duration `json:"min_age_ns"`
	Concurrency  int           `json:"concurrency"`
	// RunTimeout bounds one run (default 5 min): an owner that hangs (a
	// paused process) must not hold a concurrency slot forever.
	RunTimeout time.Duration `json:"run_timeout_ns,omitempty"`
}

// DefaultOptions: GC on, fast every 5 min, full every 24 h, lingering 1 h,
// minimum age 24 h, 4 regions at a time, 5 min per run at most.
func DefaultOptions() Options {
	return Options{Enabled: true, FastInterval: 5 * time.Minute, FullInterval: 24 * time.Hour, Lingering: time.Hour, MinAge: 24 * time.Hour, Concurrency: 4, RunTimeout: 5 * time.Minute}
}

// RegionState is one region's GC history, stored at cluster.GCStateKey.
type RegionState struct {
	LastFast   time.Time `json:"last_fast,omitempty"`
	LastFull   time.Time `json:"last_full,omitempty"`
	NextFast   time.Time `json:"next_fast"`
	NextFull   time.Time `json:"next_full"`
	LastResult string    `json:"last_result,omitempty"` // ok or error
	LastError  string    `json:"last_error,omitempty"`
	Runs       int64     `json:"runs"`
	Failures   int64     `json:"failures"` // consecutive
	Deleted    int64     `json:"deleted"`  // objects, over all runs
	Orphans    int64     `json:"orphans"`  // found by full GC, over all runs
}

// Result is what one run reports.
type Result struct {
	Deleted int64
	Orphans int64
}

// Runner runs GC on a region's owner.
type Runner interface {
	RunGC(ctx context.Context, id layout.RegionID, full bool, opts Options) (Result, error)
}

// Scheduler schedules GC. Run it for the duration of a leadership term.
type Scheduler struct {
	cli     *clientv3.Client
	runner  Runner
	regions func(context.Context) ([]layout.RegionID, error)
	log     *slog.Logger
	metrics *Metrics
	now     func() time.Time
	tick    time.Duration
}

// New creates a scheduler over the regions that regions lists. m may be
// nil (metrics not kept).
func New(cli *clientv3.Client, runner Runner, regions func(context.Context) ([]layout.RegionID, error), log *slog.Logger, m *Metrics) *Scheduler {
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Scheduler{cli: cli, runner: runner, regions: regions, log: log, metrics: m, now: time.Now, tick: time.Second}
}

// LoadOptions reads the options (the defaults if none are stored).
func LoadOptions(ctx context.Context, cli *clientv3.Client) (Options, error) {
	resp, err := cli.Get(ctx, cluster.GCOptionsKey)
	if err != nil {
		return Options{}, err
	}
	o := DefaultOptions()
	if len(resp.Kvs) > 0 {
		if err := json.Unmarshal(resp.Kvs[0].Value, &o); err != nil {
			return Options{}, fmt.Errorf("gc options in etcd: %w", err)
		}
	}
	return o, nil
}

// SaveOptions validates and stores options.
func SaveOptions(ctx context.Context, cli *clientv3.Client, o Options) error {
	if o.FastInterval <= 0 || o.FullInterval <= 0 || o.Concurrency <= 0 || o.Lingering < 0 || o.MinAge < 0 {
		return fmt.Errorf("gc options: intervals and concurrency must be positive, lingering and minimum age not negative")
	}
	data, _ := json.Marshal(o)
	_, err := cli.Put(ctx, cluster.GCOptionsKey, string(data))
	return err
}

type stateKV struct {
	st     RegionState
	modRev int64 // 0: not stored yet
}

// States reads every region's stored state.
func States(ctx context.Context, cli *clientv3.Client) (map[layout.RegionID]RegionState, error) {
	all, err := loadStates(ctx, cli)
	if err != nil {
		return nil, err
	}
	out := make(map[layout.RegionID]RegionState, len(all))
	for id, s := range all {
		out[id] = s.st
	}
	return out, nil
}

func loadStates(ctx context.Context, cli *clientv3.Client) (map[layout.RegionID]stateKV, error) {
	resp, err := cli.Get(ctx, cluster.GCStatePrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := map[layout.RegionID]stateKV{}
	for _, kv := range resp.Kvs {
		id, ok := cluster.ParseRegionKey(cluster.GCStatePrefix, string(kv.Key))
		if !ok {
			continue
		}
		var st RegionState
		if json.Unmarshal(kv.Value, &st) == nil {
			out[id] = stateKV{st: st, modRev: kv.ModRevision}
		}
	}
	return out, nil
}

// Trigger makes regions' next fast (or full) run due now.
func Trigger(ctx context.Context, cli *clientv3.Client, ids []layout.RegionID, full bool, now time.Time) error {
	states, err := loadStates(ctx, cli)
	if err != nil {
		return err
	}
	for _, id := range ids {
		s := states[id]
		if full {
			s.st.NextFull = now
		} else {
			s.st.NextFast = now
		}
		if _, err := save(ctx, cli, id, s); err != nil {
			return err
		}
	}
	return nil
}

// save stores a region's state if nobody changed it since it was read: a
// deposed leader's late write fails instead of overwriting the new
// leader's.
func save(ctx context.Context, cli *clientv3.Client, id layout.RegionID, s stateKV) (int64, error) {
	data, _ := json.Marshal(s.st)
	key := cluster.GCStateKey(id)
	cmp := clientv3.Compare(clientv3.ModRevision(key), "=", s.modRev)
	resp, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, string(data))).Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("gc state of %s changed concurrently", id)
	}
	return resp.Header.Revision, nil
}

func jitter(d time.Duration) time.Duration { return d + rand.N(d/10+1) }

// Run schedules until ctx ends (the leadership term). A run in progress
// when ctx ends is cancelled; its state is not updated, so the next leader
// runs it again (GC is idempotent).
func (s *Scheduler) Run(ctx context.Context) {
	var running sync.Map // region -> struct{}: at most one run per region
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(s.tick)
	defer t.Stop()
	for {
		s.round(ctx, &running, &wg)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Scheduler) round(ctx context.Context, running *sync.Map, wg *sync.WaitGroup) {
	opts, err := LoadOptions(ctx, s.cli)
	if err != nil || !opts.Enabled {
		return
	}
	ids, err := s.regions(ctx)
	if err != nil {
		return
	}
	states, err := loadStates(ctx, s.cli)
	if err != nil {
		return
	}
	now := s.now()
	inFlight := 0
	running.Range(func(any, any) bool { inFlight++; return true })
	type due struct {
		id   layout.RegionID
		st   stateKV
		full bool
		at   time.Time
	}
	var todo []due
	for _, id := range ids {
		st, ok := states[id]
		if !ok {
			// New region: spread the first runs over half an interval.
			st.st.NextFast = now.Add(rand.N(opts.FastInterval/2 + 1))
			st.st.NextFull = now.Add(rand.N(opts.FullInterval/2 + 1))
			_, _ = save(ctx, s.cli, id, st) // failing that, the next round plans it again
			continue
		}
		if replan(&st.st, now, opts) {
			rev, err := save(ctx, s.cli, id, st)
			if err != nil {
				continue // changed meanwhile: the next round sees it
			}
			st.modRev = rev
		}
		switch {
		case !st.st.NextFull.After(now):
			todo = append(todo, due{id, st, true, st.st.NextFull})
		case !st.st.NextFast.After(now):
			todo = append(todo, due{id, st, false, st.st.NextFast})
		}
	}
	// Most overdue first: with more due regions than slots, none waits
	// forever behind regions that are due again every round.
	slices.SortFunc(todo, func(a, b due) int { return a.at.Compare(b.at) })
	overdue := map[bool]time.Duration{false: 0, true: 0}
	for _, d := range todo {
		overdue[d.full] = max(overdue[d.full], now.Sub(d.at))
	}
	for full, lag := range overdue {
		s.metrics.Overdue.WithLabelValues(mode(full)).Set(lag.Seconds())
	}
	for _, d := range todo {
		if inFlight >= opts.Concurrency {
			return
		}
		if _, busy := running.LoadOrStore(d.id, struct{}{}); busy {
			continue
		}
		inFlight++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer running.Delete(d.id)
			s.runOne(ctx, d.id, d.st, d.full, opts, d.at)
		}()
	}
}

// replan pulls in runs planned under a longer interval than the current
// options' (an operator shortened it): a run is never planned further
// than one interval plus its jitter ahead. It reports whether it changed
// st.
func replan(st *RegionState, now time.Time, o Options) bool {
	changed := false
	for _, p := range []struct {
		next     *time.Time
		interval time.Duration
	}{{&st.NextFast, o.FastInterval}, {&st.NextFull, o.FullInterval}} {
		if p.next.After(now.Add(p.interval + p.interval/10)) {
			*p.next = now.Add(rand.N(p.interval/2 + 1))
			changed = true
		}
	}
	return changed
}

// runOne runs a region's GC that was due at dueAt.
func (s *Scheduler) runOne(ctx context.Context, id layout.RegionID, st stateKV, full bool, opts Options, dueAt time.Time) {
	timeout := opts.RunTimeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	lag := max(s.now().Sub(dueAt), 0)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	res, err := s.runner.RunGC(rctx, id, full, opts)
	cancel()
	if ctx.Err() != nil {
		return // the term ended: the next leader runs it again
	}
	now := s.now()
	st.st.Runs++
	result := "ok"
	if err != nil {
		result = "error"
	}
	s.metrics.Runs.WithLabelValues(mode(full), result).Inc()
	s.metrics.Lag.WithLabelValues(mode(full), result).Observe(lag.Seconds())
	if err != nil {
		st.st.Failures++
		st.st.LastResult, st.st.LastError = "error", err.Error()
		// Back off: 10 s (or the interval, if shorter), doubling, up to
		// the interval.
		interval := opts.FastInterval
		if full {
			interval = opts.FullInterval
		}
		back := min(min(10*time.Second, interval)<<min(st.st.Failures-1, 20), interval)
		if full {
			st.st.NextFull = now.Add(back)
		} else {
			st.st.NextFast = now.Add(back)
		}
		s.log.Warn("scheduled GC failed", "region", id.String(), "full", full, "failures", st.st.Failures, "retry_in", back, "err", err)
	} else {
		st.st.Failures = 0
		st.st.LastResult, st.st.LastError = "ok", ""
		st.st.Deleted += res.Deleted
		st.st.Orphans += res.Orphans
		if full {
			st.st.LastFull, st.st.NextFull = now, now.Add(jitter(opts.FullInterval))
			if res.Orphans > 0 {
				s.log.Warn("full-listing GC found unowned objects", "region", id.String(), "orphans", res.Orphans)
			}
		} else {
			st.st.LastFast, st.st.NextFast = now, now.Add(jitter(opts.FastInterval))
		}
	}
	if _, err := save(ctx, s.cli, id, st); err != nil {
		s.log.Warn("saving GC state failed", "region", id.String(), "err", err)
	}
	s.log.Debug("scheduled GC ran", "region", id.String(), "full", full, "err", err, "deleted", res.Deleted, "next_fast", st.st.NextFast, "next_full", st.st.NextFull)
}
