package datanode

import (
	"fmt"
	"strings"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/limits"
	"github.com/stratadb/strata/internal/row"
	tenants "github.com/stratadb/strata/internal/tenant"
)

// admit applies the tenant's write limits (Options.Limits,
// docs/limits.md) to a request's batches before any is written, in
// Mimir's order:
//
//   - shape: a series with more label names than max_label_names_per_series,
//     or a label value longer than max_label_value_length, refuses the
//     whole request (400): nothing of it is written;
//   - rate: the request's samples are taken from the tenant's token bucket
//     on this node, all or none; none refuses the whole request (429);
//   - active series: the series already active are admitted, and new ones
//     while the table's and the tenant's counts are under their limits;
//     the points of the new series past a limit are left out (400 once the
//     rest is written: the accepted part is durable).
//
// It returns the batches to write (the same, or with the refused series'
// points left out) and the limit's error: if rate or shape, the batches
// are nil and nothing is to be written. The tenant is the tables' (a
// request names one tenant's tables: the API's handlers qualify them).
func (e *Engine) admit(batches []TableBatch) ([]TableBatch, *limits.Error) {
	in := e.opts.Limits
	if in == nil || len(batches) == 0 {
		return batches, nil
	}
	tenant := tenants.Of(batches[0].Table)
	l := in.Limits(tenant)
	if l == (limits.Limits{}) {
		return batches, nil
	}
	total := 0
	for _, b := range batches {
		total += len(b.Points)
	}
	if l.MaxLabelNamesPerSeries > 0 || l.MaxLabelValueLength > 0 {
		for _, b := range batches {
			if err := checkShape(tenant, l, b.Table, b.Points); err != nil {
				err.Refused, err.Total = total, total
				in.Discarded(tenant, err.Reason, total)
				return nil, err
			}
		}
	}
	if err := in.Rate(tenant, l, total); err != nil {
		le := err.(*limits.Error)
		in.Discarded(tenant, le.Reason, total)
		return nil, le
	}
	if !l.SeriesLimited() {
		return batches, nil
	}
	var first *limits.Error
	refusedAll := 0
	var out []TableBatch
	var enc row.SeriesEncoder
	var buf []byte
	for bi, b := range batches {
		hashes := make([]uint64, len(b.Points))
		var prev []byte
		var prevHash uint64
		for i := range b.Points {
			k := b.Points[i].Series
			if k == nil {
				var err error
				if buf, err = enc.Append(buf[:0], b.Points[i].Tags); err != nil {
					k = nil // a bad tag set: validation refuses it; counted as no series
				} else {
					k = buf
				}
			}
			// The points of a series come together: hashed once.
			if prev != nil && string(k) == string(prev) {
				hashes[i] = prevHash
				continue
			}
			prevHash = in.Hash(k)
			hashes[i] = prevHash
			prev = append(prev[:0], k...)
		}
		refused := make([]bool, len(b.Points))
		err := in.Admit(tenant, b.Table, l, hashes, refused)
		if err == nil {
			if out != nil {
				out = append(out, b)
			}
			continue
		}
		in.Discarded(tenant, err.Reason, err.Refused)
		refusedAll += err.Refused
		if first == nil {
			first = err
		}
		if out == nil {
			out = append(make([]TableBatch, 0, len(batches)), batches[:bi]...)
		}
		kept := make([]row.Point, 0, len(b.Points)-err.Refused)
		for i, p := range b.Points {
			if !refused[i] {
				kept = append(kept, p)
			}
		}
		if len(kept) > 0 {
			out = append(out, TableBatch{Table: b.Table, Points: kept})
		}
	}
	if first == nil {
		return batches, nil
	}
	first.Refused, first.Total = refusedAll, total
	return out, first
}

// checkShape refuses points with a series over the label limits. A
// series' labels are its tags (empty ones are no tags), and for a table
// other than the metrics table (whose tags hold __name__) its name.
func checkShape(tenant string, l limits.Limits, table string, points []row.Point) *limits.Error {
	name := 1
	if catalog.IsMetrics(table) {
		name = 0
	}
	for i := range points {
		p := &points[i]
		if i > 0 && p.Series != nil && string(p.Series) == string(points[i-1].Series) {
			continue // the series just checked
		}
		n := name
		for _, t := range p.Tags {
			if t.Value == "" {
				continue
			}
			n++
			if l.MaxLabelValueLength > 0 && int64(len(t.Value)) > l.MaxLabelValueLength {
				return &limits.Error{Tenant: tenant, Limit: "max_label_value_length", Value: fmt.Sprint(l.MaxLabelValueLength), Reason: limits.ReasonLabelValueTooLong,
					Detail: fmt.Sprintf("table %s: label %s's value is %d bytes (%.40q...)", tenants.Base(table), t.Name, len(t.Value), t.Value)}
			}
		}
		if l.MaxLabelNamesPerSeries > 0 && int64(n) > l.MaxLabelNamesPerSeries {
			return &limits.Error{Tenant: tenant, Limit: "max_label_names_per_series", Value: fmt.Sprint(l.MaxLabelNamesPerSeries), Reason: limits.ReasonMaxLabelNames,
				Detail: fmt.Sprintf("table %s: series %s has %d label names", tenants.Base(table), seriesString(p.Tags), n)}
		}
	}
	return nil
}

// seriesString shows a series' tags, {a="1", b="2"}, cut short.
func seriesString(tags []row.Tag) string {
	var sb strings.Builder
	sb.WriteByte('{')
	for i, t := range tags {
		if i > 0 {
			sb.WriteString(", ")
		}
		if sb.Len() > 200 {
			sb.WriteString("...")
			break
		}
		fmt.Fprintf(&sb, "%s=%q", t.Name, t.Value)
	}
	sb.WriteByte('}')
	return sb.String()
}
