package compact

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stratadb/strata/internal/gc"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/testseed"
)

// clone copies every object of src into a new in-memory bucket.
func clone(t testing.TB, src objstore.Bucket) objstore.Bucket {
	t.Helper()
	ctx := context.Background()
	dst := objstoretest.Mem(t)
	objs, err := objstore.ListAll(ctx, src, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		data, err := src.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		if err := dst.Put(ctx, o.Key, data); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

type campaign struct {
	runs, orphans, missing, mismatched int
}

// TestFaultCampaign compacts seeded random regions with a fault at every
// object-store call index of the compaction, of every kind (crash, crash
// after the call took effect, failure before or after the call, transient
// failure), each combined with a cancellation at a random stage. After each
// run the region is reopened over the surviving objects and must have zero
// unowned SSTs, nothing but live SSTs in a full listing once fast GC has
// run, zero live files missing, and every row with its latest value.
func TestFaultCampaign(t *testing.T) {
	s0 := testseed.Seed(t)
	ctx := context.Background()
	// At least 12 rounds, and more until 1000 runs (a round's runs depend
	// on its seeded workload).
	rounds, minRuns := 12, 1000
	if testing.Short() {
		rounds, minRuns = 2, 0
	}
	actions := []faultstore.Action{faultstore.Crash, faultstore.CrashAfter, faultstore.Fail, faultstore.FailAfter, faultstore.FailTransient}
	var c campaign
	for round := 0; round < rounds || c.runs < minRuns; round++ {
		if round == 10*rounds {
			t.Fatalf("only %d runs in %d rounds", c.runs, round)
		}
		sd := s0 + uint64(round)
		rng := rand.New(rand.NewPCG(sd, 5))
		base := objstoretest.Mem(t)
		r := openRegion(t, base)
		load(t, r, sd, 5+rng.IntN(4))
		want, err := scanLines(ctx, r, scan.Request{})
		if err != nil {
			t.Fatal(err)
		}
		opts := Options{MaxOutputBytes: int64(2+rng.IntN(4)) * 4096, RowGroupRows: 32}
		if err := r.Close(ctx, region.CloseOptions{}); err != nil {
			t.Fatal(err)
		}

		// A clean run counts the compaction's calls.
		calls := func() int {
			st := clone(t, base)
			fs := faultstore.New(st)
			r := openRegion(t, objstoretest.Fast(fs))
			defer func() { _ = r.Close(ctx, region.CloseOptions{}) }()
			before := fs.Calls()
			if _, err := NewJob(r, SortedFiles(r.Manifest().Files), opts).Run(ctx); err != nil {
				t.Fatalf("seed %d: clean compaction: %v", sd, err)
			}
			return fs.Calls() - before
		}()
		for n := 1; n <= calls; n++ {
			for _, a := range actions {
				cancelAt := Stage(rng.IntN(4)) // StageCommitting+1 means never
				c.runs++
				st := clone(t, base)
				fs := faultstore.New(st)
				r := openRegion(t, objstoretest.Fast(fs))
				fs.AddRule(faultstore.Rule{N: n, Action: a})
				var job *Job
				o := opts
				o.OnStage = func(jctx context.Context, s Stage) {
					if s == cancelAt {
						go func() { _ = job.Cancel() }()
						if s != StageCommitting {
							<-jctx.Done()
						}
					}
				}
				job = NewJob(r, SortedFiles(r.Manifest().Files), o)
				_, err := job.Run(ctx)
				if err != nil && !errors.Is(err, ErrCancelled) && fs.Fired() == nil {
					t.Fatalf("seed %d: %s at call %d: error without a fault: %v", sd, a, n, err)
				}
				if err := r.Close(ctx, region.CloseOptions{}); err != nil {
					t.Fatal(err)
				}
				// "Restart": reopen over what the store holds.
				o2, m2 := orphans(t, st)
				c.orphans += len(o2)
				c.missing += len(m2)
				r2 := reopenAfterCrash(t, st)
				// Fast GC (no LIST) must then leave only live files: an
				// independent full listing finds nothing else.
				if _, err := gc.Fast(ctx, r2, gc.Options{Lingering: -1}); err != nil {
					t.Fatalf("seed %d: %s at call %d: fast GC: %v", sd, a, n, err)
				}
				live := r2.Manifest().Files
				for id := range sstIDs(t, st) {
					if _, ok := live[id]; !ok {
						c.orphans++
						t.Errorf("seed %d: %s at call %d, cancel at %v: %s survives fast GC without being live", sd, a, n, cancelAt, id)
					}
				}
				got, err := scanLines(ctx, r2, scan.Request{})
				if err != nil || !slices.Equal(got, want) {
					c.mismatched++
					t.Errorf("seed %d: %s at call %d, cancel at %v: reopened region differs (%v): %d rows, want %d", sd, a, n, cancelAt, err, len(got), len(want))
				}
				if len(o2)+len(m2) > 0 {
					t.Errorf("seed %d: %s at call %d, cancel at %v (faults %v): orphans %v, missing %v", sd, a, n, cancelAt, fs.Fired(), o2, m2)
				}
				if err := r2.Close(ctx, region.CloseOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		t.Logf("round %d: %d store calls per compaction", round, calls)
	}
	t.Logf("fault campaign: runs=%d orphans=%d missing=%d mismatched=%d", c.runs, c.orphans, c.missing, c.mismatched)
	fmt.Printf("fault campaign: runs=%d orphans=%d missing=%d mismatched=%d\n", c.runs, c.orphans, c.missing, c.mismatched)
}
