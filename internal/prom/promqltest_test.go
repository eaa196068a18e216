package prom_test

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/storage"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/server/servertest"
)

// skipped are the upstream test files Strata does not run at all, and why;
// other files run without their sections that use what Strata does not
// store (see supported).
var skipped = map[string]string{
	"native_histograms.test": "native histograms are not stored (its sections without {{…}} load classic histograms converted to native ones: load_with_nhcb)",
	"start_timestamps.test":  "start timestamps are not stored: rate and increase use the samples alone",
}

// strataStorage is a storage.Storage over Strata: appends go through the
// normal write path of one datanode (a metric is a table with one field
// "value"; in a cluster, the shares of the regions other datanodes own are
// forwarded to them) and every datanode flushes at commit, so queries
// read Parquet SSTs. Queries ask the same datanode.
type strataStorage struct {
	*prom.Queryable        // over the datanode that takes the writes
	storage.ChunkQueryable // not used by the engine
	storage.Appendable     // the v1 appender: promqltest uses AppenderV2
	// nodes are every datanode, each flushed at commit.
	nodes []*datanode.Engine
	// close runs at the section's end (a clear command, or the file's);
	// nil: the nodes stop with the test.
	close func() error
}

func (s *strataStorage) AppenderV2(ctx context.Context) storage.AppenderV2 {
	return &appender{s: s, ctx: ctx, byTable: map[string]int{}}
}
func (s *strataStorage) StartTime() (int64, error) { return math.MinInt64, nil }
func (s *strataStorage) Close() error {
	if s.close == nil {
		return nil
	}
	return s.close()
}

// appender is not remote write's batcher: the test files load staleness
// markers, which the engine must see, and remote write drops them.
type appender struct {
	s       *strataStorage
	ctx     context.Context
	byTable map[string]int
	batches []datanode.TableBatch
}

var errHistogram = errors.New("native histograms are not supported")

func (a *appender) Append(ref storage.SeriesRef, ls labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AppendV2Options) (storage.SeriesRef, error) {
	if h != nil || fh != nil {
		return 0, errHistogram
	}
	name := ls.Get(model.MetricNameLabel)
	i, ok := a.byTable[name]
	if !ok {
		i = len(a.batches)
		a.byTable[name] = i
		a.batches = append(a.batches, datanode.TableBatch{Table: name})
	}
	var tags []row.Tag
	ls.Range(func(l labels.Label) {
		if l.Name != model.MetricNameLabel && l.Value != "" {
			tags = append(tags, row.Tag{Name: l.Name, Value: l.Value})
		}
	})
	a.batches[i].Points = append(a.batches[i].Points, row.Point{Tags: tags, TS: t * 1_000_000, Fields: []row.Field{{Name: prom.ValueField, Value: row.FloatValue(v)}}})
	return storage.SeriesRef(ls.Hash() | 1), nil
}

func (a *appender) Commit() error {
	e := a.s.Engine
	// promqltest appends in map order: the tables are created in the
	// order of their names, so that each gets the same id every run (a
	// logical table's id is in its series' keys, which place them in
	// regions).
	slices.SortFunc(a.batches, func(x, y datanode.TableBatch) int { return strings.Compare(x.Table, y.Table) })
	for _, b := range a.batches {
		for start := 0; start < len(b.Points); start += 10000 {
			part := datanode.TableBatch{Table: b.Table, Points: b.Points[start:min(start+10000, len(b.Points))]}
			if _, err := e.WriteTables(a.ctx, []datanode.TableBatch{part}, datanode.WriteOptions{CreateTable: true}); err != nil {
				return err
			}
		}
	}
	for _, n := range a.s.nodes {
		if err := n.Flush(a.ctx, ""); err != nil { // every region it hosts
			return err
		}
	}
	return nil
}

func (a *appender) Rollback() error { a.batches = nil; return nil }

// Prometheus' own PromQL test files, against Strata's storage: each
// loaded series is written through the engine's write path and flushed to
// Parquet SSTs, then every eval runs on Prometheus' engine over Strata's
// Queryable. Files listed in skipped are not run.
func TestUpstreamPromQLTests(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a standalone per test file")
	}
	engine := promqltest.NewTestEngine(t, false, 0, 50_000_000)
	eachUpstreamFile(t, func(t *testing.T, content string) {
		promqltest.RunTestWithStorage(t, content, engine, func(tb testing.TB) storage.Storage {
			n := servertest.Start(tb, objstoretest.Mem(tb), servertest.Options{})
			return &strataStorage{Queryable: &prom.Queryable{Engine: n.Engine()}, nodes: []*datanode.Engine{n.Engine()}}
		})
	})
}

// eachUpstreamFile runs, in a subtest named after it, every one of
// Prometheus' PromQL test files not skipped, with the sections Strata
// supports (see supported).
func eachUpstreamFile(t *testing.T, run func(t *testing.T, content string)) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/prometheus/prometheus").Output()
	if err != nil {
		t.Fatalf("locating the prometheus module: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "promql", "promqltest", "testdata")
	files, err := filepath.Glob(filepath.Join(dir, "*.test"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files under %s: %v", dir, err)
	}
	sort.Strings(files)
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			if why, ok := skipped[name]; ok {
				t.Skip(why)
			}
			content, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			kept, dropped := supported(string(content))
			for why, n := range dropped {
				t.Logf("%s: %d sections (between clear commands) not run: %s", name, n, why)
			}
			run(t, kept)
		})
	}
}

// supported drops the sections of a test file (the parts between "clear"
// commands) that use what Strata does not store: native histograms
// ("{{...}}") and labels named "__…" other than __name__ (Strata reserves
// the prefix). It returns the rest and how many sections it dropped, by
// reason.
func supported(content string) (string, map[string]int) {
	var kept []string
	dropped := map[string]int{}
	var section []string
	flush := func() {
		text := strings.Join(section, "\n")
		switch {
		case strings.Contains(text, "{{"):
			dropped["native histograms"]++
		case hasReservedLabel(text):
			dropped["labels named __…"]++
		default:
			kept = append(kept, text)
		}
		section = nil
	}
	for _, l := range strings.Split(content, "\n") {
		if strings.TrimSpace(l) == "clear" {
			flush()
			continue
		}
		section = append(section, l)
	}
	flush()
	return strings.Join(kept, "\nclear\n"), dropped
}

var reservedLabel = regexp.MustCompile(`[{,]\s*(__[A-Za-z0-9_]*)\s*=`)

func hasReservedLabel(text string) bool {
	for _, m := range reservedLabel.FindAllStringSubmatch(text, -1) {
		if m[1] != "__name__" {
			return true
		}
	}
	return false
}
