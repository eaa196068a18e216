package region

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/schema"
)

var testRegion = layout.RegionID{Table: 3, Region: 1}

func open(t testing.TB, s objstore.Bucket, opts Options) *Region {
	t.Helper()
	opts.Create = true
	r, err := Open(context.Background(), s, testRegion, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func closeRegion(t testing.TB, r *Region, flush bool) {
	t.Helper()
	if err := r.Close(context.Background(), CloseOptions{Flush: flush}); err != nil {
		t.Fatal(err)
	}
}

func pt(host string, ts int64, fields ...row.Field) row.Point {
	var tags []row.Tag
	if host != "" {
		tags = []row.Tag{{Name: "host", Value: host}}
	}
	return row.Point{Tags: tags, TS: ts, Fields: fields}
}

func fl(name string, v float64) row.Field { return row.Field{Name: name, Value: row.FloatValue(v)} }

func mustWrite(t testing.TB, r *Region, points ...row.Point) {
	t.Helper()
	if _, err := r.Write(context.Background(), points); err != nil {
		t.Fatal(err)
	}
}

// scanAll returns "series ts field=value ..." lines of a scan, in order.
func scanAll(t testing.TB, r *Region, req scan.Request) []string {
	t.Helper()
	if req.Start == 0 && req.End == 0 {
		req.Start, req.End = AllTime, AllTimeEnd
	}
	sc, err := r.Scan(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	var out []string
	for sc.Next() {
		for _, e := range sc.Batch() {
			out = append(out, formatRow(sc.Fields(), &e))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func formatRow(fields []schema.Field, e *row.Entry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d", row.FormatSeries(e.Series), e.TS)
	for i, f := range fields {
		if v := e.Field(i); !v.IsNull() {
			fmt.Fprintf(&b, " %s=%v", f.Name, v)
		}
	}
	return b.String()
}

// sstKeys lists the region's SST objects.
func sstKeys(t testing.TB, s objstore.Bucket) map[string]bool {
	t.Helper()
	objs, err := objstore.ListAll(context.Background(), s, testRegion.SSTPrefix(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, o := range objs {
		id, ok := testRegion.ParseFileKey(o.Key)
		if !ok {
			t.Fatalf("unknown object %s under the SST prefix", o.Key)
		}
		out[id] = true
	}
	return out
}

// checkOwned fails if an SST object is neither live, removed (waiting for
// GC) nor reserved by a pending-outputs marker: an orphan.
func checkOwned(t testing.TB, s objstore.Bucket, st *manifest.State) {
	t.Helper()
	for id := range sstKeys(t, s) {
		if !st.Owns(id) {
			t.Fatalf("orphan SST %s: not live, removed or pending (manifest v%d)", id, st.Version)
		}
	}
	for id, f := range st.Files {
		for _, key := range testRegion.FileKeys(id) {
			if _, err := s.Attributes(context.Background(), key); err != nil && (f.Series || key == testRegion.SSTKey(id)) {
				t.Fatalf("live file %s: %s: %v", id, key, err)
			}
		}
	}
}

// rowBytes is the region's memtable memory less its keys: what starts a
// flush.
func rowBytes(r *Region) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.memBytes - r.memKeys
}
