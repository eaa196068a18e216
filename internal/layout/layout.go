// Package layout names the objects Strata writes. Under a region's prefix:
//
//	{table_id}/{region_id}/manifest/{version:020}.json        manifest delta (create-if-absent; a void delta settles an ambiguous commit)
//	{table_id}/{region_id}/manifest/{version:020}.checkpoint  manifest checkpoint (create-if-absent)
//	{table_id}/{region_id}/wal/{segment:020}.wal              a segment of the region's own WAL, which earlier versions wrote: now only replayed, sealed with a fence (create-if-absent) and deleted once flushed
//	{table_id}/{region_id}/sst/{file_id}.parquet              SST
//	{table_id}/{region_id}/sst/{file_id}.series               the SST's series index, written beside it under the same marker and deleted with it (FileKeys)
//
// Nothing else is ever written under a region. Beside the table prefixes
// (which are numbers), at the store's root:
//
//	wal/streams/{writer}/{ulid}/{segment:020}.wal    a segment of a WAL stream (create-if-absent; also fence and void segments; StreamKey): a datanode's, writer its node id, carrying its regions' entries, or a region's own, writer region-{table_id}-{region_id}
//	strata-probe/conditional-create-{hex}            the start-up probe of create-if-absent, deleted at once (objstore.CheckConditionalCreate)
//	catalog/{version:020}.json                       a catalog kept in the store by older standalones: read, imported into etcd and deleted at start (catalog.StoreBackend)
//
// A file:// store also stages every write under {root}/.strata-tmp/ before
// it publishes it (internal/objstore); no key names that directory.
package layout

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/stratadb/strata/internal/row"
)

// RegionID identifies a region: a table and the region's number in it.
type RegionID struct {
	Table  uint32
	Region uint32
}

func (r RegionID) String() string { return fmt.Sprintf("%d/%d", r.Table, r.Region) }

// TablePrefix is the key prefix of every object of table id.
func TablePrefix(id uint32) string { return fmt.Sprintf("%d/", id) }

// ErrInvalidRegion: a region id does not parse, or names no region of the
// table or process at hand.
var ErrInvalidRegion = errors.New("invalid region")

// ParseRegionID parses "table_id/region", the form String writes.
func ParseRegionID(s string) (RegionID, error) {
	t, r, ok := strings.Cut(s, "/")
	tn, err1 := strconv.ParseUint(t, 10, 32)
	rn, err2 := strconv.ParseUint(r, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return RegionID{}, fmt.Errorf("%w: %q is not table_id/region", ErrInvalidRegion, s)
	}
	return RegionID{Table: uint32(tn), Region: uint32(rn)}, nil
}

// Prefix is the key prefix of every object of the region.
func (r RegionID) Prefix() string { return r.String() + "/" }

// ManifestPrefix is the key prefix of the region's manifest objects.
func (r RegionID) ManifestPrefix() string { return r.Prefix() + "manifest/" }

// DeltaKey is the key of manifest delta version v.
func (r RegionID) DeltaKey(v uint64) string {
	return fmt.Sprintf("%s%020d.json", r.ManifestPrefix(), v)
}

// CheckpointKey is the key of the manifest checkpoint at version v.
func (r RegionID) CheckpointKey(v uint64) string {
	return fmt.Sprintf("%s%020d.checkpoint", r.ManifestPrefix(), v)
}

// ParseManifestKey parses a key under ManifestPrefix. ok is false for keys
// that are not manifest objects.
func (r RegionID) ParseManifestKey(key string) (version uint64, checkpoint bool, ok bool) {
	name, found := strings.CutPrefix(key, r.ManifestPrefix())
	if !found {
		return 0, false, false
	}
	num, ext, found := strings.Cut(name, ".")
	if !found || len(num) != 20 || (ext != "json" && ext != "checkpoint") {
		return 0, false, false
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, false, false
	}
	return v, ext == "checkpoint", true
}

// WALPrefix is the key prefix of the region's own WAL segments (earlier
// versions wrote them; wal.Recover).
func (r RegionID) WALPrefix() string { return r.Prefix() + "wal/" }

// WALKey is the key of WAL segment n.
func (r RegionID) WALKey(n uint64) string { return fmt.Sprintf("%s%020d.wal", r.WALPrefix(), n) }

// ParseWALKey parses a key under WALPrefix.
func (r RegionID) ParseWALKey(key string) (segment uint64, ok bool) {
	name, found := strings.CutPrefix(key, r.WALPrefix())
	if !found {
		return 0, false
	}
	num, found := strings.CutSuffix(name, ".wal")
	if !found || len(num) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	return n, err == nil
}

// SSTPrefix is the key prefix of the region's SSTs.
func (r RegionID) SSTPrefix() string { return r.Prefix() + "sst/" }

// SSTKey is the key of SST file id.
func (r RegionID) SSTKey(id string) string { return r.SSTPrefix() + id + ".parquet" }

// SeriesKey is the key of SST file id's series index, its companion.
func (r RegionID) SeriesKey(id string) string { return r.SSTPrefix() + id + ".series" }

// FileKeys are the objects of file id: the SST and its series index.
// Whatever deletes a file deletes both (files written before series
// indexes have none; deleting a missing key is harmless).
func (r RegionID) FileKeys(id string) []string { return []string{r.SSTKey(id), r.SeriesKey(id)} }

// ParseSSTKey parses a key under SSTPrefix into a file id.
func (r RegionID) ParseSSTKey(key string) (id string, ok bool) {
	return r.parseFileKey(key, ".parquet")
}

// ParseSeriesKey parses a series index key into its file id.
func (r RegionID) ParseSeriesKey(key string) (id string, ok bool) {
	return r.parseFileKey(key, ".series")
}

// ParseFileKey parses either object key of a file (its SST or its series
// index) into the file id.
func (r RegionID) ParseFileKey(key string) (id string, ok bool) {
	if id, ok = r.ParseSSTKey(key); ok {
		return id, true
	}
	return r.ParseSeriesKey(key)
}

func (r RegionID) parseFileKey(key, suffix string) (id string, ok bool) {
	name, found := strings.CutPrefix(key, r.SSTPrefix())
	if !found {
		return "", false
	}
	id, found = strings.CutSuffix(name, suffix)
	return id, found && id != "" && !strings.Contains(id, "/")
}

// Route maps a series key (row.EncodeSeries) to one of a table's regions:
// FNV-1a of the key modulo the region count. It decides where data lives,
// so it must never change.
func Route(seriesKey []byte, regions uint32) uint32 {
	return uint32(fnv(fnvOffset, seriesKey) % uint64(regions))
}

// FNV-1a's 64-bit offset basis and prime.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnv[T string | []byte](h uint64, b T) uint64 {
	for i := 0; i < len(b); i++ {
		h ^= uint64(b[i])
		h *= fnvPrime
	}
	return h
}

// Router routes the series keys of one table to its regions: by the
// whole key (Route), or, for a table partitioned by a tag, by that tag's
// value alone (RouteValue), so that every series with one value of the
// tag lives in one region and a query that names the value reads only
// that region. Like Route, it decides where data lives.
type Router struct {
	Regions uint32
	// Tag is the table's partition tag; "" routes by the whole key.
	Tag string
}

// Route is the region of seriesKey.
func (r Router) Route(seriesKey []byte) uint32 {
	if r.Tag == "" {
		return Route(seriesKey, r.Regions)
	}
	return RouteValue(row.SeriesTag(unsafe.String(unsafe.SliceData(seriesKey), len(seriesKey)), r.Tag), r.Regions)
}

// RouteEach sets dst[i] to r.Route(keys[i]) for each key, as RouteEach
// does. dst must be as long as keys.
func (r Router) RouteEach(dst []uint32, keys [][]byte) {
	if r.Tag == "" {
		RouteEach(dst, keys, r.Regions)
		return
	}
	for i, k := range keys {
		dst[i] = r.Route(k)
	}
}

// RegionSet is a set of a table's regions, by number; nil is every one.
type RegionSet []bool

// Has reports whether region i is in s.
func (s RegionSet) Has(i int) bool { return s == nil || s[i] }

// Only returns the one region of s, if it holds exactly one.
func (s RegionSet) Only() (int, bool) {
	i := slices.Index(s, true)
	if s == nil || i < 0 || slices.Contains(s[i+1:], true) {
		return 0, false
	}
	return i, true
}

// Of is the set of regions that hold the series matching tags and in
// (equality and set filters, all of which hold, as a scan takes them):
// every region (nil) if r routes by the whole key or no filter names its
// tag, else the regions of the values named. An empty value stands for
// series without the tag, which route as the empty value.
func (r Router) Of(tags []row.Tag, in []row.TagIn) (want RegionSet) {
	if r.Tag == "" || r.Regions <= 1 {
		return nil
	}
	var only RegionSet
	for _, t := range tags {
		if t.Name == r.Tag {
			only = make(RegionSet, r.Regions)
			only[RouteValue(t.Value, r.Regions)] = true
			want = intersect(want, only)
		}
	}
	for _, f := range in {
		if f.Name == r.Tag {
			only = make(RegionSet, r.Regions)
			for _, v := range f.Values {
				only[RouteValue(v, r.Regions)] = true
			}
			want = intersect(want, only)
		}
	}
	return want
}

// intersect is a ∩ b of two region sets, a nil a standing for every
// region; it reuses b.
func intersect(a, b RegionSet) RegionSet {
	if a == nil {
		return b
	}
	for i := range b {
		b[i] = b[i] && a[i]
	}
	return b
}

// RouteValue maps a partition tag's value to one of a table's regions:
// FNV-1a of the value modulo the region count (Router).
func RouteValue(v string, regions uint32) uint32 {
	return uint32(fnv(fnvOffset, v) % uint64(regions))
}

// RouteEach sets dst[i] to Route(keys[i], regions) for each key. FNV-1a
// is one chain of multiplies, a byte each, so a key costs the multiply's
// latency a byte; RouteEach hashes four keys side by side, whose chains
// the multiplier overlaps (BenchmarkRoute, TSBS keys of about 140 bytes:
// 95 ns a key against 167 one at a time). dst must be as long as keys.
func RouteEach(dst []uint32, keys [][]byte, regions uint32) {
	dst = dst[:len(keys)]
	i := 0
	for ; i+4 <= len(keys); i += 4 {
		a, b, c, d := keys[i], keys[i+1], keys[i+2], keys[i+3]
		n := min(len(a), len(b), len(c), len(d))
		ha, hb, hc, hd := uint64(fnvOffset), uint64(fnvOffset), uint64(fnvOffset), uint64(fnvOffset)
		for j, x := range a[:n] {
			ha = (ha ^ uint64(x)) * fnvPrime
			hb = (hb ^ uint64(b[j])) * fnvPrime
			hc = (hc ^ uint64(c[j])) * fnvPrime
			hd = (hd ^ uint64(d[j])) * fnvPrime
		}
		dst[i] = uint32(fnv(ha, a[n:]) % uint64(regions))
		dst[i+1] = uint32(fnv(hb, b[n:]) % uint64(regions))
		dst[i+2] = uint32(fnv(hc, c[n:]) % uint64(regions))
		dst[i+3] = uint32(fnv(hd, d[n:]) % uint64(regions))
	}
	for ; i < len(keys); i++ {
		dst[i] = Route(keys[i], regions)
	}
}

// StreamsPrefix is the key prefix of every WAL stream: a datanode's log
// carrying its regions' entries, or a region's own (docs/format/wal.md).
// It sits beside the table prefixes, which are numbers.
const StreamsPrefix = "wal/streams/"

// StreamPrefix is the key prefix of stream id's segments.
func StreamPrefix(stream string) string { return StreamsPrefix + stream + "/" }

// StreamKey is the key of segment n of a stream.
func StreamKey(stream string, n uint64) string {
	return fmt.Sprintf("%s%020d.wal", StreamPrefix(stream), n)
}

// ParseStreamKey parses a stream segment key into its stream and number.
func ParseStreamKey(key string) (stream string, segment uint64, ok bool) {
	rest, found := strings.CutPrefix(key, StreamsPrefix)
	if !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", 0, false
	}
	num, found := strings.CutSuffix(rest[i+1:], ".wal")
	if !found || len(num) != 20 {
		return "", 0, false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	return rest[:i], n, err == nil
}
