package procflags

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

// The percentage the floor picks puts Go's next heap target (the larger
// of live × (1 + p/100) and 4 MiB × p/100) at the floor while little is
// live, and leaves --gogc alone once what is live reaches past it.
func TestGCFloorTarget(t *testing.T) {
	const mib = 1 << 20
	goal := func(live uint64, p int) uint64 {
		if live == 0 {
			return 4 * mib * uint64(p) / 100
		}
		return max(live+live*uint64(p)/100, 4*mib*uint64(p)/100)
	}
	f := floor{percent: 50, min: 64 * mib}
	for _, live := range []uint64{0, 100 << 10, mib, 3 * mib, 4 * mib, 10 * mib, 40 * mib} {
		p := f.target(live)
		if g := goal(live, p); g < 64*mib || g > 65*mib {
			t.Errorf("live %d: percentage %d, target %d MiB, want 64", live, p, g/mib)
		}
	}
	for _, live := range []uint64{43 * mib, 64 * mib, 1 << 30} {
		if p := f.target(live); p != 50 {
			t.Errorf("live %d MiB: percentage %d, want --gogc's 50", live/mib, p)
		}
	}
	if p := (&floor{percent: 50}).target(mib); p != 50 {
		t.Errorf("no floor: percentage %d", p)
	}
	if p := (&floor{percent: -1, min: 64 * mib}).target(mib); p != -1 {
		t.Errorf("GC off: percentage %d", p)
	}
}

// A process with little live collects once per floor's worth of garbage,
// not once per Go's 2 MiB at GOGC 50; the GOGC variable wins over both.
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
	if without < 8 || with > 1 {
		t.Errorf("collections: %d without the floor (want at least 8), %d with it (want at most 1)", without, with)
	}

	gcFloor.set(50, 0)
	t.Setenv("GOGC", "77")
	(&GC{Percent: 30, MinHeap: 128 << 20}).Set()
	if p := debug.SetGCPercent(50); p != 50 || gcFloor.min != 0 {
		t.Errorf("with GOGC set, --gogc 30 and a floor changed the percentage to %d (floor %d)", p, gcFloor.min)
	}
}
