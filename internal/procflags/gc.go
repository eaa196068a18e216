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

// DefaultGCMinHeap is the heap target a server keeps however little is
// live (--gc-min-heap-bytes). Go's own floor is 4 MiB at GOGC 100, 2 MiB at
// 50: a datanode that hosts little and answers queries collected every
// few of them, and the collections were a sixth of its CPU
// (docs/design-decisions.md, "A floor under the GC target").
const DefaultGCMinHeap = 64 << 20

// maxFloorPercent bounds the percentage the floor sets. The percentage is
// set after a collection, from what it found live, and holds until the
// next one's finalizer runs: a heap that grows within one cycle from a few
// MiB to the floor would otherwise get a target of the floor times 17 for
// a moment. At 400 it is at most five times the floor (plus the stacks and
// globals times 4), and the floor holds from a fifth of it live up.
const maxFloorPercent = 400

// GC is a server's garbage collector settings.
type GC struct {
	Percent int   // GOGC
	MinHeap int64 // the heap target's floor, in bytes; 0: Go's own
}

// GCFlags adds --gogc and --gc-min-heap-bytes to fs.
func GCFlags(fs *pflag.FlagSet) *GC {
	g := &GC{}
	fs.IntVar(&g.Percent, "gogc", DefaultGOGC, "Go GC target percentage (the GOGC variable wins if set)")
	fs.Int64Var(&g.MinHeap, "gc-min-heap-bytes", DefaultGCMinHeap, "the least heap target the collector paces to, however little is live (up to 5 times what is live, and at least 16 MiB; 0: Go's own, 4 MiB at GOGC 100; ignored if the GOGC variable is set)")
	return g
}

// Set applies g to the process, unless the GOGC variable is set (which
// then decides alone, as Go reads it). With a floor, the target
// percentage is raised after each collection (once its finalizers run),
// up to maxFloorPercent, so that the next target is at least MinHeap
// bytes: Percent where what is live makes a larger target anyway.
func (g *GC) Set() error {
	if g.MinHeap < 0 || g.MinHeap > maxGCMinHeap {
		return usagef("--gc-min-heap-bytes %d: want 0 to %d", g.MinHeap, int64(maxGCMinHeap))
	}
	if os.Getenv("GOGC") != "" {
		return nil
	}
	gcFloor.set(g.Percent, g.MinHeap)
	return nil
}

// maxGCMinHeap bounds --gc-min-heap-bytes (1 TiB): the percentage's
// arithmetic stays within 64 bits.
const maxGCMinHeap = 1 << 40

// gcFloor keeps the heap target at a floor: a finalizer on an object
// nothing refers to runs once a collection has freed it (on the runtime's
// finalizer goroutine, after the sweep reaches it: a cycle may pass
// unseen), reads what the collection found live and sets the percentage
// the next target takes from it. The process keeps it for its life.
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
	debug.SetGCPercent(f.target(lastGC()))
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
	debug.SetGCPercent(f.target(lastGC()))
	f.arm()
}

// target is the percentage that puts the next heap target at the floor
// or above, given what the last collection found: live bytes of heap, and
// the stacks and globals it scanned (all 0 before one). Go's target is the
// larger of live + (live + stacks + globals) × p/100 and its heap minimum,
// 4 MiB × p/100; the least percentage that lifts either to the floor puts
// the target there, and maxFloorPercent bounds it.
func (f *floor) target(live, stacks, globals uint64) int {
	p := f.percent
	if f.min <= 0 || p < 0 {
		return p
	}
	m := uint64(f.min)
	need := ceilDiv(m*100, 4<<20)
	if scanned := live + stacks + globals; live > 0 && live < m {
		need = min(need, ceilDiv((m-live)*100, scanned))
	} else if live >= m {
		need = 0
	}
	return max(p, int(min(need, maxFloorPercent)))
}

func ceilDiv(a, b uint64) uint64 { return (a + b - 1) / b }

// lastGC is what the last collection found: the heap it marked live and
// the stacks and globals it scanned (0 before one).
func lastGC() (live, stacks, globals uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}
	metrics.Read(s)
	v := make([]uint64, len(s))
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	return v[0], v[1], v[2]
}
