package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// promValue is the value of an instant query's single sample (false if
// it answered none).
func promValue(t *testing.T, base, query string) (string, bool) {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("query %s: %v: %s", query, err, b)
	}
	if len(out.Data.Result) != 1 {
		return "", false
	}
	v, _ := out.Data.Result[0].Value[1].(string)
	return v, true
}

// TestRulesLoadListDeleteOnAStandalone loads rules into a standalone's
// etcd with the CLI: they are evaluated there; a bad file is refused with
// its file, line and reason, and changes nothing; delete stops them.
func TestRulesLoadListDeleteOnAStandalone(t *testing.T) {
	p := start(t, t.TempDir())
	dir := t.TempDir()
	good := filepath.Join(dir, "team-a.rules.yml")
	if err := os.WriteFile(good, []byte(`groups:
  - name: fast
    interval: 1s
    rules:
      - record: e2e:one
        expr: vector(1)
      - alert: AlwaysOn
        expr: vector(1)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	meta := []string{"--metasrv", p.grpc}
	out, errs, code := p.cli(t, append([]string{"rules", "load", good}, meta...)...)
	if code != 0 || !strings.Contains(out, "loaded team-a.rules/fast: 1 recording, 1 alerting rules") {
		t.Fatalf("rules load: exit %d: %s%s", code, out, errs)
	}
	// Evaluated by the standalone (its one datanode).
	deadline := time.Now().Add(60 * time.Second)
	for {
		if v, ok := promValue(t, p.http, "e2e:one"); ok && v == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("e2e:one not recorded in 60s\n%s", p.logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	out, errs, code = p.cli(t, append([]string{"rules", "list"}, meta...)...)
	if code != 0 || !strings.Contains(out, "team-a.rules") || !strings.Contains(out, "standalone") {
		t.Fatalf("rules list: exit %d: %s%s", code, out, errs)
	}

	// A bad file: refused with file, line and reason; nothing changed.
	bad := filepath.Join(dir, "bad.yml")
	if err := os.WriteFile(bad, []byte(`groups:
  - name: broken
    rules:
      - record: half
        expr: sum(rate(x[5m])
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code = p.cli(t, append([]string{"rules", "load", "--namespace", "team-a.rules", bad}, meta...)...)
	if code != exitUsage || !strings.Contains(errs, bad+": 5:15:") || !strings.Contains(errs, "unclosed left parenthesis") || !strings.Contains(errs, "nothing of them applied") {
		t.Fatalf("bad rules load: exit %d (want %d): %s%s", code, exitUsage, out, errs)
	}
	out, _, _ = p.cli(t, append([]string{"rules", "list", "-o", "yaml"}, meta...)...)
	if !strings.Contains(out, "e2e:one") || strings.Contains(out, "broken") {
		t.Fatalf("the bad file changed the rules:\n%s", out)
	}

	out, errs, code = p.cli(t, append([]string{"rules", "delete", "team-a.rules", "fast"}, meta...)...)
	if code != 0 || !strings.Contains(out, "deleted 1 group") {
		t.Fatalf("rules delete: exit %d: %s%s", code, out, errs)
	}
	_, _, code = p.cli(t, append([]string{"rules", "delete", "team-a.rules"}, meta...)...)
	if code != exitNotFound {
		t.Fatalf("deleting a namespace not there: exit %d, want %d", code, exitNotFound)
	}
	// No longer evaluated: /api/v1/rules lists no group.
	deadline = time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.http + "/api/v1/rules")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `"fast"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group still evaluated 30s after its deletion: %s", b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
