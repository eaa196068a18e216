// Package scan holds the types a scan hands out that the query layer, the
// engine and the wire share, so that none of them links another's
// internals: the wire's protobuf conversions need no SST reader (and no
// object store), and the coordinator, which links the wire, no data plane
// (internal/deps holds both).
package scan

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
