// Package fsck checks the ownership invariant of a store offline: every
// object belongs to a catalog, a manifest (live, removed or pending SSTs,
// manifest objects) or a WAL (by segment number), and every live SST exists.
// It reads and lists, and never writes.
package fsck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/catalog/storecat"
	"github.com/stratadb/strata/internal/gc"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/tenant"
	"github.com/stratadb/strata/internal/walstream"
)

// Options configure a check.
type Options struct {
	// Table limits the check to one table, by name (resolved through the
	// store's catalog) or by numeric id.
	Table string
	// Tenant is the tenant whose table Table names (default: the default
	// tenant; docs/tenants.md).
	Tenant string
	// Tables, if set, is the catalog's tables (a cluster's, from etcd);
	// else the catalog the store keeps is read.
	Tables []catalog.Table
	// PageSize is the LIST page size (default 1000).
	PageSize int
	// Now is the clock ages are measured with (default time.Now).
	Now func() time.Time
}

// Pending is a pending-outputs marker.
type Pending struct {
	Job   string        `json:"job"`
	Files int           `json:"files"`
	Epoch uint64        `json:"epoch"`
	Age   time.Duration `json:"age_ns"`
}

// Region is the check of one region.
type Region struct {
	ID    string `json:"region"`
	Table string `json:"table,omitempty"` // name, when the catalog knows it
	// Tenant is the table's tenant, when the catalog knows it.
	Tenant string `json:"tenant,omitempty"`
	Listed int    `json:"listed"`
	// Version is the manifest version read; 0 if it could not be read.
	Version uint64 `json:"manifest_version"`
	// ManifestError is why the manifest could not be read (a gap, a
	// corrupt object, or no manifest at all).
	ManifestError string `json:"manifest_error,omitempty"`
	LiveFiles     int    `json:"live_files"`
	LiveBytes     int64  `json:"live_bytes"`
	// Missing are live files with an object that does not exist: the SST
	// (data loss) or its series index (the region's label queries fail).
	Missing []string `json:"missing,omitempty"`
	// Orphans are objects nothing owns.
	Orphans []gc.Object `json:"orphans,omitempty"`
	Pending []Pending   `json:"pending,omitempty"`
	// Removed files and flushed WAL segments that fast GC has yet to
	// delete (present in the store).
	RemovedAwaitingGC int   `json:"removed_awaiting_gc"`
	RemovedBytes      int64 `json:"removed_bytes"`
	WALAwaitingGC     int   `json:"wal_awaiting_gc"`
	WALLive           int   `json:"wal_live"`
}

// Report is a whole check.
type Report struct {
	Regions []Region `json:"regions"`
	// Orphans outside any region: unknown top-level keys, and the objects
	// of tables the catalog does not have.
	Orphans []gc.Object `json:"orphans,omitempty"`
	// Streams sums up the shared WAL stream segments (whole-store checks
	// only); an unowned one is among Orphans.
	Streams Streams `json:"streams"`
	Listed  int     `json:"listed"`
	Lists   int     `json:"lists"`
	// Tenants sums the regions up by their tables' tenant (the regions
	// of tables the catalog does not know are no tenant's).
	Tenants map[string]*TenantCounts `json:"tenants,omitempty"`
}

// TenantCounts are one tenant's regions' counts.
type TenantCounts struct {
	Regions   int   `json:"regions"`
	Listed    int   `json:"listed"`
	LiveFiles int   `json:"live_files"`
	LiveBytes int64 `json:"live_bytes"`
	// Missing counts missing live files and unreadable manifests.
	Missing int `json:"missing"`
	Orphans int `json:"orphans"`
}

// Streams counts shared WAL stream segments by owner.
type Streams struct {
	Listed int `json:"listed"`
	// Live segments may hold entries some region has not flushed.
	Live int `json:"live"`
	// AwaitingGC are released by a region, for its fast GC to delete.
	AwaitingGC int `json:"awaiting_gc"`
	// Fences end a sealed stream; kept while a region records them.
	Fences int `json:"fences"`
}

// Missing counts live files missing from the store plus regions whose
// manifest is unreadable: both lose data.
func (r *Report) Missing() int {
	n := 0
	for _, g := range r.Regions {
		n += len(g.Missing)
		if g.ManifestError != "" {
			n++
		}
	}
	return n
}

// OrphanCount counts unowned objects.
func (r *Report) OrphanCount() int {
	n := len(r.Orphans)
	for _, g := range r.Regions {
		n += len(g.Orphans)
	}
	return n
}

// ErrNoTable: Options.Table names no table of the catalog.
var ErrNoTable = errors.New("fsck: no such table")

// Check checks store.
func Check(ctx context.Context, store objstore.Bucket, opts Options) (*Report, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.PageSize <= 0 {
		opts.PageSize = gc.DefaultPageSize
	}
	tables := opts.Tables
	if tables == nil {
		var err error
		if tables, err = storecat.Read(ctx, store); err != nil {
			return nil, fmt.Errorf("fsck: %w", err)
		}
	}
	byID := map[uint32]catalog.Table{}
	for _, t := range tables {
		byID[t.ID] = t
	}
	prefix := ""
	var only *uint32
	if opts.Table != "" {
		id, ok := resolveTable(tables, tenant.Qualify(opts.Tenant, opts.Table))
		if n, err := strconv.ParseUint(opts.Table, 10, 32); !ok && err == nil {
			id, ok = uint32(n), true // an id (only: a name is the tenant's)
		}
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrNoTable, opts.Table)
		}
		only = &id
		prefix = layout.TablePrefix(id)
	}
	rep := &Report{}
	// One listing finds every object; only then are the manifests read
	// (the order full GC relies on too, see gc.Take).
	var token []byte
	regions := map[layout.RegionID][]objstore.Object{}
	var streams []objstore.Object
	now := opts.Now()
	for {
		p, err := store.List(ctx, prefix, token, opts.PageSize)
		rep.Lists++
		if err != nil {
			return nil, fmt.Errorf("fsck: list: %w", err)
		}
		for _, o := range p.Objects {
			if only == nil && strings.HasPrefix(o.Key, storecat.Prefix) {
				continue // the catalog owns it
			}
			if _, _, ok := layout.ParseStreamKey(o.Key); ok && only == nil {
				streams = append(streams, o) // owned by the regions' manifests: classified below
				continue
			}
			id, ok := parseRegion(o.Key)
			if ok {
				if _, known := byID[id.Table]; known || len(tables) == 0 {
					regions[id] = append(regions[id], o)
					continue
				}
			}
			// A top-level key Strata never writes, or an object of a
			// table the catalog does not have. (A drop deletes a
			// table's objects before it forgets the table, so neither
			// comes from a crash: a foreign writer or a bug.)
			rep.Orphans = append(rep.Orphans, gc.Object{Key: o.Key, Kind: gc.KindOther, Size: o.Size, Age: max(0, now.Sub(o.ModTime))})
		}
		if len(p.NextToken) == 0 {
			break
		}
		token = p.NextToken
	}
	// Regions of the catalog with no object at all have lost their
	// manifest.
	for _, t := range tables {
		if only != nil && t.ID != *only {
			continue
		}
		for i := range t.Regions {
			id := layout.RegionID{Table: t.ID, Region: i}
			if _, ok := regions[id]; !ok {
				regions[id] = nil // known even with no object at all
			}
		}
	}
	ids := make([]layout.RegionID, 0, len(regions))
	for id := range regions {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b layout.RegionID) int {
		if a.Table != b.Table {
			return int(a.Table) - int(b.Table)
		}
		return int(a.Region) - int(b.Region)
	})
	states := make([]*manifest.State, 0, len(ids))
	for _, id := range ids {
		g, st := checkRegion(ctx, store, id, regions[id], now)
		states = append(states, st)
		if t, ok := byID[id.Table]; ok {
			g.Tenant, g.Table = tenant.Split(t.Name)
			if rep.Tenants == nil {
				rep.Tenants = map[string]*TenantCounts{}
			}
			c := rep.Tenants[g.Tenant]
			if c == nil {
				c = &TenantCounts{}
				rep.Tenants[g.Tenant] = c
			}
			c.Regions++
			c.Listed += g.Listed
			c.LiveFiles += g.LiveFiles
			c.LiveBytes += g.LiveBytes
			c.Missing += len(g.Missing)
			if g.ManifestError != "" {
				c.Missing++
			}
			c.Orphans += len(g.Orphans)
		}
		rep.Listed += g.Listed
		rep.Regions = append(rep.Regions, g)
	}
	if err := checkStreams(ctx, store, rep, streams, ids, states, now); err != nil {
		return nil, err
	}
	rep.Listed += len(rep.Orphans)
	return rep, nil
}

// checkStreams classifies shared WAL stream segments against every
// region's manifest: a segment is owned while a region's references cover
// it (its entries may be unflushed), while a region's released ranges
// cover it (that region's fast GC deletes it), or as a recorded fence.
// The listing came before the manifests were read, so a segment none
// covers may have been collected meanwhile: it is an orphan only if it
// still exists.
func checkStreams(ctx context.Context, store objstore.Bucket, rep *Report, listed []objstore.Object, ids []layout.RegionID, states []*manifest.State, now time.Time) error {
	for _, o := range listed {
		rep.Streams.Listed++
		stream, n, _ := layout.ParseStreamKey(o.Key)
		var live, released, fence bool
		for _, st := range states {
			live = live || st.NeedsStream(stream, n)
			for _, g := range st.StreamGarbage {
				released = released || g.Needs(stream, n)
			}
			for _, f := range st.StreamFences {
				fence = fence || (f.Stream == stream && f.End == n)
			}
		}
		switch {
		case live:
			rep.Streams.Live++
		case released:
			rep.Streams.AwaitingGC++
		case fence:
			rep.Streams.Fences++
		default:
			data, err := store.Get(ctx, o.Key)
			if errors.Is(err, objstore.ErrNotFound) {
				rep.Streams.Listed--
				continue
			} else if err != nil {
				return fmt.Errorf("fsck: %s: %w", o.Key, err)
			}
			// A dropped table's fences wait for the drop's final sweep
			// (metasrv), an upload window after the drop.
			seg, err := walstream.Decode(n, data) // the envelope: what explainStream says
			if err == nil && seg.Fence && now.Sub(o.ModTime) < manifest.UploadWindow+2*manifest.MaxClockSkew {
				rep.Streams.Fences++
				continue
			}
			rep.Orphans = append(rep.Orphans, gc.Object{Key: o.Key, Kind: gc.KindStream, Size: o.Size, Age: max(0, now.Sub(o.ModTime)),
				Note: explainStream(seg, err, stream, ids, states)})
		}
	}
	rep.Listed += rep.Streams.Listed
	return nil
}

// explainStream describes an unowned stream segment: what it holds, and
// every reference to its stream that the manifests do have.
func explainStream(seg *walstream.Segment, decodeErr error, stream string, ids []layout.RegionID, states []*manifest.State) string {
	var b strings.Builder
	switch {
	case decodeErr != nil:
		fmt.Fprintf(&b, "undecodable (%v)", decodeErr)
	case seg.Fence:
		b.WriteString("fence")
	case len(seg.Blocks) == 0:
		b.WriteString("empty (a claimed ambiguous create)")
	default:
		b.WriteString("blocks of")
		for _, blk := range seg.Blocks {
			fmt.Fprintf(&b, " %s", blk.Region)
		}
	}
	refs := 0
	for i, st := range states {
		if st == nil {
			continue
		}
		name := func(what string, list []manifest.StreamRef) {
			for _, r := range list {
				if r.Stream == stream {
					fmt.Fprintf(&b, "; %s %s [%d,%d)", ids[i], what, r.From, r.End)
					refs++
				}
			}
		}
		name("streams", st.Streams)
		name("garbage", st.StreamGarbage)
		name("fence", st.StreamFences)
	}
	if refs == 0 {
		b.WriteString("; no manifest names the stream")
	}
	return b.String()
}

func resolveTable(tables []catalog.Table, s string) (uint32, bool) {
	for _, t := range tables {
		if t.Name == s {
			return t.ID, true
		}
	}
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(n), true
	}
	return 0, false
}

// parseRegion parses the region of a key "{table}/{region}/...".
func parseRegion(key string) (layout.RegionID, bool) {
	parts := strings.SplitN(key, "/", 3)
	if len(parts) < 3 {
		return layout.RegionID{}, false
	}
	t, err1 := strconv.ParseUint(parts[0], 10, 32)
	r, err2 := strconv.ParseUint(parts[1], 10, 32)
	if err1 != nil || err2 != nil {
		return layout.RegionID{}, false
	}
	return layout.RegionID{Table: uint32(t), Region: uint32(r)}, true
}

func checkRegion(ctx context.Context, store objstore.Bucket, id layout.RegionID, listed []objstore.Object, now time.Time) (Region, *manifest.State) {
	g := Region{ID: id.String()}
	st, manErr := readState(ctx, store, id)
	objects := gc.ClassifyAll(id, st, listed, now)
	g.Listed = len(objects)
	if manErr != nil {
		g.ManifestError = manErr.Error()
		if errors.Is(manErr, manifest.ErrRegionNotFound) {
			g.ManifestError = "the region has no manifest"
		}
	}
	g.Version = st.Version
	have := map[string]bool{}
	for _, o := range objects {
		have[o.Key] = true
		switch o.Owner {
		case gc.OwnerNone:
			if manErr == nil || (o.Kind != gc.KindSST && o.Kind != gc.KindSeries) {
				g.Orphans = append(g.Orphans, o)
			}
		case gc.OwnerRemoved:
			g.RemovedAwaitingGC++
			g.RemovedBytes += o.Size
		case gc.OwnerFlushed:
			g.WALAwaitingGC++
		case gc.OwnerWAL:
			g.WALLive++
		}
	}
	for fid, f := range st.Files {
		g.LiveFiles++
		g.LiveBytes += f.Size
		if !have[id.SSTKey(fid)] || (f.Series && !have[id.SeriesKey(fid)]) {
			g.Missing = append(g.Missing, fid)
		}
	}
	slices.Sort(g.Missing)
	for job, p := range st.Pending {
		g.Pending = append(g.Pending, Pending{Job: job, Files: len(p.FileIDs), Epoch: p.Epoch, Age: max(0, now.Sub(p.CreatedAt))})
	}
	slices.SortFunc(g.Pending, func(a, b Pending) int { return strings.Compare(a.Job, b.Job) })
	return g, st
}

// readState reads a region's manifest read-only. If it cannot be read, it
// returns an empty state (every SST is then unowned, which is what an
// unreadable manifest means) and the reason.
func readState(ctx context.Context, store objstore.Bucket, id layout.RegionID) (*manifest.State, error) {
	m, err := manifest.Open(ctx, store, id, manifest.Options{ReadOnly: true})
	if err != nil {
		return &manifest.State{Files: map[string]manifest.FileMeta{}, Removed: map[string]manifest.RemovedFile{}, Pending: map[string]manifest.PendingOutputs{}}, err
	}
	defer m.Close()
	return m.State(), nil
}
