// Package testseed gives Strata's randomized tests their seed, the one
// helper they share rather than each package keeping a copy.
package testseed

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Env names the variable that replays a run: STRATA_SEED=<seed>.
const Env = "STRATA_SEED"

// Seed returns the seed in Env, or a new one from the clock when Env is
// unset, and logs it so that a failed run can be replayed. A malformed Env
// fails the test.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(Env); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", Env, v, err)
		}
	}
	t.Logf("seed %d (replay with %s=%d)", seed, Env, seed)
	return seed
}
