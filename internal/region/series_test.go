package region

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/sst"
	"github.com/stratadb/strata/internal/testseed"
)

// A series listing comes from the files' series indexes and the
// memtables, filtered by tags and by the time ranges of files and series;
// a file written before series indexes existed is listed from the SST; a
// corrupt or missing index is an error, not a silently short answer.
func TestListSeries(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	r := open(t, s, Options{})
	mustWrite(t, r, pt("a", 10, fl("v", 1)), pt("b", 20, fl("v", 2)))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, r, pt("c", 100, fl("v", 3)), pt("a", 110, fl("v", 4)))
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, r, pt("d", 1000, fl("v", 5)))
	list := func(r *Region, req scan.Request) []string {
		t.Helper()
		req.SeriesOnly = true
		return scanAll(t, r, req)
	}
	for _, tc := range []struct {
		req  scan.Request
		want []string
	}{
		{scan.Request{}, []string{"host=a 0", "host=b 0", "host=c 0", "host=d 0"}},
		{scan.Request{Tags: []row.Tag{{Name: "host", Value: "c"}}}, []string{"host=c 0"}},
		{scan.Request{In: []row.TagIn{{Name: "host", Values: []string{"b", "d", "x"}}}}, []string{"host=b 0", "host=d 0"}},
		{scan.Request{Start: 500, End: 2000}, []string{"host=d 0"}},
		{scan.Request{Start: 0, End: 50}, []string{"host=a 0", "host=b 0"}},
		{scan.Request{Start: 2000, End: 3000}, nil},
	} {
		if got := list(r, tc.req); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.req, got, tc.want)
		}
	}
	if len(r.pins) != 0 {
		t.Fatalf("a listing left pins: %v", r.pins)
	}

	// A file with no series index (as written before they existed): its
	// series are read from the SST.
	key, err := row.EncodeSeries(nil, []row.Tag{{Name: "host", Value: "old"}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	meta, err := sst.Write(&buf, r.Schema().Fields(), &row.SliceIter{Entries: []row.Entry{
		{Series: string(key), TS: 5, Seq: 1, Op: row.Put, Fields: []row.Value{row.FloatValue(9)}}}}, sst.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id := ulid.Make().String()
	if err := s.Put(ctx, testRegion.SSTKey(id), buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := r.commit(ctx, manifest.Action{Edit: &manifest.Edit{FlushedSeq: r.man.State().FlushedSeq,
		Add: []manifest.FileMeta{{ID: id, MinTS: meta.MinTS, MaxTS: meta.MaxTS, Rows: meta.Rows, Size: meta.Size}}}}); err != nil {
		t.Fatal(err)
	}
	if got := list(r, scan.Request{Start: 0, End: 50}); !slices.Equal(got, []string{"host=a 0", "host=b 0", "host=old 0"}) {
		t.Fatalf("with a file without an index: %q", got)
	}
	closeRegion(t, r, true)

	// Reopened (nothing cached): a corrupt index fails the listing, and
	// so does a missing one.
	st := r.man.State()
	var victim string
	for id, f := range st.Files {
		if f.Series && f.MinTS == 10 {
			victim = id
		}
	}
	if err := s.Put(ctx, testRegion.SeriesKey(victim), []byte("SSER\x01junk")); err != nil {
		t.Fatal(err)
	}
	r = open(t, s, Options{})
	sc, err := r.Scan(ctx, scan.Request{Start: math.MinInt64, End: math.MaxInt64, SeriesOnly: true})
	if !errors.Is(err, sst.ErrCorruptSeries) {
		t.Fatalf("corrupt index: got %v, want ErrCorruptSeries", err)
	}
	if sc != nil {
		t.Fatal("a failed listing returned a scanner")
	}
	if err := s.Delete(ctx, testRegion.SeriesKey(victim)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Scan(ctx, scan.Request{Start: math.MinInt64, End: math.MaxInt64, SeriesOnly: true}); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("missing index: got %v, want ErrNotFound", err)
	}
	if len(r.pins) != 0 {
		t.Fatalf("a failed listing left pins: %v", r.pins)
	}
	// Data scans do not need the index.
	if got := scanAll(t, r, scan.Request{Tags: []row.Tag{{Name: "host", Value: "b"}}}); !slices.Equal(got, []string{"host=b 20 v=2"}) {
		t.Fatalf("scan: %q", got)
	}
	closeRegion(t, r, false)
}

// A file's postings narrow a filtered scan to the series its filter
// selects: for random keys (tags present or absent) and random filters
// (equalities, sets, "" for an absent tag), the runs fileRuns returns are
// exactly those of the keys the filter matches, in key order.
func TestPostingsSelectWhatTheFilterMatches(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewSource(seed))
	vals := []string{"", "a", "b", "c", "d"}
	names := []string{"dc", "host", "rack"}
	r := &Region{}
	for round := range 200 {
		set := map[string]bool{}
		for range 1 + rng.Intn(60) {
			var tags []row.Tag
			for _, n := range names {
				if v := vals[rng.Intn(len(vals))]; v != "" {
					tags = append(tags, row.Tag{Name: n, Value: v})
				}
			}
			k, err := row.EncodeSeries(nil, tags)
			if err != nil {
				t.Fatal(err)
			}
			set[string(k)] = true
		}
		var x sst.SeriesIndex
		for k := range set {
			x.Keys = append(x.Keys, k)
		}
		slices.Sort(x.Keys)
		var rows int64
		for range x.Keys {
			n := int64(1 + rng.Intn(5))
			x.Rows, rows = append(x.Rows, n), rows+n
		}
		var req scan.Request
		for range rng.Intn(3) {
			req.Tags = append(req.Tags, row.Tag{Name: names[rng.Intn(3)], Value: vals[rng.Intn(len(vals))]})
		}
		for range rng.Intn(3) {
			f := row.TagIn{Name: names[rng.Intn(3)]}
			for range rng.Intn(4) {
				f.Values = append(f.Values, vals[rng.Intn(len(vals))])
			}
			req.In = append(req.In, f)
		}
		match := seriesFilter(&req)
		if match == nil {
			continue
		}
		id := fmt.Sprint(round)
		r.seriesIdx.put(id, newFileSeries(id, x))
		p := &scanPlan{match: match, tags: req.Tags, in: req.In}
		got, err := r.fileRuns(context.Background(), id, manifest.FileMeta{Series: true, Rows: rows}, p, match)
		if err != nil {
			t.Fatal(err)
		}
		want := []sst.Run{}
		var at int64
		for i, k := range x.Keys {
			if match(k) {
				want = append(want, sst.Run{Key: k, Start: at, End: at + x.Rows[i]})
			}
			at += x.Rows[i]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d, filter %+v over %q:\ngot  %v\nwant %v", round, req, x.Keys, got, want)
		}
	}
}
