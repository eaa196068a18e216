package compact

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/tsbs"
)

// plainRows writes TSBS walk rows (int fields, as TSBS writes them, and
// two-decimal float fields, as `strata bench ingest` does, plus a uint and
// a string) for a few hosts through a region, flushes them in three
// files, compacts those into one and returns its bytes, with the rows as
// text ("series ts field=value ..."), sorted.
func plainRows(t *testing.T) (sst []byte, want []string) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	r, err := region.Open(ctx, s, rid, region.Options{Create: true, Logger: quiet, FlushBytes: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close(ctx, region.CloseOptions{}) }()
	const hosts, steps = 7, 900
	walk := tsbs.NewWalk(hosts, 3)
	for i := range hosts * steps {
		h := i % hosts
		vs := walk.Next(h)
		fs := []row.Field{
			{Name: "usage_user", Value: row.IntValue(tsbs.WalkInt(vs[0]))},
			{Name: "usage_system", Value: row.IntValue(tsbs.WalkInt(vs[1]) - 50)},
			{Name: "usage_idle", Value: row.FloatValue(tsbs.WalkValue(vs[2]))},
			{Name: "bytes", Value: row.UintValue(math.MaxUint64 - uint64(i))},
			{Name: "state", Value: row.StringValue([]string{"ok", "degraded"}[i%3/2])},
		}
		p := row.Point{Tags: tsbs.Tags(h), TS: int64(i/hosts) * tsbs.Interval, Fields: fs}
		key, err := row.EncodeSeries(nil, tsbs.Tags(h))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("%x %d bytes=%d state=%s usage_idle=%s usage_system=%d usage_user=%d", key, p.TS,
			fs[3].Value.Uint(), fs[4].Value.Str(), strconv.FormatFloat(fs[2].Value.Float(), 'g', -1, 64), fs[1].Value.Int(), fs[0].Value.Int()))
		if _, err := r.Write(ctx, []row.Point{p}); err != nil {
			t.Fatal(err)
		}
		if (i+1)%(hosts*steps/3) == 0 {
			if err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	res, err := NewJob(r, SortedFiles(r.Manifest().Files), Options{}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Inputs) != 3 || len(res.Outputs) != 1 {
		t.Fatalf("compacted %d files into %d", len(res.Inputs), len(res.Outputs))
	}
	if sst, err = s.Get(ctx, rid.SSTKey(res.Outputs[0].ID)); err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	return sst, want
}

// TestCompactedSSTIsPlainParquet: a compacted SST read with parquet-go's
// generic row reader, which knows nothing of Strata (not the page decoding
// of package sst's readers), holds every row written, each field as its
// column's Parquet type and logical type say (a DECIMAL's mantissa over
// 10^scale); and its column encodings and codecs are the ones
// docs/format/sst.md names, which parquet-go, DuckDB and pyarrow all read.
func TestCompactedSSTIsPlainParquet(t *testing.T) {
	data, want := plainRows(t)
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	for _, rg := range f.Metadata().RowGroups {
		for _, c := range rg.Columns {
			md := c.MetaData
			name := md.PathInSchema[0]
			var wantEnc format.Encoding
			switch name {
			case "__series", "state":
				wantEnc = format.RLEDictionary
			case "__delete_end":
				wantEnc = format.Plain
			default:
				wantEnc = format.DeltaBinaryPacked
			}
			wantCodec := format.Zstd
			if name == "usage_idle" {
				wantCodec = format.Uncompressed
			}
			if !slices.Contains(md.Encoding, wantEnc) || md.Codec != wantCodec {
				t.Errorf("column %s: encodings %v, codec %v; want %v, %v", name, md.Encoding, md.Codec, wantEnc, wantCodec)
			}
		}
	}
	leaves := f.Schema().Columns()
	var got []string
	for _, rg := range f.RowGroups() {
		rr := rg.Rows()
		buf := make([]parquet.Row, 100)
		for {
			n, err := rr.ReadRows(buf)
			for _, rw := range buf[:n] {
				got = append(got, plainRow(t, f, leaves, rw))
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		_ = rr.Close()
	}
	slices.Sort(got)
	if len(got) != len(want) {
		t.Fatalf("read %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("row %d: got %q, want %q", i, got[i], want[i])
		}
	}

	// With a DuckDB to read it (STRATA_DUCKCHECK: a program printing a
	// Parquet file's rows, see docs/format/sst.md), the same rows.
	duck := os.Getenv("STRATA_DUCKCHECK")
	if duck == "" {
		t.Log("STRATA_DUCKCHECK unset: not read with DuckDB")
		return
	}
	path := filepath.Join(t.TempDir(), "x.parquet")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(duck, path).Output()
	if err != nil {
		t.Fatalf("%s: %v", duck, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	header := strings.Fields(strings.Trim(lines[0], "[]"))
	got = got[:0]
	for _, l := range lines[1:] {
		vals := strings.Split(l, "\t")
		m := map[string]string{}
		for i, h := range header {
			m[h] = vals[i]
		}
		idle, err := strconv.ParseFloat(m["usage_idle"], 64)
		if err != nil {
			t.Fatalf("usage_idle %q: %v", m["usage_idle"], err)
		}
		ts := m["__ts"]
		got = append(got, fmt.Sprintf("%s %s bytes=%s state=%s usage_idle=%s usage_system=%s usage_user=%s", m["__series"], ts,
			m["bytes"], m["state"], strconv.FormatFloat(idle, 'g', -1, 64), m["usage_system"], m["usage_user"]))
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("DuckDB read %d rows; first %q, want %q", len(got), got[:min(1, len(got))], want[0])
	}
	t.Logf("DuckDB (%s) read the %d rows", duck, len(got))
}

// plainRow is rw as text, from the file's schema alone.
func plainRow(t *testing.T, f *parquet.File, leaves [][]string, rw parquet.Row) string {
	t.Helper()
	vals := map[string]string{}
	for _, v := range rw {
		name := leaves[v.Column()][0]
		col, _ := f.Schema().Lookup(name)
		typ := col.Node.Type()
		var dec *format.DecimalType
		var integer *format.IntType
		if lt := typ.LogicalType(); lt != nil {
			dec, _ = lt.Value.(*format.DecimalType)
			integer, _ = lt.Value.(*format.IntType)
		}
		switch {
		case v.IsNull():
			vals[name] = "null"
		case typ.Kind() == parquet.ByteArray && name == "__series":
			vals[name] = fmt.Sprintf("%x", v.ByteArray())
		case typ.Kind() == parquet.ByteArray:
			vals[name] = string(v.ByteArray())
		case dec != nil:
			vals[name] = strconv.FormatFloat(float64(v.Int64())/math.Pow10(int(dec.Scale)), 'g', -1, 64)
		case integer != nil && !integer.IsSigned:
			vals[name] = strconv.FormatUint(v.Uint64(), 10)
		case typ.Kind() == parquet.Int64:
			vals[name] = strconv.FormatInt(v.Int64(), 10)
		default:
			t.Fatalf("column %s: unexpected type %v", name, typ)
		}
	}
	if vals["__delete_end"] != "null" {
		t.Fatalf("a tombstone: %v", vals)
	}
	return fmt.Sprintf("%s %s bytes=%s state=%s usage_idle=%s usage_system=%s usage_user=%s", vals["__series"], vals["__ts"],
		vals["bytes"], vals["state"], vals["usage_idle"], vals["usage_system"], vals["usage_user"])
}
