// Package compact merges a region's SSTs with a time-window strategy
// (TWCS) and commits the result with the pending-outputs protocol, so that
// a compaction cancelled or crashed at any point leaves every object it
// wrote with a cleanup owner.
package compact

import (
	"context"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/stratadb/strata/internal/manifest"
)

// Defaults.
const (
	DefaultTrigger        = 4
	DefaultMaxInputs      = 32
	DefaultMaxOutputBytes = 512 << 20
)

// Options configure picking and jobs.
type Options struct {
	// Window is the time window of TWCS (0: inferred from the files).
	Window time.Duration
	// Trigger is the number of files in a window that makes it compact
	// (default 4).
	Trigger int
	// ActiveTrigger is the trigger of the newest window, the one flushes
	// are still adding to (default 2 × Trigger): compacting it at every
	// fourth flush would rewrite the same rows again and again while the
	// window grows.
	ActiveTrigger int
	// MaxInputs caps the files of one job (default 32).
	MaxInputs int
	// MaxOutputBytes splits outputs (default 512 MiB), estimated from the
	// inputs' bytes per row.
	MaxOutputBytes int64
	// RowGroupRows is the outputs' row group size (default 100k).
	RowGroupRows int64
	// OnStage, if set, is called as the job passes each stage, with the
	// job's context (cancelled when the job is). Tests pause jobs here.
	OnStage func(ctx context.Context, s Stage)
}

func (o *Options) defaults() {
	if o.Trigger <= 0 {
		o.Trigger = DefaultTrigger
	}
	if o.ActiveTrigger <= 0 {
		o.ActiveTrigger = 2 * o.Trigger
	}
	if o.MaxInputs <= 0 {
		o.MaxInputs = DefaultMaxInputs
	}
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = DefaultMaxOutputBytes
	}
}

// windowLadder are the windows Strata infers from.
var windowLadder = []time.Duration{time.Hour, 2 * time.Hour, 12 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour, 365 * 24 * time.Hour}

// InferWindow picks the smallest window of the ladder that holds the
// typical (median) file's time span.
func InferWindow(files []manifest.FileMeta) time.Duration {
	if len(files) == 0 {
		return windowLadder[0]
	}
	spans := make([]int64, len(files))
	for i, f := range files {
		spans[i] = f.MaxTS - f.MinTS
	}
	slices.Sort(spans)
	median := time.Duration(spans[len(spans)/2])
	for _, w := range windowLadder {
		if median <= w {
			return w
		}
	}
	return windowLadder[len(windowLadder)-1]
}

func windowOf(ts int64, w time.Duration) int64 {
	n := int64(w)
	if ts >= 0 {
		return ts / n
	}
	return (ts+1)/n - 1
}

// SortedFiles lists files oldest first (ULIDs sort by creation time).
func SortedFiles(files map[string]manifest.FileMeta) []manifest.FileMeta {
	out := make([]manifest.FileMeta, 0, len(files))
	for _, f := range files {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b manifest.FileMeta) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Pick returns the inputs of the next compaction of a region with the given
// live files, or nil if no window needs one: the newest window holding at
// least Trigger files (ActiveTrigger for the newest window of all; a file
// belongs to the window of its newest row), up to MaxInputs of its oldest
// files.
func Pick(files map[string]manifest.FileMeta, opts Options) []manifest.FileMeta {
	opts.defaults()
	all := SortedFiles(files)
	w := opts.Window
	if w <= 0 {
		w = InferWindow(all)
	}
	windows := map[int64][]manifest.FileMeta{}
	active := int64(math.MinInt64)
	for _, f := range all {
		k := windowOf(f.MaxTS, w)
		windows[k] = append(windows[k], f)
		active = max(active, k)
	}
	var keys []int64
	for k, fs := range windows {
		trigger := opts.Trigger
		if k == active {
			trigger = opts.ActiveTrigger
		}
		if len(fs) >= trigger {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	newest := slices.Max(keys)
	in := windows[newest]
	if len(in) > opts.MaxInputs {
		in = in[:opts.MaxInputs]
	}
	return in
}
