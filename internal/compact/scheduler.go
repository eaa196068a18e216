package compact

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
)

// Metrics are the compaction metrics of a process.
type Metrics struct {
	Jobs     *prometheus.CounterVec // event: started, committed, cancelled, failed
	BytesIn  prometheus.Counter
	BytesOut prometheus.Counter
	Duration prometheus.Histogram
}

// NewMetrics creates the metrics and registers them with reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Jobs:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_compactions_total", Help: "Compaction jobs by event: started, committed, cancelled, failed."}, []string{"event"}),
		BytesIn:  prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_compaction_bytes_in_total", Help: "Bytes of SSTs read by committed compactions."}),
		BytesOut: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_compaction_bytes_out_total", Help: "Bytes of SSTs written by committed compactions."}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "strata_compaction_duration_seconds", Help: "Duration of committed compactions.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}),
	}
	if reg != nil {
		reg.MustRegister(m.Jobs, m.BytesIn, m.BytesOut, m.Duration)
	}
	return m
}

// SchedulerOptions configure a Scheduler.
type SchedulerOptions struct {
	Options
	// MaxConcurrent bounds the process's running jobs (default 1).
	MaxConcurrent int
	Metrics       *Metrics
	Logger        *slog.Logger
}

// Scheduler runs at most one job per region and MaxConcurrent in all.
type Scheduler struct {
	opts SchedulerOptions
	sem  chan struct{}

	mu      sync.Mutex
	running map[layout.RegionID]*Job
	closed  bool
	wg      sync.WaitGroup
}

// ErrBusy: the region already has a job.
var ErrBusy = errors.New("compact: a compaction of the region is running")

// NewScheduler returns a scheduler.
func NewScheduler(opts SchedulerOptions) *Scheduler {
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 1
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Scheduler{opts: opts, sem: make(chan struct{}, opts.MaxConcurrent), running: map[layout.RegionID]*Job{}}
}

// start registers a job for r's picked inputs (nil if none or busy).
func (s *Scheduler) start(r *region.Region, all bool) (*Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, region.ErrClosed
	}
	if s.running[r.ID()] != nil {
		return nil, ErrBusy
	}
	st := r.Manifest()
	opts := s.opts.Options
	if w := r.CompactionWindow(); w > 0 {
		opts.Window = w
	}
	in := Pick(st.Files, opts)
	if all && in == nil && len(st.Files) > 1 {
		in = SortedFiles(st.Files)
	}
	if in == nil {
		return nil, nil
	}
	j := NewJob(r, in, opts)
	s.running[r.ID()] = j
	return j, nil
}

func (s *Scheduler) run(ctx context.Context, r *region.Region, j *Job) (Result, error) {
	defer func() {
		s.mu.Lock()
		delete(s.running, r.ID())
		s.mu.Unlock()
	}()
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-j.cancelledC():
		return Result{}, ErrCancelled
	}
	defer func() { <-s.sem }()
	m := s.opts.Metrics
	m.Jobs.WithLabelValues("started").Inc()
	res, err := j.Run(ctx)
	switch {
	case err == nil:
		m.Jobs.WithLabelValues("committed").Inc()
		m.BytesIn.Add(float64(res.BytesIn))
		m.BytesOut.Add(float64(res.BytesOut))
		m.Duration.Observe(res.Duration.Seconds())
		s.opts.Logger.Info("compaction committed", "region", r.ID().String(), "job", j.ID, "inputs", len(res.Inputs), "outputs", len(res.Outputs),
			"bytes_in", res.BytesIn, "bytes_out", res.BytesOut, "took", res.Duration.Round(time.Millisecond))
	case errors.Is(err, ErrCancelled):
		m.Jobs.WithLabelValues("cancelled").Inc()
	default:
		m.Jobs.WithLabelValues("failed").Inc()
		s.opts.Logger.Warn("compaction failed", "region", r.ID().String(), "job", j.ID, "err", err)
	}
	return res, err
}

// Trigger starts a compaction of r in the background if its files need one
// and none is running. It is the hook for region.Options.OnFlush.
func (s *Scheduler) Trigger(r *region.Region) {
	j, err := s.start(r, false)
	if err != nil || j == nil {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_, _ = s.run(context.Background(), r, j) // it logs and counts the outcome
	}()
}

// Compact compacts r now and waits: the picked window, or with all every
// file of the region. It returns a zero Result if there is nothing to do.
func (s *Scheduler) Compact(ctx context.Context, r *region.Region, all bool) (Result, error) {
	j, err := s.start(r, all)
	if err != nil || j == nil {
		return Result{}, err
	}
	s.wg.Add(1)
	defer s.wg.Done()
	return s.run(ctx, r, j)
}

// Cancel cancels the running job of region instance r, if any, and waits
// until the cancellation is acknowledged (its outputs deleted or owned by
// its marker) or the job committed (ErrTooLate). It reports whether a job
// was running. A job of another instance of the same region (reopened
// since) is not r's and is left alone.
func (s *Scheduler) Cancel(r *region.Region) (bool, error) {
	s.mu.Lock()
	j := s.running[r.ID()]
	s.mu.Unlock()
	if j == nil || j.r != r {
		return false, nil
	}
	return true, j.Cancel()
}

// Close cancels every job and waits for them.
func (s *Scheduler) Close() error {
	s.mu.Lock()
	s.closed = true
	jobs := make([]*Job, 0, len(s.running))
	for _, j := range s.running {
		jobs = append(jobs, j)
	}
	s.mu.Unlock()
	var errs []error
	for _, j := range jobs {
		if err := j.Cancel(); err != nil && !errors.Is(err, ErrTooLate) {
			errs = append(errs, err)
		}
	}
	s.wg.Wait()
	return errors.Join(errs...)
}

// JobRunning reports whether a job of this scheduler with that id runs
// (GC asks before deleting a marker's outputs).
func (s *Scheduler) JobRunning(job string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.running {
		if j.ID == job {
			return true
		}
	}
	return false
}

// Wait waits for the jobs running now (and any they trigger) to finish.
func (s *Scheduler) Wait() { s.wg.Wait() }

// Running reports the job running on a region, if any.
func (s *Scheduler) Running(id layout.RegionID) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.running[id]; j != nil {
		return j.ID, true
	}
	return "", false
}
