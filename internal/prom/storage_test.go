package prom_test

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/testseed"
)

// TestSelectMatchesRows: Select, which reads column by column and merges a
// series' columns from several files and memtables itself, returns what
// the rows of a row scan make of the same data: the newest row of each
// (series, ts), rows without the field skipped, and of two rows in one
// millisecond the later. The history has overwrites in later flushes and in
// memtables, rows without the field, and several rows a millisecond.
func TestSelectMatchesRows(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewSource(seed))
	ctx := context.Background()
	e := servertest.Start(t, objstoretest.Mem(t), servertest.Options{}).Engine()
	hosts := []string{"a", "b", "c", "d"}
	for step := range 10 {
		var pts []row.Point
		for range 50 + rng.Intn(50) {
			p := row.Point{Tags: []row.Tag{{Name: "host", Value: hosts[rng.Intn(len(hosts))]}},
				TS: int64(rng.Intn(200))*1_000_000 + int64(rng.Intn(3))*400_000}
			if rng.Intn(4) > 0 {
				p.Fields = append(p.Fields, row.Field{Name: "usage", Value: row.FloatValue(float64(rng.Intn(1000)))})
			}
			p.Fields = append(p.Fields, row.Field{Name: "other", Value: row.IntValue(int64(step))})
			pts = append(pts, p)
		}
		if _, err := e.Write(ctx, "cpu", pts, datanode.WriteOptions{CreateTable: true}); err != nil {
			t.Fatal(err)
		}
		if rng.Intn(2) == 0 {
			if err := e.Flush(ctx, "cpu"); err != nil {
				t.Fatal(err)
			}
		}
	}
	q := &prom.Queryable{Engine: e}
	for range 20 {
		mint := int64(rng.Intn(100))
		maxt := mint + int64(rng.Intn(150))
		ms := []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "cpu_usage")}
		switch rng.Intn(3) {
		case 1:
			ms = append(ms, labels.MustNewMatcher(labels.MatchEqual, "host", hosts[rng.Intn(len(hosts))]))
		case 2:
			ms = append(ms, labels.MustNewMatcher(labels.MatchRegexp, "host", "[ac]"))
		}
		got := selectLines(t, q, mint, maxt, ms)
		want := rowLines(t, e, mint, maxt, ms[1:])
		if !slices.Equal(got, want) {
			t.Fatalf("[%d, %d] %v:\nselect %q\nrows   %q", mint, maxt, ms, got, want)
		}
	}
}

func selectLines(t *testing.T, q *prom.Queryable, mint, maxt int64, ms []*labels.Matcher) []string {
	t.Helper()
	qr, err := q.Querier(mint, maxt)
	if err != nil {
		t.Fatal(err)
	}
	ss := qr.Select(context.Background(), true, &storage.SelectHints{Start: mint, End: maxt}, ms...)
	var out []string
	var it chunkenc.Iterator
	for ss.Next() {
		s := ss.At()
		it = s.Iterator(it)
		for it.Next() != chunkenc.ValNone {
			ts, v := it.At()
			out = append(out, fmt.Sprintf("%s %d %v", s.Labels().Get("host"), ts, v))
		}
	}
	if err := ss.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// rowLines reads the rows of a row scan as samples: floored to
// milliseconds, rows without the field skipped, the later of two in one
// millisecond standing.
func rowLines(t *testing.T, e *datanode.Engine, mint, maxt int64, ms []*labels.Matcher) []string {
	t.Helper()
	sc, err := e.Scan(context.Background(), "cpu", scan.Request{Start: mint * 1e6, End: (maxt + 1) * 1e6, Fields: []string{"usage"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	var out []string
	last, lastHost := int64(math.MinInt64), ""
	for sc.Next() {
		for _, r := range sc.Batch() {
			host := row.SeriesTag(r.Series, "host")
			if v := r.Field(0); !v.IsNull() && (len(ms) == 0 || ms[0].Matches(host)) {
				ts := r.TS / 1e6
				line := fmt.Sprintf("%s %d %v", host, ts, v.Float())
				if ts == last && host == lastHost {
					out[len(out)-1] = line
				} else {
					out = append(out, line)
				}
				last, lastHost = ts, host
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
