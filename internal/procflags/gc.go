package procflags

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"

	"github.com/spf13/pflag"
)

// DefaultGOGC is the servers' Go GC target percentage (--gogc): a heap
// grows to 1.5 times what is live between collections, not twice. At a
// million remote-written series it kept a standalone's peak RSS at 926 MiB
// instead of 1,183 MiB, for about a sixth more CPU
// (docs/design-decisions.md, "A lower GC target").
const DefaultGOGC = 50

// DefaultGCMinHeap is the heap a server lets grow before it collects,
// however little is live (--gc-min-heap-bytes). Go's own floor is 4 MiB
// at GOGC 100, 2 MiB at 50: a datanode that hosts little and answers
// queries collected every few of them, and the collections were a sixth
// of its CPU (docs/design-decisions.md, "A floor under the GC target").
const DefaultGCMinHeap = 64 << 20

// GC is a server's garbage collector settings.
type GC struct {
	Percent int   // GOGC
	MinHeap int64 // the heap target's floor, in bytes; 0: Go's own
}

// GCFlags adds --gogc and --gc-min-heap-bytes to fs.
func GCFlags(fs *pflag.FlagSet) *GC {
	g := &GC{}
	fs.IntVar(&g.Percent, "gogc", DefaultGOGC, "Go GC target percentage (the GOGC variable wins if set)")
	fs.Int64Var(&g.MinHeap, "gc-min-heap-bytes", DefaultGCMinHeap, "the heap may grow to this before a collection however little is live (0: Go's own floor, 4 MiB at GOGC 100; ignored if the GOGC variable is set)")
	return g
}

// Set applies g to the process, unless the GOGC variable is set (which
// then decides alone, as Go reads it). With a floor, the target
// percentage is raised after each collection so that the next one comes
// no sooner than at MinHeap bytes of heap: Percent where what is live
// makes a larger target anyway.
func (g *GC) Set() {
	if os.Getenv("GOGC") != "" {
		return
	}
	gcFloor.set(g.Percent, g.MinHeap)
}

// gcFloor keeps the heap target at a floor: a finalizer on an object
// nothing refers to runs after each collection, reads what it found live
// and sets the percentage the next target takes from it. It runs on the
// runtime's finalizer goroutine; the process keeps it for its life.
var gcFloor floor

type floor struct {
	mu      sync.Mutex
	percent int
	min     int64
	armed   bool
}

// gcTick is the object whose finalizer runs after a collection: more than
// 16 bytes, so that the allocator gives it a block of its own.
type gcTick struct{ _ [4]uintptr }

func (f *floor) set(percent int, minHeap int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.percent, f.min = percent, minHeap
	debug.SetGCPercent(f.target(liveHeap()))
	if minHeap > 0 && percent >= 0 && !f.armed {
		f.armed = true
		f.arm()
	}
}

func (f *floor) arm() { runtime.SetFinalizer(&gcTick{}, f.collected) }

// collected runs after a collection: the next target from what it found
// live, and the finalizer again for the next one (not once the floor is
// off).
func (f *floor) collected(*gcTick) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.min <= 0 || f.percent < 0 {
		f.armed = false
		return
	}
	debug.SetGCPercent(f.target(liveHeap()))
	f.arm()
}

// target is the percentage that makes the next heap target at least the
// floor, live bytes being live (0: none measured yet). Go's target is the
// larger of live × (1 + percentage/100) and its heap minimum, 4 MiB ×
// percentage/100; the least percentage that lifts either to the floor
// puts the target at the floor.
func (f *floor) target(live uint64) int {
	p := f.percent
	if f.min <= 0 || p < 0 {
		return p
	}
	need := int(uint64(f.min) * 100 / (4 << 20))
	if live > 0 {
		need = min(need, int(uint64(f.min)*100/live)-100)
	}
	return max(p, need)
}

// liveHeap is the heap the last collection marked live (0 before one).
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
