package main

import (
	"strings"
	"testing"
	"time"
)

// bench ingest counts its rows back through the server's PromQL API: a
// server that stored them all passes; one that dropped them (here a
// table whose TTL expires every row, as a peer's retention would) fails
// the run, naming what it holds.
func TestBenchIngestVerifiesWhatTheServerStored(t *testing.T) {
	p := start(t, t.TempDir())
	recent := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	out, errOut, code := p.cli(t, "bench", "ingest", "--url", p.http, "--table", "kept", "--hosts", "7", "--rows", "103", "--batch", "10",
		"--workers", "2", "--start", recent, "--verify-timeout", "1m")
	if code != 0 || !strings.Contains(out, "verify:      series 70 expected, 70 stored; samples 1030 expected, 1030 stored: ok") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}

	if _, e, c := p.cli(t, "table", "create", "expired", "--ttl", "24h"); c != 0 {
		t.Fatalf("table create: exit %d: %s", c, e)
	}
	old := time.Now().Add(-30 * 24 * time.Hour).UTC().Format(time.RFC3339)
	out, errOut, code = p.cli(t, "bench", "ingest", "--url", p.http, "--table", "expired", "--hosts", "3", "--rows", "30", "--batch", "10",
		"--workers", "1", "--start", old, "--verify-timeout", "3s")
	if code == 0 || !strings.Contains(errOut, "stored 0 of 30 series and 0 of 300 samples") {
		t.Fatalf("rows the table's TTL dropped passed the check: exit %d\n%s\n%s", code, out, errOut)
	}
}
