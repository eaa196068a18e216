package benchutil

import (
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"testing"
)

// ProfileEnv names a file that StartProfile writes a CPU profile of the
// measured section to. Unlike go test -cpuprofile, it leaves out the
// benchmark's set-up (loading data, flushing), which often costs more
// than the operation measured. A "%s" in it is replaced by the
// benchmark's name, for one file per sub-benchmark.
const ProfileEnv = "STRATA_BENCH_CPUPROFILE"

// TraceEnv names a file that StartProfile writes an execution trace of the
// measured section to (go tool trace).
const TraceEnv = "STRATA_BENCH_TRACE"

// StartProfile starts a CPU profile when ProfileEnv is set, and an
// execution trace when TraceEnv is, and returns the function that stops
// them; otherwise it returns a no-op.
func StartProfile(b *testing.B) (stop func()) {
	stopTrace := startTrace(b)
	path := os.Getenv(ProfileEnv)
	if path == "" {
		return stopTrace
	}
	// One file per (sub-)benchmark when the path asks for its name.
	path = strings.ReplaceAll(path, "%s", strings.ReplaceAll(b.Name(), "/", "_"))
	f, err := os.Create(path)
	if err != nil {
		b.Fatalf("benchutil: cpu profile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		b.Fatalf("benchutil: cpu profile: %v", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Errorf("benchutil: cpu profile: %v", err)
		}
		stopTrace()
	}
}

func startTrace(b *testing.B) (stop func()) {
	path := os.Getenv(TraceEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatalf("benchutil: trace: %v", err)
	}
	if err := trace.Start(f); err != nil {
		_ = f.Close()
		b.Fatalf("benchutil: trace: %v", err)
	}
	return func() {
		trace.Stop()
		if err := f.Close(); err != nil {
			b.Errorf("benchutil: trace: %v", err)
		}
	}
}
