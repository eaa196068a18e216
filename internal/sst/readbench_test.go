package sst

import (
	"math"
	"slices"
	"testing"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/tsbs"
)

// BenchmarkReadTSBS reads a compaction-shaped file (level 3) of TSBS cpu
// rows, 4,000 hosts × 90 rows (15 minutes), whose fields are `strata bench
// ingest`'s walks as TSBS writes them (integers: ints), the same integers
// as floats (decimals at scale 0: int-floats), two-decimal floats
// (decimals at scale 2) and tsbs.Value's four-decimal noise (decimals at
// scale 4): one field of every host column by column (ReadColumns, a
// PromQL over every host), one host's (a dashboard), and every field of
// every row through the row iterator (a compaction's read).
func BenchmarkReadTSBS(b *testing.B) {
	const hosts, perHost = 4000, 90
	for _, vc := range []struct {
		name  string
		kind  row.Kind
		scale int8
		value func(w []float64, k, f int) row.Value
	}{
		{"ints", row.Int, -1, func(w []float64, _, f int) row.Value { return row.IntValue(tsbs.WalkInt(w[f])) }},
		{"int-floats", row.Float, 0, func(w []float64, _, f int) row.Value { return row.FloatValue(float64(tsbs.WalkInt(w[f]))) }},
		{"2-decimals", row.Float, 2, func(w []float64, _, f int) row.Value { return row.FloatValue(tsbs.WalkValue(w[f])) }},
		{"4-decimals", row.Float, 4, func(_ []float64, k, f int) row.Value { return row.FloatValue(tsbs.Value(k, f)) }},
	} {
		fields := make([]schema.Field, len(tsbs.Fields))
		noNulls, decimals := make([]bool, len(fields)), make([]int8, len(fields))
		for i, n := range tsbs.Fields {
			fields[i] = schema.Field{Name: n, Kind: vc.kind}
			noNulls[i], decimals[i] = true, vc.scale
		}
		walk := tsbs.NewWalk(hosts, 1)
		keys := make([]string, hosts)
		for h := range keys {
			key, err := row.EncodeSeries(nil, tsbs.Tags(h))
			if err != nil {
				b.Fatal(err)
			}
			keys[h] = string(key)
		}
		es := make([]row.Entry, 0, hosts*perHost)
		for k := range hosts * perHost {
			h := k % hosts
			w := walk.Next(h)
			fs := make([]row.Value, len(fields))
			for f := range fs {
				fs[f] = vc.value(w, k, f)
			}
			es = append(es, row.Entry{Series: keys[h], TS: int64(k/hosts) * tsbs.Interval, Seq: uint64(k + 1), Fields: fs})
		}
		slices.SortFunc(es, func(a, b row.Entry) int {
			if row.Less(&a, &b) {
				return -1
			}
			return 1
		})
		data, _ := writeFields(b, fields, es, WriteOptions{NoNulls: noNulls, Decimals: decimals})
		r := openBytes(b, data)
		var runs []Run
		for i := 0; i < len(es); {
			j := i
			for j < len(es) && es[j].Series == es[i].Series {
				j++
			}
			runs = append(runs, Run{Key: es[i].Series, Start: int64(i), End: int64(j)})
			i = j
		}
		b.Run(vc.name, func(b *testing.B) {
			b.Logf("%.3f bytes a sample", float64(len(data))/float64(len(es)*len(fields)))
			read := func(b *testing.B, runs []Run) {
				n := 0
				for b.Loop() {
					n = 0
					if err := r.ReadColumns(runs, tsbs.Fields[0], math.MinInt64, math.MaxInt64, func(c *SeriesColumn) error {
						n += len(c.Bits)
						return nil
					}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "values/s")
			}
			b.Run("columns-all-hosts", func(b *testing.B) { read(b, runs) })
			b.Run("columns-1-host", func(b *testing.B) { read(b, runs[1234:1235]) })
			b.Run("iter-all", func(b *testing.B) {
				n := 0
				for b.Loop() {
					n = 0
					it := r.Iter(Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: tsbs.Fields, ReuseFields: true})
					for it.Next() {
						n++
					}
					if err := it.Err(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			})
		})
	}
}
