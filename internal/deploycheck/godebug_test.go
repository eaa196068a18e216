package deploycheck

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// dockerfile is the image's Dockerfile, line by line.
func dockerfile(t *testing.T) []string {
	t.Helper()
	df, err := os.ReadFile("../../docker/strata.Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(df), "\n")
}

// imageGODEBUG is the GODEBUG the image sets (docker/strata.Dockerfile).
func imageGODEBUG(t *testing.T) string {
	t.Helper()
	for _, line := range dockerfile(t) {
		if v, ok := strings.CutPrefix(line, "ENV GODEBUG="); ok {
			return v
		}
	}
	t.Fatal("the Dockerfile sets no GODEBUG")
	return ""
}

// TestImageGODEBUGKeepsSysmonAwake: with the image's GODEBUG, the Go
// runtime's monitor thread (sysmon) of an idle process keeps waking (about
// every 10 ms) instead of sleeping until the next timer, which is what
// spares a server that goes from idle to busy the monitor's restart at a
// 20 µs poll (docs/configuration.md, "The runtime's monitor"). An idle
// child process counts its threads' context switches over a second (after
// a second to settle): with Go's defaults they are a few, with the image's
// setting a hundred or so.
// If a Go release gives the setting another meaning, this fails.
func TestImageGODEBUGKeepsSysmonAwake(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts context switches in /proc")
	}
	setting := imageGODEBUG(t)
	idle := func(godebug string) int {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestIdleChild$", "-test.v")
		cmd.Env = append(os.Environ(), "STRATA_IDLE_CHILD=1", "GODEBUG="+godebug)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child with GODEBUG=%q: %v\n%s", godebug, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(line, "idle switches: "); ok {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatalf("child with GODEBUG=%q said nothing:\n%s", godebug, out)
		return 0
	}
	deflt, image := idle(""), idle(setting)
	t.Logf("context switches in an idle second: %d with Go's defaults, %d with GODEBUG=%s", deflt, image, setting)
	if image < 50 || image < 2*deflt {
		t.Errorf("with GODEBUG=%s an idle process switched %d times in a second (%d without): its monitor slept", setting, image, deflt)
	}
}

// TestIdleChild is TestImageGODEBUGKeepsSysmonAwake's child: it idles a
// second (every goroutine asleep) and prints its threads' voluntary
// context switches meanwhile.
func TestIdleChild(t *testing.T) {
	if os.Getenv("STRATA_IDLE_CHILD") == "" {
		t.Skip("run by TestImageGODEBUGKeepsSysmonAwake")
	}
	// Memory returned to the system now, so that the scavenger does not
	// pace its work through the second measured; and a second to settle:
	// the start's work wakes the monitor, and without the setting it
	// polls at 20 µs for a while after. (Intervals measured, not waits for
	// a signal.)
	debug.FreeOSMemory()
	time.Sleep(time.Second)
	before := switches(t)
	time.Sleep(time.Second) // the idle interval measured
	fmt.Printf("idle switches: %d\n", switches(t)-before)
}

// switches sums the voluntary context switches of this process's threads.
func switches(t *testing.T) int {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range tasks {
		f, err := os.Open(p)
		if err != nil {
			continue // a thread that ended
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "voluntary_ctxt_switches:"); ok {
				k, _ := strconv.Atoi(strings.TrimSpace(v))
				n += k
			}
		}
		_ = f.Close() // read only
	}
	return n
}
