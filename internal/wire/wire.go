// Package wire converts between Strata's types and the protobuf messages
// of proto/strata/v1, and answers the errors both planes share (catalog,
// region ids, schema, context) with gRPC statuses (package errclass says
// which). metasrv, the datanode's gRPC server and its router all speak
// through it; it imports no engine.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/errclass"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// Status maps an error to a gRPC status by its class (errclass.Of): the
// sentinels both planes share, context errors and a status from another
// node keep theirs; Internal otherwise.
func Status(err error) error {
	return errclass.Of(err).Status(err)
}

// ToValue converts a message value (nil: null).
func ToValue(v *pb.Value) row.Value {
	switch k := v.GetKind().(type) {
	case *pb.Value_Float:
		return row.FloatValue(k.Float)
	case *pb.Value_Int:
		return row.IntValue(k.Int)
	case *pb.Value_Uint:
		return row.UintValue(k.Uint)
	case *pb.Value_String_:
		return row.StringValue(k.String_)
	case *pb.Value_Bool:
		return row.BoolValue(k.Bool)
	}
	return row.Value{}
}

// FromValue converts a value (null: nil).
func FromValue(v row.Value) *pb.Value {
	switch v.Kind() {
	case row.Float:
		return &pb.Value{Kind: &pb.Value_Float{Float: v.Float()}}
	case row.Int:
		return &pb.Value{Kind: &pb.Value_Int{Int: v.Int()}}
	case row.Uint:
		return &pb.Value{Kind: &pb.Value_Uint{Uint: v.Uint()}}
	case row.String:
		return &pb.Value{Kind: &pb.Value_String_{String_: v.Str()}}
	case row.Bool:
		return &pb.Value{Kind: &pb.Value_Bool{Bool: v.Bool()}}
	}
	return nil
}

// ToTags converts message tags.
func ToTags(tags []*pb.Tag) []row.Tag {
	out := make([]row.Tag, len(tags))
	for i, t := range tags {
		out[i] = row.Tag{Name: t.GetName(), Value: t.GetValue()}
	}
	return out
}

// FromTags converts tags.
// ToTagIns and FromTagIns convert set filters.
func ToTagIns(in []*pb.TagIn) []row.TagIn {
	out := make([]row.TagIn, 0, len(in))
	for _, f := range in {
		out = append(out, row.TagIn{Name: f.GetName(), Values: f.GetValues()})
	}
	return out
}

func FromTagIns(in []row.TagIn) []*pb.TagIn {
	out := make([]*pb.TagIn, 0, len(in))
	for _, f := range in {
		out = append(out, &pb.TagIn{Name: f.Name, Values: f.Values})
	}
	return out
}

func FromTags(tags []row.Tag) []*pb.Tag {
	out := make([]*pb.Tag, len(tags))
	for i, t := range tags {
		out[i] = &pb.Tag{Name: t.Name, Value: t.Value}
	}
	return out
}

// ToPoints converts message points.
func ToPoints(ps []*pb.Point) []row.Point {
	out := make([]row.Point, len(ps))
	for i, p := range ps {
		fs := make([]row.Field, len(p.GetFields()))
		for j, f := range p.GetFields() {
			fs[j] = row.Field{Name: f.GetName(), Value: ToValue(f.GetValue())}
		}
		out[i] = row.Point{Tags: ToTags(p.GetTags()), TS: p.GetTs(), Fields: fs}
	}
	return out
}

// FromPoints converts points.
func FromPoints(ps []row.Point) []*pb.Point {
	out := make([]*pb.Point, len(ps))
	for i, p := range ps {
		fs := make([]*pb.Field, len(p.Fields))
		for j, f := range p.Fields {
			fs[j] = &pb.Field{Name: f.Name, Value: FromValue(f.Value)}
		}
		out[i] = &pb.Point{Tags: FromTags(p.Tags), Ts: p.TS, Fields: fs}
	}
	return out
}

// TableMsg converts a table.
func TableMsg(t catalog.Table) *pb.Table {
	m := &pb.Table{Id: t.ID, Name: t.Name, Regions: t.Regions, TtlSeconds: int64(t.TTL / time.Second), CreatedAtUnix: t.CreatedAt.Unix(),
		CompactionWindowSeconds: int64(t.CompactionWindow / time.Second), Logical: t.Logical, PartitionBy: t.Partition}
	for _, c := range t.Schema.Columns {
		m.Columns = append(m.Columns, &pb.Column{Name: c.Name, Role: c.Role, Type: c.Type})
	}
	return m
}

// FromRollup converts a column scan's rollup (nil: none).
func FromRollup(r *scan.Rollup) *pb.Rollup {
	if r == nil {
		return nil
	}
	return &pb.Rollup{Func: r.Func, Range: r.Range, Start: r.Start, End: r.End, Step: r.Step}
}

// ToRollup converts a message rollup (nil: none). It is not checked
// (rollup.New does that).
func ToRollup(m *pb.Rollup) *scan.Rollup {
	if m == nil {
		return nil
	}
	return &scan.Rollup{Func: m.GetFunc(), Range: m.GetRange(), Start: m.GetStart(), End: m.GetEnd(), Step: m.GetStep()}
}

// FromAggregate converts a column scan's aggregation (nil: none).
func FromAggregate(a *scan.Aggregate) *pb.Aggregate {
	if a == nil {
		return nil
	}
	return &pb.Aggregate{Op: a.Op, By: a.By}
}

// ToAggregate converts a message aggregation (nil: none). It is not
// checked (rollup.NewAggregation does that).
func ToAggregate(m *pb.Aggregate) *scan.Aggregate {
	if m == nil {
		return nil
	}
	return &scan.Aggregate{Op: m.GetOp(), By: m.GetBy()}
}

// FromColumn packs one column of a column scan (pb.SeriesColumn), with
// the samples a rolled one read and an aggregated one's ties; its Kind,
// Rolled and Aggregated are the response's (pb.ScanColumnsResponse).
func FromColumn(c *scan.Column) *pb.SeriesColumn {
	m := &pb.SeriesColumn{Series: []byte(c.Series), Finite: c.Finite, Samples: int64(c.Samples), Ties: c.Ties}
	m.Ts = make([]byte, 0, len(c.TS)*2+binary.MaxVarintLen64)
	var delta int64
	for i, t := range c.TS {
		switch i {
		case 0:
			m.Ts = binary.AppendVarint(m.Ts, t)
		case 1:
			delta = t - c.TS[0]
			m.Ts = binary.AppendUvarint(m.Ts, uint64(delta))
		default:
			d := t - c.TS[i-1]
			m.Ts = binary.AppendVarint(m.Ts, d-delta)
			delta = d
		}
	}
	m.Values = make([]byte, 8*len(c.Bits))
	for i, b := range c.Bits {
		binary.LittleEndian.PutUint64(m.Values[8*i:], b)
	}
	if slices.Contains(c.Null, true) {
		m.Nulls = make([]byte, (len(c.Null)+7)/8)
		for i, null := range c.Null {
			if null {
				m.Nulls[i/8] |= 1 << (i % 8)
			}
		}
	}
	return m
}

// ToColumn unpacks m into c, reusing c's slices; c's Kind, Rolled and
// Aggregated are the response's, left as they are.
func ToColumn(m *pb.SeriesColumn, c *scan.Column) error {
	n := len(m.Values) / 8
	if len(m.Values)%8 != 0 || (len(m.Nulls) != 0 && len(m.Nulls) != (n+7)/8) || m.Samples < 0 {
		return fmt.Errorf("%w: %d bytes of values, %d of nulls, %d samples", errBadColumn, len(m.Values), len(m.Nulls), m.Samples)
	}
	c.Series, c.Finite, c.Samples, c.Ties = string(m.Series), m.Finite, int(m.Samples), m.Ties
	c.TS, c.Bits = slices.Grow(c.TS[:0], n), slices.Grow(c.Bits[:0], n)
	ts := m.Ts
	var delta int64
	for i := range n {
		var v int64
		var k int
		switch i {
		case 0:
			v, k = binary.Varint(ts)
		case 1:
			var d uint64
			d, k = binary.Uvarint(ts)
			delta = int64(d)
			v = c.TS[0] + delta
		default:
			var dd int64
			dd, k = binary.Varint(ts)
			delta += dd
			v = c.TS[i-1] + delta
		}
		if k <= 0 {
			return fmt.Errorf("%w: %d values but fewer timestamps", errBadColumn, n)
		}
		ts = ts[k:]
		c.TS = append(c.TS, v)
		c.Bits = append(c.Bits, binary.LittleEndian.Uint64(m.Values[8*i:]))
	}
	if len(ts) != 0 {
		return fmt.Errorf("%w: more timestamps than %d values", errBadColumn, n)
	}
	c.Null = c.Null[:0]
	if len(m.Nulls) == 0 {
		c.Null = nil
		return nil
	}
	for i := range n {
		c.Null = append(c.Null, m.Nulls[i/8]&(1<<(i%8)) != 0)
	}
	return nil
}

var errBadColumn = errors.New("wire: malformed column")
