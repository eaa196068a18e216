package procflags

import (
	"errors"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

const mib = 1 << 20

// goGoal is Go's next heap target (its runtime's GC pacer) at percentage p,
// the last collection having found live bytes of heap and scanned sg of
// stacks and globals: the larger of live + (live + sg) × p/100 and the
// heap minimum, 4 MiB × p/100.
func goGoal(live, sg uint64, p int) uint64 {
	return max(live+(live+sg)*uint64(p)/100, 4*mib*uint64(p)/100)
}

// The floor's percentage puts Go's next target at the floor once a fifth
// of it is live (stacks and globals counted), at five times what is live
// below that, and leaves --gogc alone once what is live makes a larger
// target.
func TestGCFloorTarget(t *testing.T) {
	f := floor{percent: 50, min: 64 * mib}
	for _, c := range []struct{ live, sg uint64 }{
		{13 * mib, 0}, {13 * mib, 8 * mib}, {13*mib + 12345, 3 * mib}, {20 * mib, 0}, {30*mib + 777, 5 * mib}, {40 * mib, mib},
	} {
		p := f.target(c.live, c.sg/2, c.sg-c.sg/2)
		if g := goGoal(c.live, c.sg, p); g < 64*mib || g > 64*mib+(c.live+c.sg)/100+1 {
			t.Errorf("live %d, stacks and globals %d: percentage %d, target %.3f MiB, want 64", c.live, c.sg, p, float64(g)/mib)
		}
	}
	// Little live: the percentage stops at maxFloorPercent.
	for _, c := range []struct{ live, sg uint64 }{{0, 0}, {100 << 10, mib}, {mib, 0}, {4 * mib, mib / 2}, {7*mib + 12345, 3 * mib}} {
		if p := f.target(c.live, c.sg, 0); p != maxFloorPercent {
			t.Errorf("live %d: percentage %d, want %d", c.live, p, maxFloorPercent)
		}
	}
	for _, live := range []uint64{43 * mib, 64 * mib, 1 << 30} {
		if p := f.target(live, mib, mib); p != 50 {
			t.Errorf("live %d MiB: percentage %d, want --gogc's 50", live/mib, p)
		}
	}
	if p := (&floor{percent: 50}).target(mib, 0, 0); p != 50 {
		t.Errorf("no floor: percentage %d", p)
	}
	if p := (&floor{percent: -1, min: 64 * mib}).target(mib, 0, 0); p != -1 {
		t.Errorf("GC off: percentage %d", p)
	}
}

func gogcPercent() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// A process with little live collects once per 16 MiB of garbage at
// least (maxFloorPercent of Go's 4 MiB minimum), not once per Go's 2 MiB
// at GOGC 50; the floor follows the live heap
// down after collections (its finalizer re-armed); the GOGC variable wins
// over both, and a floor out of bounds is a usage error.
func TestGCFloorCollectsLessOften(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer gcFloor.set(100, 0)
	cycles := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	var sink [][]byte
	churn := func() uint64 { // 48 MiB of garbage, 64 KiB at a time
		runtime.GC()
		c0 := cycles()
		for range 768 {
			sink = append(sink[:0], make([]byte, 64<<10))
		}
		return cycles() - c0
	}
	gcFloor.set(50, 0)
	without := churn()
	gcFloor.set(50, 128<<20)
	with := churn()
	t.Logf("collections over 48 MiB of garbage: %d at GOGC 50, %d with a 128 MiB floor", without, with)
	if without < 12 || with > 4 {
		t.Errorf("collections: %d without the floor (want at least 12), %d with it (want at most 4)", without, with)
	}

	// Much live: --gogc's 50. Let it go, and the collections' finalizer
	// raises the percentage again.
	held := make([][]byte, 100)
	for i := range held {
		held[i] = make([]byte, mib)
	}
	runtime.GC()
	gcFloor.set(50, 64*mib)
	if p := gogcPercent(); p != 50 {
		t.Fatalf("with 100 MiB live: percentage %d, want 50", p)
	}
	runtime.KeepAlive(held) // the last use: the next collections free it
	deadline := time.Now().Add(30 * time.Second)
	for gogcPercent() <= 50 {
		if time.Now().After(deadline) {
			t.Fatal("the percentage stayed at 50 for 30 s of collections after the live heap went")
		}
		runtime.GC() // each collection frees the last finalizer's object
		time.Sleep(10 * time.Millisecond)
	}

	gcFloor.set(50, 0)
	t.Setenv("GOGC", "77")
	if err := (&GC{Percent: 30, MinHeap: 128 << 20}).Set(); err != nil {
		t.Fatal(err)
	}
	if p := debug.SetGCPercent(50); p != 50 || gcFloor.min != 0 {
		t.Errorf("with GOGC set, --gogc 30 and a floor changed the percentage to %d (floor %d)", p, gcFloor.min)
	}
	for _, bad := range []int64{-1, maxGCMinHeap + 1} {
		var u UsageError
		if err := (&GC{Percent: 50, MinHeap: bad}).Set(); !errors.As(err, &u) {
			t.Errorf("--gc-min-heap-bytes %d: %v, want a usage error", bad, err)
		}
	}
}
