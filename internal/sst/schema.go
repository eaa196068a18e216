package sst

import (
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
)

func leafFor(k row.Kind) parquet.Node {
	switch k {
	case row.Float:
		return parquet.Leaf(parquet.DoubleType)
	case row.Int:
		return parquet.Encoded(parquet.Int(64), &parquet.DeltaBinaryPacked)
	case row.Uint:
		return parquet.Encoded(parquet.Uint(64), &parquet.DeltaBinaryPacked)
	case row.Bool:
		return parquet.Leaf(parquet.BooleanType)
	default:
		return parquet.Encoded(parquet.String(), &parquet.RLEDictionary)
	}
}

// decimalScale is the scale of an INT64 DECIMAL leaf: a float field
// written as decimals.
func decimalScale(col *parquet.Column) (int8, bool) {
	t := col.Type()
	if t.Kind() != parquet.Int64 {
		return 0, false
	}
	lt := t.LogicalType()
	if lt == nil {
		return 0, false
	}
	d, ok := lt.Value.(*format.DecimalType)
	if !ok {
		return 0, false
	}
	return int8(min(max(d.Scale, -1), 127)), true
}

// kindOf maps a Parquet leaf back to a field kind.
func kindOf(col *parquet.Column) (row.Kind, bool) {
	t := col.Type()
	switch t.Kind() {
	case parquet.Double:
		return row.Float, true
	case parquet.Boolean:
		return row.Bool, true
	case parquet.ByteArray:
		return row.String, true
	case parquet.Int64:
		if lt := t.LogicalType(); lt != nil {
			if it, ok := lt.Value.(*format.IntType); ok && !it.IsSigned {
				return row.Uint, true
			}
		}
		return row.Int, true
	}
	return row.Null, false
}

// fieldNode is the Parquet node of a field column: required if it has no
// nulls, optional otherwise. A variable so that tests can write files the
// way other writers might.
var fieldNode = func(k row.Kind, required bool) parquet.Node {
	if required {
		return leafFor(k)
	}
	return parquet.Optional(leafFor(k))
}

// decimalNode is the column of a float field written as decimals at scale:
// its mantissas delta bit-packed, not compressed (zstd finds little more
// in them, and skipping it is what makes these pages fast to read).
func decimalNode(scale int8, required bool) parquet.Node {
	n := parquet.Compressed(parquet.Encoded(parquet.Decimal(int(scale), 18, parquet.Int64Type), &parquet.DeltaBinaryPacked), &parquet.Uncompressed)
	if required {
		return n
	}
	return parquet.Optional(n)
}

// buildSchema is the schema of a file of fields; required[j] makes field
// j's column required, and scales[j] >= 0 a float field's decimal.
func buildSchema(fields []schema.Field, required []bool, scales []int8) *parquet.Schema {
	g := parquet.Group{
		ColSeries:    parquet.Encoded(parquet.Leaf(parquet.ByteArrayType), &parquet.RLEDictionary),
		ColTS:        parquet.Encoded(parquet.Timestamp(parquet.Nanosecond), &parquet.DeltaBinaryPacked),
		ColSeq:       parquet.Encoded(parquet.Uint(64), &parquet.DeltaBinaryPacked),
		ColDeleteEnd: parquet.Optional(parquet.Int(64)),
	}
	for j, f := range fields {
		if scales[j] >= 0 {
			g[f.Name] = decimalNode(scales[j], required[j])
			continue
		}
		g[f.Name] = fieldNode(f.Kind, required[j])
	}
	return parquet.NewSchema("strata", g)
}
