package region

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/testseed"
)

// model is the expected content of a region: (series, ts) -> row.
type model map[modelKey]map[string]row.Value

type modelKey struct {
	series string
	ts     int64
}

func (m model) clone() model {
	c := make(model, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// write applies a batch with last-writer-wins on whole rows.
func (m model) write(points []row.Point) {
	for _, p := range points {
		key, _ := row.EncodeSeries(nil, p.Tags)
		fields := map[string]row.Value{}
		for _, f := range p.Fields {
			fields[f.Name] = f.Value
		}
		m[modelKey{string(key), p.TS}] = fields
	}
}

func (m model) delete(tags []row.Tag, start, end int64) {
	key, _ := row.EncodeSeries(nil, tags)
	for k := range m {
		if k.series == string(key) && k.ts >= start && k.ts <= end {
			delete(m, k)
		}
	}
}

// lines renders the model the way scanAll renders a scan.
func (m model) lines(r *Region) []string {
	keys := make([]modelKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b modelKey) int {
		return cmp.Or(cmp.Compare(a.series, b.series), cmp.Compare(a.ts, b.ts))
	})
	fields := r.Schema().Fields()
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		e := row.Entry{Series: k.series, TS: k.ts, Fields: make([]row.Value, len(fields))}
		for i, f := range fields {
			e.Fields[i] = m[k][f.Name]
		}
		out = append(out, formatRow(fields, &e))
	}
	return out
}

// op is one step of a workload.
type op struct {
	kind   string // write, bad-write, delete, flush, reopen, reopen-flush, scan
	points []row.Point
	fwd    bool // a write as a datanode forwards one (Batch.Encoded)
	tags   []row.Tag
	start  int64
	end    int64
}

var modelFields = []struct {
	name string
	gen  func(*rand.Rand) row.Value
}{
	{"f0", func(r *rand.Rand) row.Value { return row.FloatValue(float64(r.IntN(1000)) / 8) }},
	{"f1", func(r *rand.Rand) row.Value { return row.FloatValue(r.NormFloat64()) }},
	{"i", func(r *rand.Rand) row.Value { return row.IntValue(r.Int64N(1<<40) - 1<<39) }},
	{"u", func(r *rand.Rand) row.Value { return row.UintValue(r.Uint64()) }},
	{"s", func(r *rand.Rand) row.Value { return row.StringValue(strconv.Itoa(r.IntN(100))) }},
	{"b", func(r *rand.Rand) row.Value { return row.BoolValue(r.IntN(2) == 0) }},
}

// workload returns a seeded random sequence of operations. Timestamps come
// from a small range so rows are overwritten and deleted often.
func workload(seed uint64, steps int) []op {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	host := func() []row.Tag {
		h := rng.IntN(6)
		if h == 0 {
			return nil // the series without tags
		}
		tags := []row.Tag{{Name: "host", Value: "h" + strconv.Itoa(h)}}
		if h%2 == 0 {
			tags = append(tags, row.Tag{Name: "dc", Value: "east"})
		}
		return tags
	}
	point := func() row.Point {
		p := row.Point{Tags: host(), TS: rng.Int64N(60) - 10}
		// Later fields appear only later in the workload: schema changes
		// happen throughout.
		for _, f := range modelFields[:1+rng.IntN(len(modelFields))] {
			if rng.IntN(3) > 0 || len(p.Fields) == 0 {
				p.Fields = append(p.Fields, row.Field{Name: f.name, Value: f.gen(rng)})
			}
		}
		return p
	}
	var ops []op
	for range steps {
		switch n := rng.IntN(100); {
		case n < 50:
			o := op{kind: "write", fwd: rng.IntN(2) == 0}
			for range 1 + rng.IntN(8) {
				o.points = append(o.points, point())
			}
			ops = append(ops, o)
		case n < 55:
			o := op{kind: "bad-write", points: []row.Point{point(), point()}}
			o.points[1].Fields = append(o.points[1].Fields, row.Field{Name: "f0", Value: row.FloatValue(math.NaN())})
			ops = append(ops, o)
		case n < 65:
			start := rng.Int64N(60) - 10
			ops = append(ops, op{kind: "delete", tags: host(), start: start, end: start + rng.Int64N(20)})
		case n < 80:
			ops = append(ops, op{kind: "flush"})
		case n < 85:
			ops = append(ops, op{kind: "reopen"})
		case n < 90:
			ops = append(ops, op{kind: "reopen-flush"})
		default:
			ops = append(ops, op{kind: "scan"})
		}
	}
	return ops
}

// harness runs a workload against a region over a fault-injecting store,
// and on the first error of a life "crashes": it abandons the region,
// reopens it over a clean store, and checks that the region holds exactly
// the acknowledged writes, plus the failed one either wholly or not at all.
type harness struct {
	// next returns the store of the region's next life (default: clean).
	next  func() *faultstore.Store
	t     *testing.T
	ctx   context.Context
	inner objstore.Bucket
	fs    *faultstore.Store
	r     *Region
	m     model
	what  string // for failure messages
	lives int
	// checkEvery compares the region with the model after every Nth step
	// (default 1); recoveries are always checked.
	checkEvery int
}

func (h *harness) fail(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("%s: %s", h.what, fmt.Sprintf(format, args...))
}

func (h *harness) openLife(fs *faultstore.Store) error {
	h.fs = fs
	r, err := Open(h.ctx, objstoretest.Fast(h.fs), testRegion, Options{Create: true, RowGroupRows: 16, Logger: quiet, DecodeForwarded: decodeForwarded})
	if err != nil {
		return err
	}
	h.r = r
	return nil
}

// crash abandons the current region and reopens it, over the store of the
// next life, until a reopen and a scan succeed. cands are the states the
// region may be in.
func (h *harness) crash(cause error, cands ...model) {
	h.t.Helper()
	for attempt := 0; ; attempt++ {
		if attempt == 100 {
			h.fail("no successful reopen in 100 attempts after %v", cause)
		}
		if h.r != nil {
			_ = h.r.Close(h.ctx, CloseOptions{}) // over a failed store: errors expected
			h.r = nil
		}
		fs := faultstore.New(h.inner)
		if h.next != nil {
			fs = h.next()
		}
		h.lives++
		if err := h.openLife(fs); err != nil {
			if h.next == nil {
				h.fail("reopen over a clean store after %v: %v", cause, err)
			}
			continue
		}
		got, err := scanLines(h.ctx, h.r)
		if err != nil {
			if h.next == nil {
				h.fail("scan over a clean store after %v: %v", cause, err)
			}
			continue
		}
		for _, c := range cands {
			if slices.Equal(got, c.lines(h.r)) {
				h.m = c
				checkOwned(h.t, h.inner, h.r.Manifest())
				return
			}
		}
		h.fail("after %v (faults %v) the region holds\n%s\nwant\n%s", cause, h.fs.Fired(), strings.Join(got, "\n"), strings.Join(cands[0].lines(h.r), "\n"))
	}
}

func scanLines(ctx context.Context, r *Region) ([]string, error) {
	sc, err := r.Scan(ctx, scan.Request{Start: AllTime, End: AllTimeEnd})
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	var out []string
	for sc.Next() {
		for _, e := range sc.Batch() {
			out = append(out, formatRow(sc.Fields(), &e))
		}
	}
	return out, sc.Err()
}

// check compares the region with the model; a scan error is a crash.
func (h *harness) check() {
	h.t.Helper()
	got, err := scanLines(h.ctx, h.r)
	if err != nil {
		h.crash(err, h.m)
		return
	}
	if want := h.m.lines(h.r); !slices.Equal(got, want) {
		h.fail("region holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// run executes ops over first, the store of the first life.
func (h *harness) run(ops []op, first *faultstore.Store) {
	h.t.Helper()
	h.m = model{}
	if err := h.openLife(first); err != nil {
		h.crash(err, h.m)
	}
	for i, o := range ops {
		h.what = fmt.Sprintf("%s step %d (%s)", strings.SplitN(h.what, " step", 2)[0], i, o.kind)
		var err error
		next := h.m
		switch o.kind {
		case "write":
			if o.fwd {
				_, err = h.r.WriteBatch(h.ctx, forwardedBatch(h.t, slices.Clone(o.points)))
			} else {
				_, err = h.r.Write(h.ctx, slices.Clone(o.points))
			}
			next = h.m.clone()
			next.write(o.points)
		case "bad-write":
			_, err = h.r.Write(h.ctx, slices.Clone(o.points))
			var pe *PointError
			if errors.As(err, &pe) && pe.Index == 1 && errors.Is(err, ErrInvalidWrite) {
				err = nil // rejected as it should be; nothing changes
			} else if err == nil {
				h.fail("a batch with NaN was accepted")
			}
		case "delete":
			err = h.r.Delete(h.ctx, o.tags, o.start, o.end)
			next = h.m.clone()
			next.delete(o.tags, o.start, o.end)
		case "flush":
			err = h.r.Flush(h.ctx)
		case "reopen", "reopen-flush":
			err = h.r.Close(h.ctx, CloseOptions{Flush: o.kind == "reopen-flush"})
			h.r = nil
			if err == nil {
				err = h.openLife(h.fs) // the same life: its fault stays armed
			}
		case "scan":
			var sc *Scanner
			if sc, err = h.r.Scan(h.ctx, scan.Request{Start: AllTime, End: AllTimeEnd}); err == nil {
				for sc.Next() {
				}
				err = sc.Err()
				sc.Close()
			}
		}
		if err != nil {
			if next != nil && !maybeApplied(err) && o.kind == "write" {
				h.fail("write failed with %v, which claims nothing was written", err)
			}
			h.crash(err, h.m, next)
			continue
		}
		h.m = next
		if h.checkEvery <= 1 || i%h.checkEvery == 0 {
			h.check()
		}
	}
	h.check()
	checkOwned(h.t, h.inner, h.r.Manifest())
	if err := h.r.Close(h.ctx, CloseOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// maybeApplied reports whether a write error leaves the outcome open (it
// must never be a validation error for a valid batch).
func maybeApplied(err error) bool {
	return !errors.Is(err, ErrInvalidWrite) && !errors.Is(err, ErrBatchTooLarge)
}

// TestModelWithFaultAtEveryCall runs seeded random workloads (writes, half
// of them as a datanode writes a forwarded batch (Batch.Encoded),
// overwrites, deletes, flushes, reopens, scans) and compares the region with
// an in-memory model after every step. Each workload is first run clean to
// count its object-store calls, then once per call index and fault kind
// with that fault injected there: a crash (the call and everything after
// fail), a crash after the call took effect, a failure before or after the
// call, or a transient failure (retried). Whatever the fault, the reopened
// region holds every acknowledged write, the failed write wholly or not at
// all, and no SST that the manifest does not own.
func TestModelWithFaultAtEveryCall(t *testing.T) {
	seed := testseed.Seed(t)
	ctx := context.Background()
	rounds, steps := 3, 40
	if testing.Short() {
		rounds, steps = 1, 25
	}
	actions := []faultstore.Action{faultstore.Crash, faultstore.CrashAfter, faultstore.Fail, faultstore.FailAfter, faultstore.FailTransient}
	cases, crashes := 0, 0
	for round := range rounds {
		rs := seed + uint64(round)
		ops := workload(rs, steps)
		probe := &harness{t: t, ctx: ctx, inner: objstoretest.Mem(t), what: fmt.Sprintf("seed %d round %d clean", seed, round)}
		probe.run(ops, faultstore.New(probe.inner))
		calls := probe.fs.Calls()
		if probe.lives != 0 {
			t.Fatalf("clean run crashed %d times", probe.lives)
		}
		for n := 1; n <= calls; n++ {
			for _, a := range actions {
				h := &harness{t: t, ctx: ctx, inner: objstoretest.Mem(t), what: fmt.Sprintf("seed %d round %d: %s at call %d", seed, round, a, n), checkEvery: 8}
				h.run(ops, faultstore.New(h.inner, faultstore.Rule{N: n, Action: a}))
				cases++
				crashes += h.lives
			}
		}
		t.Logf("round %d: %d ops, %d store calls per clean run", round, len(ops), calls)
	}
	t.Logf("%d fault cases, %d crash recoveries, every one consistent with the model", cases, crashes)
}

// TestModelRandomFaults runs longer workloads with a random fault in every
// life of the region, so recovery itself is interrupted too.
func TestModelRandomFaults(t *testing.T) {
	seed := testseed.Seed(t)
	ctx := context.Background()
	runs, steps := 20, 300
	if testing.Short() {
		runs = 4
	}
	lives := 0
	for run := range runs {
		rs := seed + uint64(run)*7919
		h := &harness{t: t, ctx: ctx, inner: objstoretest.Mem(t), what: fmt.Sprintf("seed %d run %d", seed, run)}
		life := rs
		h.next = func() *faultstore.Store {
			life++
			return faultstore.New(h.inner, faultstore.Random(life, 150))
		}
		h.run(workload(rs, steps), h.next())
		lives += h.lives
	}
	t.Logf("%d runs of %d ops, %d crash recoveries, all consistent with the model", runs, steps, lives)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
