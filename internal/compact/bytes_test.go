package compact

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/tsbs"
)

// TestBytesPerSample loads `strata bench ingest`'s data (tsbs.Walk: ten
// two-decimal percentages a host every 10 s) for STRATA_BYTES_HOSTS hosts
// over STRATA_BYTES_HOURS hours (default 12) into a region through its
// real write and flush path (default flush size), compacts every file
// into one job's outputs, and logs the bytes a sample (a row's field)
// of the flushed files and of the compacted ones, column by column:
// where the bytes go. Skipped unless STRATA_BYTES_HOSTS is set
// (docs/performance.md, "Bytes a sample"). 400 hosts take about a minute.
func TestBytesPerSample(t *testing.T) {
	hosts, _ := strconv.Atoi(os.Getenv("STRATA_BYTES_HOSTS"))
	if hosts <= 0 {
		t.Skip("set STRATA_BYTES_HOSTS (e.g. 400) to measure bytes a sample")
	}
	mode := os.Getenv("STRATA_BYTES_VALUES") // "" (integers), "floats" (integers as floats), "decimals" (two-decimal floats)
	hours := 12
	if v, err := strconv.Atoi(os.Getenv("STRATA_BYTES_HOURS")); err == nil && v > 0 {
		hours = v
	}
	ctx := context.Background()
	s, err := objstore.OpenBackend(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := region.Open(ctx, s, rid, region.Options{Create: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close(ctx, region.CloseOptions{}) }()

	steps := hours * 3600 / 10
	rows := hosts * steps
	walk := tsbs.NewWalk(hosts, 1)
	tags := make([][]row.Tag, hosts)
	for h := range tags {
		tags[h] = tsbs.Tags(h)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	began := time.Now()
	for i := 0; i < rows; {
		pts := make([]row.Point, 0, 5000)
		for ; i < rows && len(pts) < cap(pts); i++ {
			h := i % hosts
			vs := walk.Next(h)
			fs := make([]row.Field, len(tsbs.Fields))
			for j, n := range tsbs.Fields {
				fs[j] = row.Field{Name: n, Value: row.FloatValue(tsbs.WalkValue(vs[j]))}
				switch mode {
				case "":
					fs[j].Value = row.IntValue(tsbs.WalkInt(vs[j]))
				case "floats":
					fs[j].Value = row.FloatValue(float64(tsbs.WalkInt(vs[j])))
				}
			}
			pts = append(pts, row.Point{Tags: slices.Clone(tags[h]), TS: start + int64(i/hosts)*tsbs.Interval, Fields: fs})
		}
		if _, err := r.Write(ctx, pts); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	loaded := time.Since(began)
	samples := float64(rows * len(tsbs.Fields))
	flushed := SortedFiles(r.Manifest().Files)
	fcols, fsize, fseries := fileBytes(t, s, flushed)

	began = time.Now()
	res, err := NewJob(r, flushed, Options{}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	compacted := time.Since(began)
	ccols, csize, cseries := fileBytes(t, s, res.Outputs)
	if res.RowsOut != int64(rows) {
		t.Fatalf("compacted %d rows, want %d", res.RowsOut, rows)
	}

	var b strings.Builder
	values := map[string]string{"": "integers (TSBS)", "floats": "integers as floats", "decimals": "two-decimal floats"}[mode]
	fmt.Fprintf(&b, "%s; %d hosts × %d h: %d rows, %.0f samples; %d flushed files (load %v), %d compacted (%v)\n",
		values, hosts, hours, rows, samples, len(flushed), loaded.Round(time.Millisecond), len(res.Outputs), compacted.Round(time.Millisecond))
	fmt.Fprintf(&b, "| column | flushed B/sample | compacted B/sample |\n| --- | --- | --- |\n")
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range fcols {
			if !yield(n) {
				return
			}
		}
	})
	for _, n := range names {
		fmt.Fprintf(&b, "| %s | %.4f | %.4f |\n", n, float64(fcols[n])/samples, float64(ccols[n])/samples)
	}
	fmt.Fprintf(&b, "| SST total | **%.3f** | **%.3f** |\n", float64(fsize)/samples, float64(csize)/samples)
	fmt.Fprintf(&b, "| series index | %.4f | %.4f |\n", float64(fseries)/samples, float64(cseries)/samples)
	t.Log("\n" + b.String())
}

// fileBytes reads files' SSTs and series indexes from s: the compressed
// bytes of each column's chunks (by column name; "(footer)" is the rest
// of the file), the SSTs' total size, and the series indexes'.
func fileBytes(t *testing.T, s objstore.Bucket, files []manifest.FileMeta) (cols map[string]int64, size, series int64) {
	t.Helper()
	ctx := context.Background()
	cols = map[string]int64{}
	for _, fm := range files {
		data, err := s.Get(ctx, rid.SSTKey(fm.ID))
		if err != nil {
			t.Fatal(err)
		}
		idx, err := s.Get(ctx, rid.SeriesKey(fm.ID))
		if err != nil {
			t.Fatal(err)
		}
		size += int64(len(data))
		series += int64(len(idx))
		f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		rest := int64(len(data))
		for _, rg := range f.Metadata().RowGroups {
			for _, c := range rg.Columns {
				name := strings.Join(c.MetaData.PathInSchema, ".")
				cols[name] += c.MetaData.TotalCompressedSize
				rest -= c.MetaData.TotalCompressedSize
			}
		}
		cols["(footer)"] += rest
	}
	return cols, size, series
}
