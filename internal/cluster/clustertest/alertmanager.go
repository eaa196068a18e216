package clustertest

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// AlertmanagerVersion is the Alertmanager the tests run (scripts/test.sh
// installs it): the newest that `go install` builds, later ones embed a UI
// their module does not hold.
const AlertmanagerVersion = "v0.31.1"

// AlertmanagerBinary finds Alertmanager: $STRATA_ALERTMANAGER_BIN, then
// ~/.cache/strata/bin/alertmanager, then $PATH. Without one the test is
// skipped, unless STRATA_REQUIRE_ALERTMANAGER=1 (then it fails).
func AlertmanagerBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("STRATA_ALERTMANAGER_BIN"); p != "" {
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "strata", "bin", "alertmanager")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("alertmanager"); err == nil {
		return p
	}
	if os.Getenv("STRATA_REQUIRE_ALERTMANAGER") == "1" {
		t.Fatal("no Alertmanager binary (STRATA_REQUIRE_ALERTMANAGER=1)")
	}
	t.Skipf("no Alertmanager binary (set STRATA_ALERTMANAGER_BIN, or: GOBIN=~/.cache/strata/bin go install github.com/prometheus/alertmanager/cmd/alertmanager@%s)", AlertmanagerVersion)
	return ""
}

// Alertmanager runs a real Alertmanager (no cluster, one receiver that
// sends nothing) until the test ends, and returns its URL.
func Alertmanager(t testing.TB) string {
	t.Helper()
	bin := AlertmanagerBinary(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(conf, []byte("route:\n  receiver: none\nreceivers:\n  - name: none\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := FreeAddr(t)
	Run(t, "alertmanager", bin, "--config.file="+conf, "--storage.path="+dir, "--web.listen-address="+addr, "--cluster.listen-address=")
	base := "http://" + addr
	Until(t, time.Minute, "alertmanager ready", func() (bool, string) {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return base
}

// Until polls cond every 100 ms until it holds, failing the test with
// what the last call said after the deadline.
func Until(t testing.TB, deadline time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v; last: %s", what, deadline, last)
		}
		time.Sleep(100 * time.Millisecond) // polling a condition, with a deadline
	}
}
