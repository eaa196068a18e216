package gc

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
)

// DefaultMinAge is how old an unowned object must be before full-listing
// GC deletes it.
const DefaultMinAge = 24 * time.Hour

// DefaultPageSize is the page size of full-listing GC's LIST requests.
const DefaultPageSize = 1000

// FullOptions configure a full-listing run.
type FullOptions struct {
	// MinAge is the age an unowned object must reach (default 24 h; a
	// negative value means 0). Correctness does not depend on it (see
	// Inventory); it keeps full GC away from anything a writer with a
	// stale view might still be producing.
	MinAge time.Duration
	// DryRun reports what would be deleted and deletes nothing.
	DryRun bool
	// PageSize is the LIST page size (default 1000).
	PageSize int
	// Concurrency bounds concurrent deletes on a store that takes no
	// batches (default 8).
	Concurrency int
	Metrics     *Metrics
}

// Object is a listed object with its kind, owner and age.
type Object struct {
	Key   string        `json:"key"`
	Kind  Kind          `json:"kind"`
	Owner Owner         `json:"owner,omitempty"`
	Size  int64         `json:"size"`
	Age   time.Duration `json:"age_ns"`
	// Note says, where a check knows, why nothing owns the object.
	Note string `json:"note,omitempty"`
}

// KindSummary sums the orphans of one kind.
type KindSummary struct {
	Count  int           `json:"count"`
	Bytes  int64         `json:"bytes"`
	Oldest time.Duration `json:"oldest_ns"`
	Newest time.Duration `json:"newest_ns"`
}

// FullReport is what a full-listing run found and did.
type FullReport struct {
	Listed int           `json:"listed"`
	Owned  map[Owner]int `json:"owned"`
	// Orphans are every unowned object, whatever its age, by key.
	Orphans []Object `json:"orphans"`
	// Deleted are the orphans old enough to delete: deleted, or with
	// DryRun, the exact set that would be.
	Deleted []Object `json:"deleted"`
	// Young counts orphans kept for being younger than MinAge.
	Young    int   `json:"young"`
	Bytes    int64 `json:"bytes"` // of Deleted
	Lists    int   `json:"lists"`
	Deletes  int   `json:"deletes"`
	Failures int   `json:"failures"` // deletes that failed
}

// ByKind sums the orphans by kind.
func (r FullReport) ByKind() map[Kind]KindSummary {
	out := map[Kind]KindSummary{}
	for _, o := range r.Orphans {
		s := out[o.Kind]
		if s.Count == 0 || o.Age > s.Oldest {
			s.Oldest = o.Age
		}
		if s.Count == 0 || o.Age < s.Newest {
			s.Newest = o.Age
		}
		s.Count++
		s.Bytes += o.Size
		out[o.Kind] = s
	}
	return out
}

// Inventory is a region's listing, classified against its manifest.
type Inventory struct {
	Objects []Object
	State   *manifest.State
	Lists   int // LIST requests issued
}

// Take lists every object under the region's prefix, page by page, and
// only then reads the manifest state with state, classifying each object
// against it.
//
// INVARIANT: the state is read after the listing. An SST is reserved by a
// committed pending marker before its upload starts, and the marker is
// resolved only by an edit that makes the file live or after the file is
// deleted; so every SST the listing saw is owned in any later state, or
// is already garbage. WAL segments are owned by their number, which only
// grows. Hence nothing the listing finds can be wrongly called an orphan.
func Take(ctx context.Context, store objstore.Bucket, id layout.RegionID, pageSize int, now time.Time, state func(context.Context) (*manifest.State, error)) (Inventory, error) {
	if pageSize <= 0 {
		pageSize = DefaultPageSize
	}
	var inv Inventory
	var listed []objstore.Object
	var token []byte
	for {
		p, err := store.List(ctx, id.Prefix(), token, pageSize)
		inv.Lists++
		if err != nil {
			return inv, fmt.Errorf("list %s: %w", id.Prefix(), err)
		}
		listed = append(listed, p.Objects...)
		if len(p.NextToken) == 0 {
			break
		}
		token = p.NextToken
	}
	st, err := state(ctx)
	if err != nil {
		return inv, err
	}
	inv.State = st
	inv.Objects = ClassifyAll(id, st, listed, now)
	return inv, nil
}

// ClassifyAll classifies listed objects of region id against st (read
// after the listing, as Take does).
func ClassifyAll(id layout.RegionID, st *manifest.State, listed []objstore.Object, now time.Time) []Object {
	out := make([]Object, 0, len(listed))
	for _, o := range listed {
		kind, owner := Classify(id, st, o.Key)
		out = append(out, Object{Key: o.Key, Kind: kind, Owner: owner, Size: o.Size, Age: max(0, now.Sub(o.ModTime))})
	}
	return out
}

// Full runs full-listing GC on an open region: it lists the region, and
// deletes the objects no manifest entry owns that are older than MinAge.
// Its report says what it found by kind and age. In a healthy system it
// finds nothing; it is the backstop for bugs and foreign writers.
func Full(ctx context.Context, r Region, opts FullOptions) (rep FullReport, err error) {
	began := time.Now()
	m := metricsOr(opts.Metrics)
	defer func() { finish(m, "full", began, opts.DryRun, err) }()
	if opts.MinAge == 0 {
		opts.MinAge = DefaultMinAge
	}
	opts.MinAge = max(0, opts.MinAge)
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	inv, err := Take(ctx, r.Store(), r.ID(), opts.PageSize, r.Now()(), func(ctx context.Context) (*manifest.State, error) {
		// A settled state (see Fast).
		if err := r.Settle(ctx); err != nil {
			return nil, fmt.Errorf("the manifest has an unsettled commit; nothing deleted: %w", err)
		}
		return r.Manifest(), nil
	})
	rep.Lists = inv.Lists
	m.Requests.WithLabelValues("full", string(objstore.OpList)).Add(float64(inv.Lists))
	if err != nil {
		return rep, fmt.Errorf("full gc %s: %w", r.ID(), err)
	}
	rep.Listed = len(inv.Objects)
	rep.Owned = map[Owner]int{}
	for _, o := range inv.Objects {
		if o.Owner != OwnerNone {
			rep.Owned[o.Owner]++
			continue
		}
		rep.Orphans = append(rep.Orphans, o)
		if o.Age < opts.MinAge {
			rep.Young++
			continue
		}
		rep.Deleted = append(rep.Deleted, o)
		rep.Bytes += o.Size
	}
	m.OrphansFound.Add(float64(len(rep.Orphans)))
	if len(rep.Deleted) > 0 && !opts.DryRun {
		// INVARIANT: deletes only after proving, after the listing, that
		// this instance still owned the region: then no newer owner had
		// written anything the listing saw, and nothing it writes later
		// can own a listed object (see Take).
		if err := r.Verify(ctx); err != nil {
			return rep, fmt.Errorf("full gc %s: not the region's owner; nothing deleted: %w", r.ID(), err)
		}
	}
	slices.SortFunc(rep.Orphans, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
	slices.SortFunc(rep.Deleted, func(a, b Object) int { return strings.Compare(a.Key, b.Key) })
	if opts.DryRun || len(rep.Deleted) == 0 {
		return rep, nil
	}
	keys := make([]string, len(rep.Deleted))
	for i, o := range rep.Deleted {
		keys[i] = o.Key
	}
	rep.Deletes = len(keys)
	m.Requests.WithLabelValues("full", string(objstore.OpDelete)).Add(float64(len(keys)))
	failed, err := deleteAll(ctx, r.Store(), keys, opts.Concurrency)
	rep.Failures = len(failed)
	for _, o := range rep.Deleted {
		if !failed[o.Key] {
			m.ObjectsDeleted.WithLabelValues("full", string(o.Kind)).Inc()
			m.BytesDeleted.WithLabelValues("full", string(o.Kind)).Add(float64(o.Size))
		}
	}
	if err != nil {
		m.DeleteErrors.WithLabelValues("full").Add(float64(len(failed)))
		return rep, fmt.Errorf("full gc %s: %w", r.ID(), err)
	}
	return rep, nil
}

func finish(m *Metrics, mode string, began time.Time, dry bool, err error) {
	result := "ok"
	switch {
	case err != nil:
		result = "error"
	case dry:
		result = "dry_run"
	}
	m.Runs.WithLabelValues(mode, result).Inc()
	m.Duration.WithLabelValues(mode).Observe(time.Since(began).Seconds())
}
