// Package scan holds what a scan is, shared by the query layer, the engine
// and the wire, so that none of them links another's internals: the
// request (Request), what a column scan hands out (Column, SeriesColumn),
// the rule by which newer rows hide older ones (Latest, MergeNewer) and
// the errors a scan fails with (ErrInvalid, ErrInterrupted), which
// internal/errclass classifies. The wire's protobuf conversions need no
// SST reader (and no object store), the coordinator, which links the wire,
// no data plane, and the PromQL layer no region or SST code (internal/deps
// holds all three). It imports nothing of Strata's but rows.
package scan

import (
	"errors"

	"github.com/stratadb/strata/internal/row"
)

// Request selects rows.
type Request struct {
	// Start <= ts < End. Use region.AllTime for everything.
	Start, End int64
	// Tags are equality filters, all of which must hold. An empty value
	// matches series without that tag.
	Tags []row.Tag
	// In are set filters, all of which must hold: the series' tag Name is
	// one of Values ("" matches series without the tag).
	In []row.TagIn
	// Fields to return, by name (nil: every field). Unknown names are an
	// error.
	Fields []string
	// BatchRows is the most rows per batch (default 4096).
	BatchRows int
	// SeriesOnly lists the series instead: one entry per series (Series
	// set, nothing else) of a file or memtable whose time range overlaps
	// the scan's, read from the files' series indexes, never from an SST
	// (but those written before series indexes existed). Fields are
	// ignored.
	SeriesOnly bool
	// Rollup, if set, asks a column scan for a range function of each
	// series instead of its samples (internal/rollup): one Column per
	// series, Rolled. Nil: the samples.
	Rollup *Rollup
	// Aggregate, with Rollup, asks for the rolled series aggregated by
	// group at each window instead (internal/rollup): one Column per
	// group, Aggregated. Nil: the series.
	Aggregate *Aggregate
}

// Rollup is a range function of each series over windows that are apart:
// Func (avg_over_time, sum_over_time, min_over_time, max_over_time or
// last_over_time) over (t - Range, t] for t = Start + Range - 1, then
// every Step up to End (once if Step is 0), in milliseconds, as
// Prometheus' storage.SelectHints give them. internal/rollup says which
// are valid and computes them.
type Rollup struct {
	Func                    string
	Range, Start, End, Step int64
}

// Aggregate is an aggregation of rolled series at each window, as PromQL's
// Op by (By) computes it: Op is min, max, count or group (those whose
// partials merge exactly), By the grouping tags (a series' group is its
// tags of those names). internal/rollup says which are valid and computes
// them.
type Aggregate struct {
	Op string
	By []string
}

// SeriesColumn is one series' values of one numeric field, in ts order:
// TS[i] and Bits[i] (the value's payload, row.NumberValue(kind, Bits[i]))
// of row i, which has no value if Null is set and Null[i] is true. Who
// hands one out says how long its slices stay valid (an SST reader's,
// until the callback it was passed to returns).
type SeriesColumn struct {
	Series string
	TS     []int64
	Bits   []uint64
	Null   []bool // nil: every row has a value
	// Finite: every value is a finite float (a column of decimals), so
	// none is NaN, a stale marker among them.
	Finite bool
}

// Column is one series' values of one field from one input of a column
// scan, in ts order (strictly increasing): the payloads of values of Kind
// (row.NumberValue(Kind, Bits[i])), Null[i] set for rows without one. Its
// slices are valid only while the callback it was passed to runs.
type Column struct {
	Kind row.Kind
	SeriesColumn
	// Rolled: the column is the series' rollup (Request.Rollup), not its
	// samples: Float values, one per window that holds a sample, at the
	// window's end (t, in nanoseconds), all of the series' windows in
	// one or more Columns in order and nothing else of the series.
	// Samples is how many samples the rollup read (a query's sample
	// limit counts them).
	Rolled  bool
	Samples int
	// Aggregated: the column is a group's partial aggregation
	// (Request.Aggregate) over series of one region, Rolled as well:
	// Series is the group's key (the series' tags named in By), one value
	// per window where a series of the group has one (for count, how
	// many do), Samples what their rollups read. Ties: at some window the
	// value depends on the order in which the series are taken (a min or
	// max of zeros of both signs, or of NaNs of different payloads only).
	Aggregated, Ties bool
}

// The merge rule. Of the rows of one (series, ts), the one written last
// stands, and hides the others whatever it holds: a row without a value
// of a field hides an older value of it. Every place that resolves
// versions applies it through Latest: the k-way merge of rows
// (internal/merge), a merged or memtable stream cut into columns
// (region.ColumnsOf), and the query layer's merge of a series' columns
// that came out of time order (MergeNewer).

// Latest applies the merge rule to one series' rows that come in ts
// order, the versions of one ts newest first (row.Less's order, a merge's
// and a memtable's): the first row at a ts stands, the rest are older
// versions. Reset it at each series. The zero Latest is ready.
type Latest struct {
	ts   int64
	seen bool // a row of the series was taken, at ts
}

// Reset starts a series.
func (l *Latest) Reset() { l.seen = false }

// Stands reports whether the row at ts, the next of the series, stands:
// it is the first at ts, the newest version.
func (l *Latest) Stands(ts int64) bool {
	if l.seen && l.ts == ts {
		return false
	}
	l.ts, l.seen = ts, true
	return true
}

// MergeNewer merges two runs of one series' rows, each in strictly
// increasing ts order: old, and newer, all written after old's. By the
// merge rule, at a ts both hold, newer's row stands. take is called with
// each row that stands, in ts order: its index in newer if fromNewer, in
// old if not.
func MergeNewer(old, newer []int64, take func(i int, fromNewer bool)) {
	var l Latest
	i, j := 0, 0
	for i < len(old) || j < len(newer) {
		// At an equal ts newer's comes first: the newest version.
		if j < len(newer) && (i == len(old) || newer[j] <= old[i]) {
			if l.Stands(newer[j]) {
				take(j, true)
			}
			j++
			continue
		}
		if l.Stands(old[i]) {
			take(i, false)
		}
		i++
	}
}

// ErrInvalid: a scan request is malformed (an empty range, an unknown or
// non-numeric field, a column scan of other than one field).
var ErrInvalid = errors.New("scan: invalid request")

// ErrInterrupted: a region's owner moved or stopped answering after part
// of its scan had been delivered (a retry elsewhere would deliver those
// rows twice). The scan as a whole may be retried.
var ErrInterrupted = errors.New("scan: region moved or its owner stopped answering in the middle of a scan")
