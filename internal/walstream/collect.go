package walstream

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
)

// Shared WAL stream segments hold several regions' entries, so no one
// region's manifest decides their deletion. A region that no longer needs
// a range of a stream first commits it as StreamGarbage (its flush or its
// open does), and only then asks the other regions with entries in each
// segment whether they still need it: release, then check. Of two regions
// releasing the same segment at once, at least the later to check sees
// the other's release, so the segment is deleted once the last region
// needing it lets go, and never before.

// Peers answers, for stream collection, what the other regions need.
type Peers struct {
	// Regions lists the regions with entries in segment n of stream, if
	// known without reading it (the writer's index); nil: read it.
	Regions func(stream string, n uint64) ([]layout.RegionID, bool)
	// State is a region's current manifest state (nil, nil if the region
	// does not exist any more); nil: read from the store.
	State func(ctx context.Context, id layout.RegionID) (*manifest.State, error)
	// Forget, if set, hears of each segment deleted.
	Forget func(stream string, n uint64)
	// Live reports the next segment number of a stream this process
	// writes. The newest segment of a stream not yet sealed is never
	// deleted: a new owner seals a stream above the last segment it lists.
	Live func(stream string) (next uint64, ok bool)
}

// Report is what a collection of stream garbage did.
type Report struct {
	Deleted   int // segments deleted
	Kept      int // segments another region still needs
	Reads     int // segments read to learn their regions
	Collected []manifest.StreamRef
	// Deferred are the tails of ranges reaching the newest segment of a
	// live stream: garbage for a later run.
	Deferred []manifest.StreamRef
}

// Collect deletes the segments of ranges (released by region self)
// that no other region with entries in them needs, and returns the ranges
// it settled. A range is settled when each of its segments is deleted,
// missing, or needed by another region (which deletes it when it lets
// go). Fences are never in a range (a range ends below its stream's
// fence). The caller commits the settled ranges as Collected.
func Collect(ctx context.Context, store objstore.Bucket, self layout.RegionID, ranges []manifest.StreamRef, peers Peers, dry bool) (Report, error) {
	var rep Report
	states := map[layout.RegionID]*manifest.State{}
	state := func(id layout.RegionID) (*manifest.State, error) {
		if st, ok := states[id]; ok {
			return st, nil
		}
		var st *manifest.State
		var err error
		if peers.State != nil {
			st, err = peers.State(ctx, id)
		} else {
			st, err = manifest.ReadState(ctx, store, id)
		}
		if err != nil {
			return nil, err
		}
		states[id] = st
		return st, nil
	}
	var doomed []string // a range's segments to delete
	var nums []uint64   // and their numbers
	for _, g := range ranges {
		settled := true
		doomed, nums = doomed[:0], nums[:0]
		end := g.End
		if peers.Live != nil {
			if next, ok := peers.Live(g.Stream); ok && next > 0 && end > next-1 {
				end = next - 1 // keep the newest segment
				if end <= g.From {
					continue // nothing to do yet
				}
				rep.Deferred = append(rep.Deferred, manifest.StreamRef{Stream: g.Stream, From: end, End: g.End})
			}
		}
		for n := g.From; n < end; n++ {
			regions, known := []layout.RegionID(nil), false
			if peers.Regions != nil {
				regions, known = peers.Regions(g.Stream, n)
			}
			key := layout.StreamKey(g.Stream, n)
			if !known {
				data, err := store.Get(ctx, key)
				rep.Reads++
				if errors.Is(err, objstore.ErrNotFound) {
					continue
				}
				if err != nil {
					return rep, fmt.Errorf("read %s: %w", key, err)
				}
				seg, err := Decode(n, data)
				if err != nil {
					return rep, fmt.Errorf("stream %s: %w", g.Stream, err)
				}
				if seg.Fence {
					continue // kept: its writer may still append there
				}
				for _, b := range seg.Blocks {
					regions = append(regions, b.Region)
				}
			}
			needed := false
			for _, id := range regions {
				if id == self {
					continue
				}
				st, err := state(id)
				if err != nil {
					return rep, fmt.Errorf("segment %s: read region %s: %w", key, id, err)
				}
				if st != nil && st.NeedsStream(g.Stream, n) {
					needed = true
					break
				}
			}
			if needed {
				rep.Kept++
				continue
			}
			if dry {
				rep.Deleted++
				continue
			}
			doomed, nums = append(doomed, key), append(nums, n)
		}
		// The range's segments go in as few requests as the store takes.
		failed, _ := objstore.DeleteMany(ctx, store, doomed)
		for i, key := range doomed {
			if slices.Contains(failed, key) {
				settled = false // deleted by a later run
				continue
			}
			rep.Deleted++
			if peers.Forget != nil {
				peers.Forget(g.Stream, nums[i])
			}
		}
		if settled {
			rep.Collected = append(rep.Collected, g)
		} else if end != g.End {
			rep.Deferred = rep.Deferred[:len(rep.Deferred)-1]
		}
	}
	return rep, nil
}
