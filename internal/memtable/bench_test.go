package memtable

import (
	"fmt"
	"testing"

	"github.com/stratadb/strata/internal/row"
)

// BenchmarkInsertDecimals inserts TSBS-shaped puts (4,000 series, 10
// float fields of one or two decimals) in batches of 10,000 and then asks
// for the fields' decimal scales, as a flush does: what a memtable costs a
// write and its flush. Reports ns per row.
func BenchmarkInsertDecimals(b *testing.B) {
	const hosts, rows = 4000, 200_000
	keys := make([]string, hosts)
	for h := range keys {
		keys[h] = fmt.Sprintf("cpu,hostname=host_%d", h)
	}
	batches := make([][]row.Entry, 0, rows/10_000)
	for k := 0; k < rows; k += 10_000 {
		batch := make([]row.Entry, 10_000)
		for i := range batch {
			n := k + i
			fs := make([]row.Value, 10)
			for f := range fs {
				fs[f] = row.FloatValue(float64((n*7+f*13)%10000) / 100)
			}
			batch[i] = row.Entry{Series: keys[n%hosts], TS: int64(n / hosts), Seq: uint64(n + 1), Op: row.Put, Fields: fs}
		}
		batches = append(batches, batch)
	}
	for b.Loop() {
		m := New()
		for i, batch := range batches {
			m.Insert(uint64(i), batch)
		}
		if d := m.Decimals(10); d[0] != 2 {
			b.Fatalf("scales %v", d)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
}
