package sst

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/tsbs"
)

// goldenWrites are Writes whose bytes TestWriteIsByteStable pins: optional
// and required columns, decimals, tombstones, both compressions, small
// pages, several row groups encoded in parallel, series indexes.
func goldenWrites(t testing.TB) map[string]func() ([]byte, Meta) {
	es := testEntries(t, 3000)
	tsbsFields := make([]schema.Field, len(tsbs.Fields))
	for i, n := range tsbs.Fields {
		tsbsFields[i] = schema.Field{Name: n, Kind: row.Float}
	}
	var ts []row.Entry
	vals := make([]row.Value, 0, 40*500*len(tsbsFields))
	for h := range 40 {
		key, err := row.EncodeSeries(nil, tsbs.Tags(h))
		if err != nil {
			t.Fatal(err)
		}
		for k := range 500 {
			start := len(vals)
			for i := range tsbsFields {
				vals = append(vals, row.FloatValue(tsbs.Value(len(ts), i)))
			}
			ts = append(ts, row.Entry{Series: string(key), TS: int64(k) * tsbs.Interval, Seq: uint64(len(ts) + 1), Fields: vals[start:len(vals):len(vals)]})
		}
	}
	decimals := make([]int8, len(tsbsFields))
	for i := range decimals {
		decimals[i] = decimal.None
		if i%2 == 0 {
			decimals[i] = 4
		}
	}
	return map[string]func() ([]byte, Meta){
		"optional": func() ([]byte, Meta) {
			return writeWith(t, es, WriteOptions{RowGroupRows: 1000, SeriesIndex: true})
		},
		"required decimals fast": func() ([]byte, Meta) {
			return writeWith(t, es, WriteOptions{RowGroupRows: 1000, Parallel: 3, Compression: CompressFast, PageBytes: 4096,
				NoNulls: []bool{true, false, true, true, true}, Decimals: []int8{1}, SeriesIndex: true})
		},
		"tsbs": func() ([]byte, Meta) {
			return writeFields(t, tsbsFields, ts, WriteOptions{RowGroupRows: 7000, Parallel: 2, NoNulls: []bool{true, true, true},
				Decimals: decimals, SeriesIndex: true})
		},
	}
}

// goldenSums are the SHA-256 sums of goldenWrites' files, series indexes
// and metas, by whether the build encodes zstd with libzstd (cgo) or in
// pure Go. A change to how files are written changes them; so may a new
// parquet-go or zstd encoder. If the change is meant, take the sums the
// failure prints.
var goldenSums = map[bool]map[string]string{
	true: {
		"optional":               "7fd2385a2fefe247c6b7418786dcf28c1a96ad939c8d5d74f4d3f7d63222f403",
		"required decimals fast": "4734f5c676a231c4f3f7a357e28981d8f30e694c6c18e6f7bafc91d641fe276e",
		"tsbs":                   "b9933ec2b183f4d3f908954341aca5fd16255e2cfb4b635e74cdddddb5db3540",
	},
	false: {
		"optional":               "bc37fa901b6e6e1553c6c650b707c612ead4279dc3aaf4453e7def6f1c299e2d",
		"required decimals fast": "02f41a5045dbcc963c57b51d517b1488ff4a14f8e880346c30e5bdd1e6ff2f26",
		"tsbs":                   "0ccf6df87f5616b55b9eef34f885a4e24875d7d6ab358624d49be1e962c1644e",
	},
}

// TestWriteIsByteStable: the same rows and options write the same bytes.
func TestWriteIsByteStable(t *testing.T) {
	cgo := strings.HasPrefix(ZstdEncoder, "libzstd")
	for name, write := range goldenWrites(t) {
		data, m := write()
		again, _ := write()
		if !bytes.Equal(data, again) {
			t.Errorf("%s: two writes of the same rows differ", name)
		}
		h := sha256.New()
		h.Write(data)
		h.Write(m.SeriesIndex)
		m.SeriesIndex = nil
		_, _ = fmt.Fprintf(h, "%+v", m)
		got := hex.EncodeToString(h.Sum(nil))
		if want := goldenSums[cgo][name]; got != want {
			t.Errorf("%s (cgo %v): %d bytes with sum %s, want %s", name, cgo, len(data), got, want)
		}
	}
}
