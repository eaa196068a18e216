package benchutil

import (
	"os"
	"runtime/pprof"
	"testing"
)

// ProfileEnv names a file that StartProfile writes a CPU profile of the
// measured section to. Unlike go test -cpuprofile, it leaves out the
// benchmark's set-up (loading data, flushing), which often costs more
// than the operation measured.
const ProfileEnv = "STRATA_BENCH_CPUPROFILE"

// StartProfile starts a CPU profile when ProfileEnv is set and returns the
// function that stops it; otherwise it returns a no-op.
func StartProfile(b *testing.B) (stop func()) {
	path := os.Getenv(ProfileEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatalf("benchutil: cpu profile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatalf("benchutil: cpu profile: %v", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Errorf("benchutil: cpu profile: %v", err)
		}
	}
}
