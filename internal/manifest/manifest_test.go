package manifest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/testseed"
)

var region = layout.RegionID{Table: 7, Region: 3}

func fixedClock() func() time.Time {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time { t = t.Add(time.Second); return t }
}

func mustOpen(t testing.TB, b objstore.Bucket, opts Options) *Manifest {
	t.Helper()
	m, err := Open(context.Background(), b, region, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func stateJSON(s *State) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func keys(t testing.TB, b objstore.Bucket) []string {
	objs, err := objstore.ListAll(context.Background(), b, region.Prefix(), 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, strings.TrimPrefix(o.Key, region.ManifestPrefix()))
	}
	return out
}

func TestCommitCheckpointRecover(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	m := mustOpen(t, b, Options{Create: true, CheckpointDistance: 10, Now: fixedClock()})
	views := map[string]*State{} // View()s taken along the way, and how each looked
	for i := range 24 {
		v := m.View()
		views[stateJSON(v)] = v
		id := fmt.Sprintf("f%03d", i)
		job := "job-" + id
		if _, err := m.Commit(ctx, Action{Pending: &PendingOutputs{JobID: job, FileIDs: []string{id}, Epoch: 1}}); err != nil {
			t.Fatal(err)
		}
		e := &Edit{Add: []FileMeta{{ID: id, Rows: int64(i)}}, Resolves: job, FlushedSeq: uint64(i + 1)}
		if i > 0 {
			e.Remove = []string{fmt.Sprintf("f%03d", i-1)}
		}
		if _, err := m.Commit(ctx, Action{Edit: e}); err != nil {
			t.Fatal(err)
		}
	}
	// A commit publishes a new state: the views taken before are as they
	// were (View hands out the state itself, which scans read unlocked).
	for was, v := range views {
		if now := stateJSON(v); now != was {
			t.Fatalf("a state View returned changed after commits:\n%s\nwas\n%s", now, was)
		}
	}
	want := m.State()
	if stateJSON(m.View()) != stateJSON(want) {
		t.Fatal("View and State differ")
	}
	if want.Version != 49 || len(want.Files) != 1 || len(want.Removed) != 23 || len(want.Pending) != 0 || want.FlushedSeq != 24 {
		t.Fatalf("state after commits: version %d files %d removed %d pending %d flushed %d",
			want.Version, len(want.Files), len(want.Removed), len(want.Pending), want.FlushedSeq)
	}
	if r := want.Removed["f000"]; !r.RemovedAt.Equal(time.Date(2026, 1, 1, 0, 0, 5, 0, time.UTC)) {
		t.Fatalf("f000 removed at %v, want the time of the delta that removed it", r.RemovedAt)
	}
	// Only the latest checkpoint (40) and deltas from 40 on remain.
	got := strings.Join(keys(t, b), " ")
	wantKeys := fmt.Sprintf("%020d.checkpoint", 40)
	for v := 40; v <= 49; v++ {
		wantKeys += fmt.Sprintf(" %020d.json", v)
	}
	if got != wantKeys {
		t.Fatalf("manifest objects:\n%s\nwant\n%s", got, wantKeys)
	}
	ro := mustOpen(t, b, Options{ReadOnly: true})
	if stateJSON(ro.State()) != stateJSON(want) {
		t.Fatalf("recovered state differs:\n%s\nwant\n%s", stateJSON(ro.State()), stateJSON(want))
	}
	// A new owner bumps the epoch.
	m2 := mustOpen(t, b, Options{})
	if s := m2.State(); s.Epoch != want.Epoch+1 || s.Version != 50 {
		t.Fatalf("new owner: epoch %d version %d", s.Epoch, s.Version)
	}
}

func TestOpenMissingRegion(t *testing.T) {
	if _, err := Open(context.Background(), objstoretest.Mem(t), region, Options{}); !errors.Is(err, ErrRegionNotFound) {
		t.Fatalf("want ErrRegionNotFound, got %v", err)
	}
}

func TestInvalidActionsWriteNothing(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	m := mustOpen(t, b, Options{Create: true})
	before := keys(t, b)
	for name, a := range map[string][]Action{
		"remove unknown":      {{Edit: &Edit{Remove: []string{"nope"}}}},
		"resolve unknown":     {{Resolve: &ResolvePending{JobID: "nope"}}},
		"add unreserved":      {{Pending: &PendingOutputs{JobID: "j", FileIDs: []string{"a"}}}, {Edit: &Edit{Add: []FileMeta{{ID: "b"}}, Resolves: "j"}}},
		"two kinds":           {{Edit: &Edit{}, Resolve: &ResolvePending{JobID: "j"}}},
		"epoch backwards":     {{Epoch: &WriterEpoch{Epoch: 1}}},
		"purge non-removed":   {{Purge: &GCPurge{Files: []string{"x"}}}},
		"flushed seq back":    {{Edit: &Edit{FlushedSeq: 5}}, {Edit: &Edit{FlushedSeq: 4}}},
		"schema not advanced": {{Schema: &SchemaChange{Schema: schema.Persisted{Version: 0}}}},
		"sealed not a fence":  {{Fences: &WALFences{Segments: []uint64{3}, Sealed: 4}}},
	} {
		if _, err := m.Commit(ctx, a...); !errors.Is(err, ErrInvalidAction) {
			t.Errorf("%s: want ErrInvalidAction, got %v", name, err)
		}
	}
	if after := keys(t, b); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("invalid commits wrote objects: %v -> %v", before, after)
	}
	if v := m.State().Version; v != 1 {
		t.Fatalf("version %d after invalid commits, want 1", v)
	}
}

func TestUnusedReservationsStayPending(t *testing.T) {
	ctx := context.Background()
	m := mustOpen(t, objstoretest.Mem(t), Options{Create: true})
	if _, err := m.Commit(ctx, Action{Pending: &PendingOutputs{JobID: "j", FileIDs: []string{"a", "b"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Commit(ctx, Action{Edit: &Edit{Add: []FileMeta{{ID: "a"}}, Resolves: "j"}}); err != nil {
		t.Fatal(err)
	}
	p, ok := m.State().Pending["j"]
	if !ok || strings.Join(p.FileIDs, ",") != "b" {
		t.Fatalf("pending after partial edit = %+v, want b still reserved", p)
	}
}

func TestCorruptionIsReported(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) objstore.Bucket {
		b := objstoretest.Mem(t)
		m := mustOpen(t, b, Options{Create: true, CheckpointDistance: 5})
		for i := range 7 {
			if _, err := m.Commit(ctx, Action{Edit: &Edit{FlushedSeq: uint64(i + 1)}}); err != nil {
				t.Fatal(err)
			}
		}
		return b // checkpoint 5, deltas 5..8
	}
	cases := []struct {
		name, key string
		mutate    func([]byte) []byte
		want      error
	}{
		{"truncated delta", region.DeltaKey(7), func(d []byte) []byte { return d[:len(d)/2] }, ErrCorrupt},
		{"flipped delta", region.DeltaKey(7), func(d []byte) []byte {
			return []byte(strings.Replace(string(d), `"flushed_seq":6`, `"flushed_seq":9`, 1))
		}, ErrCorrupt},
		{"truncated checkpoint", region.CheckpointKey(5), func(d []byte) []byte { return d[:10] }, ErrCorrupt},
		{"empty checkpoint", region.CheckpointKey(5), func([]byte) []byte { return nil }, ErrCorrupt},
		{"gap", region.DeltaKey(6), nil, ErrGap},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := setup(t)
			if c.mutate == nil {
				_ = b.Delete(ctx, c.key)
			} else {
				d, err := b.Get(ctx, c.key)
				if err != nil {
					t.Fatal(err)
				}
				_ = b.Put(ctx, c.key, c.mutate(d))
			}
			_, err := Open(ctx, b, region, Options{})
			if !errors.Is(err, c.want) {
				t.Fatalf("want %v, got %v", c.want, err)
			}
			var ce *CorruptError
			if errors.As(err, &ce) && (ce.Key != c.key || ce.Region != region.String()) {
				t.Fatalf("corrupt error names %s/%s, want %s", ce.Region, ce.Key, c.key)
			}
		})
	}
}

func TestTwoWritersOneWins(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	a := mustOpen(t, b, Options{Create: true})
	bw := mustOpen(t, b, Options{}) // fences a by committing its epoch
	if _, err := a.Commit(ctx, Action{Edit: &Edit{FlushedSeq: 1}}); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("stale writer: want fence.ErrFenced, got %v", err)
	}
	if _, err := a.Commit(ctx, Action{Edit: &Edit{FlushedSeq: 1}}); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("fenced writer must stay fenced, got %v", err)
	}
	if _, err := bw.Commit(ctx, Action{Edit: &Edit{FlushedSeq: 2}}); err != nil {
		t.Fatalf("owner: %v", err)
	}
}

// A stalled writer whose next version was deleted by the new owner's
// checkpoint can create that version again; it must still learn it is fenced.
func TestStaleWriterAfterCheckpointIsFenced(t *testing.T) {
	ctx := context.Background()
	b := objstoretest.Mem(t)
	stale := mustOpen(t, b, Options{Create: true, CheckpointDistance: 10}) // at version 1
	if _, err := stale.Commit(ctx, Action{Edit: &Edit{FlushedSeq: 1}}); err != nil {
		t.Fatal(err)
	} // version 2
	owner := mustOpen(t, b, Options{CheckpointDistance: 10}) // version 3
	for i := range 30 {
		if _, err := owner.Commit(ctx, Action{Edit: &Edit{FlushedSeq: uint64(i + 2)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Attributes(ctx, region.DeltaKey(3)); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("setup: delta 3 should have been deleted by a checkpoint, got %v", err)
	}
	_, err := stale.Commit(ctx, Action{Edit: &Edit{FlushedSeq: 100}})
	if !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("stale writer re-created a deleted version: want fence.ErrFenced, got %v", err)
	}
	// The owner's view is unaffected.
	ro := mustOpen(t, b, Options{ReadOnly: true})
	if ro.State().FlushedSeq != 31 {
		t.Fatalf("flushed seq %d, want 31", ro.State().FlushedSeq)
	}
}

// randomActions returns a valid action list for s, advancing the model.
func randomActions(rng *rand.Rand, s *State, next *int) []Action {
	newID := func() string { *next++; return fmt.Sprintf("f%05d", *next) }
	switch rng.IntN(7) {
	case 0:
		job := newID()
		return []Action{{Pending: &PendingOutputs{JobID: "j" + job, FileIDs: []string{job, newID()}, Epoch: s.Epoch}}}
	case 1, 2:
		for job, p := range s.Pending {
			e := &Edit{Add: []FileMeta{{ID: p.FileIDs[0], Rows: rng.Int64N(1000)}}, Resolves: job, FlushedSeq: s.FlushedSeq + 1}
			for id := range s.Files {
				if rng.IntN(2) == 0 {
					e.Remove = append(e.Remove, id)
				}
			}
			return []Action{{Edit: e}}
		}
	case 3:
		for job := range s.Pending {
			return []Action{{Resolve: &ResolvePending{JobID: job}}}
		}
	case 4:
		var ids []string
		for id := range s.Removed {
			ids = append(ids, id)
		}
		if len(ids) > 0 {
			return []Action{{Purge: &GCPurge{Files: ids}}}
		}
	case 5:
		if rng.IntN(4) == 0 {
			return []Action{{Truncate: &Truncate{FlushedSeq: s.FlushedSeq + 10}}}
		}
		return []Action{{Schema: &SchemaChange{Schema: schema.Persisted{Version: s.Schema.Version + 1, Columns: append(s.Schema.Columns, schema.Column{Name: newID(), Role: "field", Type: "float64"})}}}}
	}
	return []Action{{Edit: &Edit{Add: []FileMeta{{ID: newID(), MinTS: rng.Int64N(100), MaxTS: 100 + rng.Int64N(100)}}}}}
}

// TestRandomizedCrashRecovery commits random action lists with a fault at
// every object-store call index in turn; reopening must always yield exactly
// the state of the last delta that landed.
func TestRandomizedCrashRecovery(t *testing.T) {
	seed := testseed.Seed(t)
	ctx := context.Background()
	const steps = 40
	// A clean run counts the calls one workload makes.
	cases := 0
	for round := range 8 {
		roundSeed := seed + uint64(round)
		probe := faultstore.New(objstoretest.Mem(t))
		runWorkload(t, ctx, objstoretest.Fast(probe), roundSeed, steps, nil)
		calls := probe.Calls()
		for n := 1; n <= calls; n++ {
			for _, action := range []faultstore.Action{faultstore.Fail, faultstore.FailAfter, faultstore.Crash, faultstore.CrashAfter, faultstore.FailTransient} {
				cases++
				inner := objstoretest.Mem(t)
				f := faultstore.New(inner, faultstore.Rule{N: n, Action: action})
				var lastAcked, attempted *State
				runWorkload(t, ctx, objstoretest.Fast(f), roundSeed, steps, func(acked, try *State) { lastAcked, attempted = acked, try })
				ro, err := Open(ctx, objstoretest.Fast(inner), region, Options{ReadOnly: true})
				if errors.Is(err, ErrRegionNotFound) && (lastAcked == nil || lastAcked.Version == 0) {
					continue
				}
				if err != nil {
					t.Fatalf("seed %d round %d fault %s at call %d: reopen: %v", seed, round, action, n, err)
				}
				got := ro.State()
				if lastAcked != nil && got.Version < lastAcked.Version {
					t.Fatalf("seed %d round %d fault %s at call %d: reopened at version %d, acknowledged %d", seed, round, action, n, got.Version, lastAcked.Version)
				}
				want := lastAcked
				if attempted != nil && got.Version == attempted.Version {
					want = attempted
					// Or the writer voided the version to settle the
					// failed create: the previous state, one version on.
					base := lastAcked
					if base == nil {
						base = newState()
					}
					void := base.Clone()
					void.Version = attempted.Version
					if stateJSON(got) == stateJSON(void) {
						want = void
					}
				}
				if want == nil || stateJSON(got) != stateJSON(want) {
					t.Fatalf("seed %d round %d fault %s at call %d (%v):\nreopened %s\nwant     %s", seed, round, action, n, f.Fired(), stateJSON(got), stateJSON(want))
				}
			}
		}
	}
	t.Logf("crash recovery: %d cases, all reopened to the last landed delta", cases)
}

// runWorkload opens a region and commits random actions until steps are done
// or a commit fails. onStop gets the last acknowledged state and the state
// the failing commit would have made.
func runWorkload(t *testing.T, ctx context.Context, b objstore.Bucket, seed uint64, steps int, onStop func(acked, attempted *State)) {
	rng := rand.New(rand.NewPCG(seed, 1))
	next := 0
	m, err := Open(ctx, b, region, Options{Create: true, CheckpointDistance: 4, Now: fixedClock()})
	if err != nil {
		if onStop != nil {
			// The region-creating epoch delta may have landed.
			created := newState()
			created.Version, created.Epoch = 1, 1
			onStop(nil, created)
			return
		}
		t.Fatalf("clean run: open: %v", err)
	}
	acked := m.State()
	for range steps {
		actions := randomActions(rng, acked, &next)
		try := acked.Clone()
		at := m.opts.Now().UTC()
		for _, a := range actions {
			if err := try.apply(a, at); err != nil {
				t.Fatalf("generator produced invalid action: %v", err)
			}
		}
		try.Version++
		m.opts.Now = func() time.Time { return at } // commit uses the same time
		if _, err := m.Commit(ctx, actions...); err != nil {
			if onStop == nil {
				t.Fatalf("clean run: commit: %v", err)
			}
			onStop(acked, try)
			return
		}
		m.opts.Now = fixedClockAfter(at)
		acked = m.State()
	}
	if onStop != nil {
		onStop(acked, nil)
	}
}

func fixedClockAfter(t0 time.Time) func() time.Time {
	t := t0
	return func() time.Time { t = t.Add(time.Second); return t }
}

// A commit whose delta landed but whose outcome could not be learned is
// ErrAmbiguous; the next commit learns that it landed and builds on it.
func TestAmbiguousCommitResolvedByNextCommit(t *testing.T) {
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	m := mustOpen(t, inner, Options{Create: true})
	f := faultstore.New(inner,
		faultstore.Rule{Match: faultstore.OnOp(objstore.OpPut), N: 1, Action: faultstore.FailAfter},
		faultstore.Rule{Match: faultstore.OnOp(objstore.OpGet), N: 1, Action: faultstore.Fail})
	m.store = objstoretest.Fast(f)
	if _, err := m.Commit(ctx, Action{Edit: &Edit{FlushedSeq: 5}}); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("want ErrAmbiguous, got %v", err)
	}
	v, err := m.Commit(ctx, Action{Edit: &Edit{FlushedSeq: 6}})
	if err != nil || v != 3 {
		t.Fatalf("next commit: version %d, %v; want 3 (the ambiguous one landed as 2)", v, err)
	}
	ro := mustOpen(t, inner, Options{ReadOnly: true})
	if s := ro.State(); s.Version != 3 || s.FlushedSeq != 6 {
		t.Fatalf("reopened at version %d flushed %d", s.Version, s.FlushedSeq)
	}
}

// A store failure on the ownership check after a delta landed is not
// fencing: the commit is ambiguous, and the next commit verifies again and
// goes on (found when MinIO was restarted under a running cluster).
func TestUnverifiedOwnershipIsAmbiguousNotFenced(t *testing.T) {
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	m := mustOpen(t, inner, Options{Create: true})
	f := faultstore.New(inner, faultstore.Rule{Match: faultstore.OnOp(objstore.OpHead), N: 1, Action: faultstore.Fail})
	m.store = objstoretest.Fast(f)
	if _, err := m.Commit(ctx, Action{Edit: &Edit{FlushedSeq: 5}}); !errors.Is(err, ErrAmbiguous) || errors.Is(err, fence.ErrFenced) {
		t.Fatalf("want ErrAmbiguous (not fenced), got %v", err)
	}
	if err := m.Settle(ctx); err != nil {
		t.Fatalf("settle once the store answers: %v", err)
	}
	if s := m.State(); s.FlushedSeq != 5 {
		t.Fatalf("after settling: flushed seq %d, want 5 (the delta landed)", s.FlushedSeq)
	}
	if _, err := m.Commit(ctx, Action{Edit: &Edit{FlushedSeq: 6}}); err != nil {
		t.Fatalf("next commit: %v", err)
	}
	ro := mustOpen(t, inner, Options{ReadOnly: true})
	if s := ro.State(); s.FlushedSeq != 6 {
		t.Fatalf("reopened: flushed %d", s.FlushedSeq)
	}
}

// lateStore fails the first create of key at the client and lands it
// later: before the next create (early) or never, so the write that is
// attempted after the writer's void claim must fail (late).
type lateStore struct {
	objstore.Bucket
	key   string
	early bool
	held  []byte
}

func (s *lateStore) CreateIfAbsent(ctx context.Context, key string, data []byte) error {
	if key == s.key && s.held == nil {
		s.held = slices.Clone(data)
		return &objstore.OpError{Op: objstore.OpPut, Key: key, Cause: errors.New("connection reset after the body was sent")}
	}
	if key == s.key && s.early {
		_ = s.Bucket.CreateIfAbsent(ctx, key, s.held) // the server commits it now
	}
	return s.Bucket.CreateIfAbsent(ctx, key, data)
}

// A create whose client failed after sending it may still land. The
// writer claims the version with a void delta, so a late landing can only
// be refused; one that landed before the claim is recognized as landed.
func TestLateLandingCreateIsSettledByAVoid(t *testing.T) {
	ctx := context.Background()
	for _, early := range []bool{false, true} {
		inner := objstoretest.Mem(t)
		m := mustOpen(t, inner, Options{Create: true})
		ls := &lateStore{Bucket: inner, key: region.DeltaKey(m.State().Version + 1), early: early}
		m.store = ls
		_, err := m.Commit(ctx, Action{Edit: &Edit{FlushedSeq: 7}})
		if early {
			if err != nil || m.State().FlushedSeq != 7 {
				t.Fatalf("landed before the claim: %v, flushed %d", err, m.State().FlushedSeq)
			}
		} else {
			if err == nil || errors.Is(err, ErrAmbiguous) || errors.Is(err, fence.ErrFenced) || m.State().FlushedSeq != 0 {
				t.Fatalf("voided: want a definite failure, got %v (flushed %d)", err, m.State().FlushedSeq)
			}
			// The held create lands late: refused, the void is there.
			if err := inner.CreateIfAbsent(ctx, ls.key, ls.held); !errors.Is(err, objstore.ErrPreconditionFailed) {
				t.Fatalf("a late landing after the void: %v", err)
			}
		}
		if _, err := m.Commit(ctx, Action{Edit: &Edit{FlushedSeq: 9}}); err != nil {
			t.Fatalf("early=%v: next commit: %v", early, err)
		}
		ro := mustOpen(t, inner, Options{ReadOnly: true})
		if s := ro.State(); s.FlushedSeq != 9 || s.Version != m.State().Version {
			t.Fatalf("early=%v: reopened %+v", early, s)
		}
	}
}

// heldStore blocks every CreateIfAbsent until release is closed, telling
// entered when one is waiting.
type heldStore struct {
	objstore.Bucket
	entered chan struct{}
	release chan struct{}
}

func (s *heldStore) CreateIfAbsent(ctx context.Context, key string, data []byte) error {
	s.entered <- struct{}{}
	<-s.release
	return s.Bucket.CreateIfAbsent(ctx, key, data)
}

// A commit holds the manifest's lock across its store write; View must
// not wait for it (a region takes a scan's snapshot under its own lock,
// so a slow store write stalled every scan and write of the region). View
// shows the state before the commit while it is in flight, and after it
// once it returns.
func TestViewDoesNotWaitForACommit(t *testing.T) {
	ctx := context.Background()
	inner := objstoretest.Mem(t)
	m := mustOpen(t, inner, Options{Create: true})
	held := &heldStore{Bucket: inner, entered: make(chan struct{}), release: make(chan struct{})}
	m.store = held
	before := m.View()
	done := make(chan error, 1)
	go func() {
		_, err := m.Commit(ctx, Action{Edit: &Edit{FlushedSeq: 7}})
		done <- err
	}()
	<-held.entered // the commit is in its store write, holding the lock
	viewed := make(chan *State, 1)
	go func() { viewed <- m.View() }()
	select {
	case s := <-viewed:
		if s != before || s.FlushedSeq != 0 {
			t.Fatalf("view during the commit: %+v, want the state before it", s)
		}
	case <-time.After(time.Minute):
		t.Fatal("View waited for the commit's store write")
	}
	close(held.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := m.View(); s.FlushedSeq != 7 {
		t.Fatalf("view after the commit: flushed %d, want 7", s.FlushedSeq)
	}
}
