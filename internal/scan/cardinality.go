package scan

import (
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/row"
)

// Series counts for cardinality statistics (/api/v1/status/tsdb): a
// region counts its series into them (region.Region.Cardinality), the
// engine adds up regions', and the query layer reads them.

// Cardinality counts a set of distinct series by their tags: how many
// there are, and how many carry each tag name=value pair. Counts of sets
// apart (two regions', whose series never meet: a series routes to one
// region) add up (Add).
type Cardinality struct {
	Series int64
	// Pairs are the counts of the pairs, with more's added: read them by
	// Each.
	Pairs map[row.Tag]int64
	// more are counts to add to Pairs': a kept count's later series, so a
	// million pairs are not copied for each (countAdded).
	more map[row.Tag]int64
	// MinTS and MaxTS bound the rows of the files and memtables the series
	// were counted from (their metadata: no row is read). MinTS > MaxTS if
	// none was.
	MinTS, MaxTS int64
}

// NewCardinality is an empty count.
func NewCardinality() *Cardinality {
	return &Cardinality{Pairs: map[row.Tag]int64{}, MinTS: math.MaxInt64, MaxTS: math.MinInt64}
}

// Each calls f with each pair and the series that carry it.
func (c *Cardinality) Each(f func(t row.Tag, n int64)) {
	for t, n := range c.Pairs {
		if len(c.more) > 0 {
			n += c.more[t]
		}
		f(t, n)
	}
	for t, n := range c.more {
		if _, ok := c.Pairs[t]; !ok {
			f(t, n)
		}
	}
}

// Split returns the counts of the pairs as kept: base's, and more's to
// add to them (Each adds them up). Both read only.
func (c *Cardinality) Split() (base, more map[row.Tag]int64) { return c.Pairs, c.more }

// Add adds the counts of o, a set of series apart from c's.
func (c *Cardinality) Add(o *Cardinality) {
	c.Series += o.Series
	o.Each(func(t row.Tag, n int64) { c.Pairs[t] += n })
	c.MinTS, c.MaxTS = min(c.MinTS, o.MinTS), max(c.MaxTS, o.MaxTS)
}

// Grown returns a copy of c to count more series into (their pairs into
// more): c's Pairs shared, read only, its more copied; or, once more is
// large, one map of both.
func (c *Cardinality) Grown() *Cardinality {
	n := &Cardinality{Series: c.Series, Pairs: c.Pairs, MinTS: c.MinTS, MaxTS: c.MaxTS, more: make(map[row.Tag]int64, len(c.more)+8)}
	if len(c.more) > len(c.Pairs)/16+1024 {
		n.Pairs = make(map[row.Tag]int64, len(c.Pairs)+len(c.more))
		c.Each(func(t row.Tag, k int64) { n.Pairs[t] = k })
		return n
	}
	for t, k := range c.more {
		n.more[t] = k
	}
	return n
}

// Counter counts series keys into Cardinality by the value of their
// catalog.TableTag ("" for a key without one: every series but
// LinesTable's); the table tag itself is no pair of the counts. Keys may
// come in any order, and again: each distinct key counts once.
type Counter struct {
	Groups map[string]*Cardinality
	seen   map[string]struct{}
	tags   []row.Tag
	names  map[string]string // labelName's, without its lock
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

// Add counts series key. The counts may keep parts of it (a map's
// assignment stores the key it is given, a pair's value then pointing
// into key): key must not change after the call, as no Go string does;
// a view of a buffer that is reused must be copied first.
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
	pairs := g.Pairs
	if g.more != nil {
		pairs = g.more // Pairs is shared (Grown)
	}
	for _, t := range c.tags {
		if t.Name == catalog.TableTag {
			continue
		}
		// The name interned even for a pair counted before: a map's
		// assignment stores the key it is given.
		name, ok := c.names[t.Name]
		if !ok {
			if c.names == nil {
				c.names = map[string]string{}
			}
			name = labelName(t.Name)
			c.names[name] = name
		}
		t.Name = name
		if n, ok := pairs[t]; ok {
			pairs[t] = n + 1
		} else {
			pairs[row.Tag{Name: name, Value: strings.Clone(t.Value)}] = 1
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

// Label names are interned: a table has a few dozen, and a million pairs
// that carry one name then share its bytes. A walk of the pairs (the
// query layer's ranking, by label name) then compares names by pointer
// instead of reading each pair's own copy from memory: that read, a cache
// miss a pair, was most of a request over a million pairs of one label.
var names struct {
	sync.RWMutex
	m map[string]string
}

// maxInterned bounds the names interned: past it (a client making up
// label names), a name is a copy of its own.
const maxInterned = 1 << 16

// labelName is name, interned while there is room.
func labelName(name string) string {
	names.RLock()
	s, ok := names.m[name]
	names.RUnlock()
	if ok {
		return s
	}
	names.Lock()
	defer names.Unlock()
	if s, ok := names.m[name]; ok {
		return s
	}
	s = strings.Clone(name)
	if names.m == nil {
		names.m = map[string]string{}
	}
	if len(names.m) < maxInterned {
		names.m[s] = s
	}
	return s
}
