package region

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"weak"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/memtable"
	"github.com/stratadb/strata/internal/row"
)

// Cardinality counts a set of distinct series by their tags: how many
// there are, and how many carry each tag name=value pair. Counts of sets
// apart (two regions', whose series never meet: a series routes to one
// region) add up (Add).
type Cardinality struct {
	Series int64
	Pairs  map[row.Tag]int64
	// MinTS and MaxTS bound the rows of the files and memtables the series
	// were counted from (their metadata: no row is read). MinTS > MaxTS if
	// none was.
	MinTS, MaxTS int64
}

// NewCardinality is an empty count.
func NewCardinality() *Cardinality {
	return &Cardinality{Pairs: map[row.Tag]int64{}, MinTS: math.MaxInt64, MaxTS: math.MinInt64}
}

// Add adds the counts of o, a set of series apart from c's.
func (c *Cardinality) Add(o *Cardinality) {
	c.Series += o.Series
	for t, n := range o.Pairs {
		c.Pairs[t] += n
	}
	c.MinTS, c.MaxTS = min(c.MinTS, o.MinTS), max(c.MaxTS, o.MaxTS)
}

// Counter counts series keys into Cardinality by the value of their
// catalog.TableTag ("" for a key without one: every series but
// LinesTable's); the table tag itself is no pair of the counts. Keys may
// come in any order, and again: each distinct key counts once.
type Counter struct {
	Groups map[string]*Cardinality
	seen   map[string]struct{}
	tags   []row.Tag
}

// NewCounter returns an empty counter. With dedup false, the keys added
// must be distinct (a sorted listing without repeats).
func NewCounter(dedup bool) *Counter {
	c := &Counter{Groups: map[string]*Cardinality{}}
	if dedup {
		c.seen = map[string]struct{}{}
	}
	return c
}

// Add counts series key, which the counter does not keep (it may be
// reused after the call).
func (c *Counter) Add(key string) error {
	if c.seen != nil {
		if _, dup := c.seen[key]; dup {
			return nil
		}
		c.seen[strings.Clone(key)] = struct{}{}
	}
	var err error
	if c.tags, err = row.DecodeSeries(c.tags[:0], key); err != nil {
		return fmt.Errorf("series key %q: %w", key, err)
	}
	table := ""
	if len(c.tags) > 0 && c.tags[0].Name == catalog.TableTag { // it sorts first
		table = c.tags[0].Value
	}
	g := c.Groups[table]
	if g == nil {
		g = NewCardinality()
		c.Groups[strings.Clone(table)] = g
	}
	g.Series++
	for _, t := range c.tags {
		if t.Name == catalog.TableTag {
			continue
		}
		if n, ok := g.Pairs[t]; ok {
			g.Pairs[t] = n + 1
		} else {
			g.Pairs[row.Tag{Name: strings.Clone(t.Name), Value: strings.Clone(t.Value)}] = 1
		}
	}
	return nil
}

// Bound widens every group's time bounds to [minTS, maxTS].
func (c *Counter) Bound(minTS, maxTS int64) {
	for _, g := range c.Groups {
		g.MinTS, g.MaxTS = min(g.MinTS, minTS), max(g.MaxTS, maxTS)
	}
}

// Cardinality counts the distinct series of the memtables and files with
// rows in [start, end) (a series counts if a file or memtable holding it
// overlaps the range, as TagValues counts it) by their tags, grouped by
// their catalog.TableTag's value ("" for series without one). It reads
// the files' series indexes and the memtables' keys, never a row: a series
// in several files, or in a file and a memtable, counts once. The answer
// is kept for the next call while the files and the memtables' series are
// the same, and handed out as kept: read only.
func (r *Region) Cardinality(ctx context.Context, start, end int64) (map[string]*Cardinality, error) {
	if err := r.usable(); err != nil {
		return nil, err
	}
	if start = max(start, r.ttlCutoff()); end <= start {
		return map[string]*Cardinality{}, nil // expired, as a scan's plan finds it
	}
	mems, st, files := r.snapshot(start, end)
	defer r.unpin(files)
	slices.Sort(files)
	key := cardinalityKey{start: start, end: end, files: strings.Join(files, ",")}
	for _, mt := range mems {
		s := mt.Stats()
		k := memKey{mt: weak.Make(mt), series: s.Series}
		if s.Entries > 0 && !(s.MinTS >= start && s.MaxTS < end) {
			// Some of its series may be out of the range, and which
			// changes with every write.
			k.minTS, k.maxTS, k.entries = s.MinTS, s.MaxTS, s.Entries
		}
		key.mems = append(key.mems, k)
	}
	if g, ok := r.cardinality.get(key); ok {
		return g, nil
	}
	keys, err := r.listSeries(ctx, mems, st, files, memtable.Filter{Start: start, End: end})
	if err != nil {
		return nil, err
	}
	c := NewCounter(false)
	for _, k := range keys {
		if err := c.Add(k); err != nil {
			return nil, fmt.Errorf("region %s: cardinality: %w", r.id, err)
		}
	}
	for _, id := range files {
		f := st.Files[id]
		c.Bound(f.MinTS, f.MaxTS)
	}
	for _, mt := range mems {
		if s := mt.Stats(); s.Entries > 0 {
			c.Bound(s.MinTS, s.MaxTS)
		}
	}
	r.cardinality.put(key, c.Groups)
	return c.Groups, nil
}

// cardinalityKey is what a region's counts were counted of: its files,
// and its memtables as they were (a memtable's series are only ever
// added, so its count of series names them).
type cardinalityKey struct {
	start, end int64
	files      string
	mems       []memKey
}

type memKey struct {
	mt                    weak.Pointer[memtable.Memtable] // kept counts keep no flushed memtable
	series                int
	minTS, maxTS, entries int64 // set if the range does not hold all of its rows
}

// keptCardinality keeps a region's last counts (one range: the usual
// question is of all time).
type keptCardinality struct {
	mu     sync.Mutex
	key    cardinalityKey
	groups map[string]*Cardinality
}

func (k *keptCardinality) get(key cardinalityKey) (map[string]*Cardinality, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.groups == nil || k.key.start != key.start || k.key.end != key.end || k.key.files != key.files || !slices.Equal(k.key.mems, key.mems) {
		return nil, false
	}
	return k.groups, true
}

func (k *keptCardinality) put(key cardinalityKey, groups map[string]*Cardinality) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.key, k.groups = key, groups
}
