package compact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/gc"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/sst"
	"github.com/stratadb/strata/internal/testseed"
)

var rid = layout.RegionID{Table: 9, Region: 0}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func openRegion(t testing.TB, s objstore.Bucket) *region.Region {
	t.Helper()
	r, err := region.Open(context.Background(), s, rid, region.Options{Create: true, RowGroupRows: 64, Logger: quiet, FlushBytes: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// reopenAfterCrash opens the region as the owner after a crash, on a clock
// past the crashed owner's upload window: its markers are then provably
// dead, and fast GC takes them.
func reopenAfterCrash(t testing.TB, s objstore.Bucket) *region.Region {
	t.Helper()
	later := func() time.Time { return time.Now().Add(manifest.UploadWindow + manifest.MaxClockSkew) }
	r, err := region.Open(context.Background(), s, rid, region.Options{RowGroupRows: 64, Logger: quiet, FlushBytes: 1 << 40, Now: later})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// load writes a seeded workload in `files` flushes: overwrites, new
// columns, deletes.
func load(t testing.TB, r *region.Region, seed uint64, files int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 11))
	for f := range files {
		var pts []row.Point
		for range 50 + rng.IntN(150) {
			h := rng.IntN(12)
			p := row.Point{Tags: []row.Tag{{Name: "host", Value: "h" + strconv.Itoa(h)}}, TS: int64(rng.IntN(400)),
				Fields: []row.Field{{Name: "v", Value: row.FloatValue(float64(rng.IntN(1000)))}}}
			if rng.IntN(3) == 0 {
				p.Fields = append(p.Fields, row.Field{Name: "n" + strconv.Itoa(f%3), Value: row.IntValue(rng.Int64N(100))})
			}
			pts = append(pts, p)
		}
		if _, err := r.Write(ctx, pts); err != nil {
			t.Fatal(err)
		}
		if rng.IntN(2) == 0 {
			start := int64(rng.IntN(400))
			if err := r.Delete(ctx, []row.Tag{{Name: "host", Value: "h" + strconv.Itoa(rng.IntN(12))}}, start, start+int64(rng.IntN(60))); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// scanLines renders every row of a scan, or a scan with a filter.
func scanLines(ctx context.Context, r *region.Region, req scan.Request) ([]string, error) {
	if req.End == 0 {
		req.Start, req.End = region.AllTime, region.AllTimeEnd
	}
	sc, err := r.Scan(ctx, req)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	var out []string
	for sc.Next() {
		for _, e := range sc.Batch() {
			var b strings.Builder
			fmt.Fprintf(&b, "%s %d", row.FormatSeries(e.Series), e.TS)
			for i, f := range sc.Fields() {
				if v := e.Field(i); !v.IsNull() {
					fmt.Fprintf(&b, " %s=%v", f.Name, v)
				}
			}
			out = append(out, b.String())
		}
	}
	return out, sc.Err()
}

// orphans lists SST objects that the persisted manifest does not own, and
// live files without an object.
func orphans(t testing.TB, s objstore.Bucket) (orphaned, missing []string) {
	t.Helper()
	ctx := context.Background()
	m, err := manifest.Open(ctx, s, rid, manifest.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	st := m.State()
	m.Close()
	objs, err := objstore.ListAll(ctx, s, rid.SSTPrefix(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, o := range objs {
		have[o.Key] = true
		if id, ok := rid.ParseFileKey(o.Key); !ok || !st.Owns(id) {
			orphaned = append(orphaned, strings.TrimPrefix(o.Key, rid.SSTPrefix()))
		}
	}
	for id, f := range st.Files {
		if !have[rid.SSTKey(id)] || (f.Series && !have[rid.SeriesKey(id)]) {
			missing = append(missing, id)
		}
	}
	return orphaned, missing
}

func TestPickTWCS(t *testing.T) {
	h := int64(time.Hour)
	fs := map[string]manifest.FileMeta{}
	add := func(id string, lo, hi int64) { fs[id] = manifest.FileMeta{ID: id, MinTS: lo, MaxTS: hi} }
	for i := range 5 {
		add(fmt.Sprintf("a%d", i), 0, h/2) // window 0
	}
	for i := range 3 {
		add(fmt.Sprintf("b%d", i), 3*h, 3*h+h/2) // window 3: below the trigger
	}
	got := Pick(fs, Options{})
	if len(got) != 5 || got[0].ID != "a0" {
		t.Fatalf("picked %v", got)
	}
	add("b3", 3*h, 3*h+10)
	// Window 3 is the one being written: it needs 2 × Trigger files.
	if got = Pick(fs, Options{}); len(got) != 5 || got[0].ID[0] != 'a' {
		t.Fatalf("active window below its trigger: %v", got)
	}
	if got = Pick(fs, Options{ActiveTrigger: 4}); len(got) != 4 || got[0].ID[0] != 'b' {
		t.Fatalf("newest window first: %v", got)
	}
	if got = Pick(fs, Options{ActiveTrigger: 4, MaxInputs: 2}); len(got) != 2 || got[0].ID != "b0" || got[1].ID != "b1" {
		t.Fatalf("max inputs, oldest first: %v", got)
	}
	if got = Pick(fs, Options{Trigger: 6}); got != nil {
		t.Fatalf("no window has 6 files: %v", got)
	}
	if w := InferWindow([]manifest.FileMeta{{MinTS: 0, MaxTS: 3 * h}}); w != 12*time.Hour {
		t.Fatalf("inferred %v for 3 h files", w)
	}
	// One day: all 9 files are in the active window, over its trigger of 8.
	if got = Pick(fs, Options{Window: 24 * time.Hour}); len(got) != 9 {
		t.Fatalf("one day window: %v", got)
	}
	if got = Pick(fs, Options{Window: 24 * time.Hour, ActiveTrigger: 10}); got != nil {
		t.Fatalf("active window under its trigger: %v", got)
	}
}

// Compaction never changes what scans return.
func TestCompactionPreservesScans(t *testing.T) {
	s0 := testseed.Seed(t)
	ctx := context.Background()
	for round := range 10 {
		sd := s0 + uint64(round)
		rng := rand.New(rand.NewPCG(sd, 3))
		st := objstoretest.Mem(t)
		r := openRegion(t, st)
		load(t, r, sd, 6+rng.IntN(6))
		reqs := []scan.Request{{}, {Start: 100, End: 200}, {Start: region.AllTime, End: region.AllTimeEnd, Tags: []row.Tag{{Name: "host", Value: "h3"}}}}
		var before [][]string
		for _, q := range reqs {
			l, err := scanLines(ctx, r, q)
			if err != nil {
				t.Fatal(err)
			}
			before = append(before, l)
		}
		for c := range 3 {
			fs := SortedFiles(r.Manifest().Files)
			if len(fs) < 2 {
				break
			}
			// Any subset is a valid job: pick a random contiguous one.
			i := rng.IntN(len(fs) - 1)
			in := fs[i : i+2+rng.IntN(len(fs)-i-1)]
			opts := Options{MaxOutputBytes: int64(1+rng.IntN(3)) * 4096, RowGroupRows: 32}
			res, err := NewJob(r, in, opts).Run(ctx)
			if err != nil {
				t.Fatalf("seed %d compaction %d: %v", sd, c, err)
			}
			if res.RowsOut > res.RowsIn {
				t.Fatalf("seed %d: %d rows out of %d in", sd, res.RowsOut, res.RowsIn)
			}
			checkRequired(t, r, in, res.Outputs)
			for k, q := range reqs {
				l, err := scanLines(ctx, r, q)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(l, before[k]) {
					t.Fatalf("seed %d compaction %d of %d files changed scan %d:\n%d rows, want %d", sd, c, len(in), k, len(l), len(before[k]))
				}
			}
		}
		if o, m := orphans(t, st); len(o)+len(m) > 0 {
			t.Fatalf("seed %d: orphans %v missing %v", sd, o, m)
		}
		if len(r.Manifest().Pending) != 0 {
			t.Fatalf("seed %d: markers left: %v", sd, r.Manifest().Pending)
		}
		if err := r.Close(ctx, region.CloseOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// checkRequired: an output's field column is required exactly where every
// input has the field in every put; v (in every point load writes) always is.
func checkRequired(t *testing.T, r *region.Region, in, out []manifest.FileMeta) {
	t.Helper()
	ctx := context.Background()
	open := func(fs []manifest.FileMeta) []*sst.Reader {
		var rs []*sst.Reader
		for _, f := range fs {
			rd, err := r.OpenSST(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, rd)
		}
		return rs
	}
	ins := open(in)
	for i, o := range open(out) {
		for _, f := range r.Schema().Fields() {
			want := true
			for _, rd := range ins {
				want = want && rd.NullFree(f.Name)
			}
			if got := o.Required(f.Name); got != want || f.Name == "v" && !got {
				t.Fatalf("output %s: field %s required %v, want %v", out[i].ID, f.Name, got, want)
			}
		}
	}
}

// The GreptimeDB scenario, inverted: a job paused after its outputs are
// uploaded and before its commit is cancelled; when the cancellation is
// reported, every output is deleted or named by a pending marker in the
// persisted manifest.
func TestCancelAfterUploadBeforeCommitLeavesNoOrphan(t *testing.T) {
	for _, failDelete := range []bool{false, true} {
		t.Run(fmt.Sprintf("delete-fails=%v", failDelete), func(t *testing.T) {
			ctx := context.Background()
			inner := objstoretest.Mem(t)
			fs := faultstore.New(inner)
			r := openRegion(t, fs)
			defer func() { _ = r.Close(ctx, region.CloseOptions{}) }()
			load(t, r, 42, 5)
			before, _ := scanLines(ctx, r, scan.Request{})
			paused := make(chan struct{})
			job := NewJob(r, SortedFiles(r.Manifest().Files), Options{MaxOutputBytes: 8192, OnStage: func(ctx context.Context, s Stage) {
				if s == StageUploaded {
					close(paused)
					<-ctx.Done() // hold the job here until it is cancelled
				}
			}})
			if failDelete {
				fs.AddRule(faultstore.Rule{Match: faultstore.OnOp(objstore.OpDelete), N: 1, Action: faultstore.Fail})
			}
			errc := make(chan error, 1)
			go func() { _, err := job.Run(ctx); errc <- err }()
			<-paused
			outs := sstIDs(t, inner)
			if err := job.Cancel(); err != nil {
				t.Fatalf("cancel: %v", err)
			}
			// Reported: check the persisted state now.
			if o, m := orphans(t, inner); len(o)+len(m) > 0 {
				t.Fatalf("after cancel: orphans %v, missing %v", o, m)
			}
			if err := <-errc; !errors.Is(err, ErrCancelled) {
				t.Fatalf("run: %v", err)
			}
			m, _ := manifest.Open(ctx, inner, rid, manifest.Options{ReadOnly: true})
			st := m.State()
			m.Close()
			left := sstIDs(t, inner)
			newOuts := 0
			for id := range outs {
				if _, live := st.Files[id]; !live {
					newOuts++
				}
			}
			if newOuts == 0 {
				t.Fatal("the job had uploaded nothing when paused")
			}
			if !failDelete && (len(st.Pending) != 0 || len(left) != len(st.Files)) {
				t.Fatalf("clean cancel left %d markers, %d objects for %d files", len(st.Pending), len(left), len(st.Files))
			}
			if failDelete && len(st.Pending[job.ID].FileIDs) == 0 {
				t.Fatal("with deletion failing, the marker must stay")
			}
			after, _ := scanLines(ctx, r, scan.Request{})
			if !slices.Equal(before, after) {
				t.Fatal("a cancelled compaction changed the data")
			}
			// Fast GC then leaves nothing but live files.
			if _, err := gc.Fast(ctx, r, gc.Options{}); err != nil {
				t.Fatal(err)
			}
			live := r.Manifest().Files
			for id := range sstIDs(t, inner) {
				if _, ok := live[id]; !ok {
					t.Fatalf("%s survives fast GC without being live", id)
				}
			}
			// After the commit started, cancel is too late and waits.
			var j2 *Job
			j2 = NewJob(r, SortedFiles(r.Manifest().Files), Options{OnStage: func(ctx context.Context, s Stage) {
				if s == StageCommitting {
					go func() { errc <- j2.Cancel() }()
				}
			}})
			if _, err := j2.Run(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; !errors.Is(err, ErrTooLate) {
				t.Fatalf("late cancel: %v", err)
			}
		})
	}
}

func sstIDs(t testing.TB, s objstore.Bucket) map[string]bool {
	objs, err := objstore.ListAll(context.Background(), s, rid.SSTPrefix(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, o := range objs {
		id, ok := rid.ParseFileKey(o.Key)
		if !ok {
			id = o.Key // not a file's: never live
		}
		out[id] = true
	}
	return out
}

// TestInputFailureMidEncodeLeavesNoOutput: the output streams to the store
// while it is encoded; an input read failing part-way through (the last
// but one read of the job, counted in a dry run of the same job) makes the
// job abandon an output it has begun to upload. No object lands, the
// marker is resolved, and the data is unchanged. On mem and MinIO.
func TestInputFailureMidEncodeLeavesNoOutput(t *testing.T) {
	old := sst.WholeFileLimit
	sst.WholeFileLimit = 1024 // inputs are read with ranged GETs while encoding
	t.Cleanup(func() { sst.WholeFileLimit = old })
	for _, bk := range []struct {
		name string
		open func(t *testing.T) objstore.Bucket
	}{
		{"mem", func(t *testing.T) objstore.Bucket { return objstoretest.Mem(t) }},
		{"minio", func(t *testing.T) objstore.Bucket {
			s, err := objstore.Open(context.Background(), objstoretest.MinIO(t).NewBucket(t), objstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
	} {
		t.Run(bk.name, func(t *testing.T) {
			ctx := context.Background()
			setup := func() (objstore.Bucket, *faultstore.Store, *region.Region) {
				inner := bk.open(t)
				fs := faultstore.New(inner)
				r := openRegion(t, fs)
				t.Cleanup(func() { _ = r.Close(ctx, region.CloseOptions{}) })
				load(t, r, 7, 6)
				return inner, fs, r
			}
			// Dry run: how many GETs the job makes.
			_, dryFS, dry := setup()
			var gets atomic.Int64
			dryFS.Hook = func(c faultstore.Call) {
				if c.Op == objstore.OpGet {
					gets.Add(1)
				}
			}
			if _, err := NewJob(dry, SortedFiles(dry.Manifest().Files), Options{}).Run(ctx); err != nil {
				t.Fatal(err)
			}
			if gets.Load() < 4 {
				t.Fatalf("the job made only %d GETs", gets.Load())
			}
			inner, fs, r := setup()
			before, _ := scanLines(ctx, r, scan.Request{})
			filesBefore := sstIDs(t, inner)
			fs.AddRule(faultstore.Rule{Match: faultstore.OnOp(objstore.OpGet), N: int(gets.Load()) - 1, Action: faultstore.Fail})
			_, err := NewJob(r, SortedFiles(r.Manifest().Files), Options{}).Run(ctx)
			if !errors.Is(err, faultstore.ErrInjected) {
				t.Fatalf("run: %v, want the injected read failure", err)
			}
			if got := sstIDs(t, inner); !maps.Equal(got, filesBefore) {
				t.Fatalf("objects after the failed job: %v, before: %v", got, filesBefore)
			}
			if o, m := orphans(t, inner); len(o)+len(m) > 0 {
				t.Fatalf("orphans %v, missing %v", o, m)
			}
			if p := r.Manifest().Pending; len(p) != 0 {
				t.Fatalf("markers left: %v", p)
			}
			after, _ := scanLines(ctx, r, scan.Request{})
			if !slices.Equal(before, after) {
				t.Fatal("a failed compaction changed the data")
			}
		})
	}
}

// TestJobWithNoOutputForgetsItsReservation: the first output is reserved
// while the inputs open, before the job knows whether it has any output.
// When every row is dropped (here, by a tombstone no other file needs), the
// commit removes the inputs and forgets the reservation: no marker is left
// in the persisted manifest and nothing is written.
func TestJobWithNoOutputForgetsItsReservation(t *testing.T) {
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	fs := faultstore.New(inner)
	var sstPuts atomic.Int64
	fs.Hook = func(c faultstore.Call) {
		if c.Op == objstore.OpPut && strings.HasPrefix(c.Key, rid.SSTPrefix()) {
			sstPuts.Add(1)
		}
	}
	r := openRegion(t, fs)
	defer func() { _ = r.Close(ctx, region.CloseOptions{}) }()
	host := []row.Tag{{Name: "host", Value: "h0"}}
	for f := range 2 {
		var pts []row.Point
		for ts := range 100 {
			pts = append(pts, row.Point{Tags: host, TS: int64(f*100 + ts), Fields: []row.Field{{Name: "v", Value: row.FloatValue(1)}}})
		}
		if _, err := r.Write(ctx, pts); err != nil {
			t.Fatal(err)
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Delete(ctx, host, 0, 1000); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	in := SortedFiles(r.Manifest().Files)
	flushed := sstPuts.Load()
	var stages []Stage
	res, err := NewJob(r, in, Options{OnStage: func(_ context.Context, s Stage) { stages = append(stages, s) }}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outputs) != 0 || res.RowsIn != 201 {
		t.Fatalf("result %+v", res)
	}
	if slices.Contains(stages, StageReserved) || sstPuts.Load() != flushed {
		t.Fatalf("stages %v, %d SST writes for no output", stages, sstPuts.Load()-flushed)
	}
	m, err := manifest.Open(ctx, inner, rid, manifest.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	st := m.State()
	m.Close()
	if len(st.Files) != 0 || len(st.Pending) != 0 || len(st.Removed) != len(in) {
		t.Fatalf("persisted: %d files, markers %v, %d removed", len(st.Files), st.Pending, len(st.Removed))
	}
	if lines, err := scanLines(ctx, r, scan.Request{}); err != nil || len(lines) != 0 {
		t.Fatalf("scan: %v, %v", lines, err)
	}
}

// Cancel is per region instance: closing an old instance of a region (the
// agent does when the region moved and came back) must not cancel the job
// of the instance open now, and cancelling the instance running the job
// does.
func TestCancelIsPerInstance(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	r := openRegion(t, s)
	defer func() { _ = r.Close(ctx, region.CloseOptions{}) }()
	load(t, r, 7, 3)
	other := openRegion(t, objstoretest.Mem(t)) // the same region id, another instance
	defer func() { _ = other.Close(ctx, region.CloseOptions{}) }()
	reached, release := make(chan struct{}), make(chan struct{})
	sched := NewScheduler(SchedulerOptions{Logger: quiet, Options: Options{OnStage: func(ctx context.Context, st Stage) {
		if st == StageReserved {
			close(reached)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
	}}})
	defer func() { _ = sched.Close() }()
	done := make(chan error, 1)
	go func() { _, err := sched.Compact(ctx, r, true); done <- err }()
	<-reached
	if running, err := sched.Cancel(other); running || err != nil {
		t.Fatalf("cancelling another instance stopped this one's job: running=%v err=%v", running, err)
	}
	if running, err := sched.Cancel(r); !running || err != nil {
		t.Fatalf("cancel of the instance running the job: running=%v err=%v", running, err)
	}
	close(release)
	if err := <-done; !errors.Is(err, ErrCancelled) {
		t.Fatalf("the job ended with %v, want ErrCancelled", err)
	}
}

// TestCompactionKeepsDecimals: an output holds a float field as decimals
// at the largest of its inputs' scales when every input that has the field
// holds it so and their mantissas stay under the limit there; as doubles
// otherwise. Every value reads back as it was written.
func TestCompactionKeepsDecimals(t *testing.T) {
	ctx := context.Background()
	r := openRegion(t, objstoretest.Mem(t))
	file := func(ts int64, fields ...row.Field) {
		t.Helper()
		p := row.Point{Tags: []row.Tag{{Name: "host", Value: "a"}}, TS: ts, Fields: fields}
		if _, err := r.Write(ctx, []row.Point{p}); err != nil {
			t.Fatal(err)
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	f := func(name string, v float64) row.Field { return row.Field{Name: name, Value: row.FloatValue(v)} }
	scale := func(m manifest.FileMeta, field string) int8 {
		t.Helper()
		rd, err := r.OpenSST(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		s, _, ok := rd.Decimals(field)
		if !ok {
			return decimal.None
		}
		return s
	}
	compact := func() manifest.FileMeta {
		t.Helper()
		before, err := scanLines(ctx, r, scan.Request{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := NewJob(r, SortedFiles(r.Manifest().Files), Options{MaxOutputBytes: 1 << 30}).Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		after, err := scanLines(ctx, r, scan.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(after, before) || len(res.Outputs) != 1 {
			t.Fatalf("compaction into %d files changed the rows:\n%q\nwant %q", len(res.Outputs), after, before)
		}
		return res.Outputs[0]
	}
	file(1, f("v", 2.5), f("w", 1.0/3))
	file(2, f("v", -7.125)) // scale 3, and no w
	file(3, f("v", 4))
	out := compact()
	if s := scale(out, "v"); s != 3 {
		t.Fatalf("v at scale %d, want 3", s)
	}
	if s := scale(out, "w"); s != decimal.None {
		t.Fatalf("w (1/3) at scale %d, want doubles", s)
	}
	file(4, f("v", 2e11)) // 2e14 at scale 3: under the limit
	if s := scale(compact(), "v"); s != 3 {
		t.Fatalf("v at scale %d, want 3", s)
	}
	file(5, f("v", 2e12)) // 2e15 at scale 3: over it
	if s := scale(compact(), "v"); s != decimal.None {
		t.Fatalf("v at scale %d, want doubles (a mantissa over the limit)", s)
	}
	file(6, f("v", 1.5)) // a doubles input keeps the output doubles
	if s := scale(compact(), "v"); s != decimal.None {
		t.Fatalf("v at scale %d, want doubles (an input of doubles)", s)
	}
}
