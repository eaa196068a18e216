package rules_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/rules"
	"github.com/stratadb/strata/internal/server"
)

const goodRules = `groups:
  - name: g
    interval: 1s
    rules:
      - record: answer
        expr: vector(%s)
`

// badRules has an expression that does not parse on line 6.
const badRules = `groups:
  - name: broken
    interval: 1s
    rules:
      - record: half
        expr: sum(answer
`

func (n *node) reload() (int, string) {
	n.t.Helper()
	resp, err := http.Post(n.base+"/-/reload", "", nil)
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestBadRuleFileChangesNothing: a reload (POST /-/reload, or SIGHUP's
// ReloadRules) that finds a bad file is refused with the file, line and
// reason, and nothing of it applies, not even a good file's change beside
// it: the rules loaded keep evaluating. Fixed, the files load together. A
// bad file at start fails the start the same way.
func TestBadRuleFileChangesNothing(t *testing.T) {
	dir := rulesDir(t)
	good, bad := filepath.Join(dir, "good.yml"), filepath.Join(dir, "zbad.yml")
	writeFile(t, good, fmt.Sprintf(goodRules, "1"))
	n := start(t, t.TempDir(), objstoretest.Mem(t), rules.Options{Files: []string{filepath.Join(dir, "*.yml")}})
	evaluated := func(after time.Time) {
		t.Helper()
		clustertest.Until(t, 30*time.Second, "answer evaluated", func() (bool, string) {
			r := n.rules(nil)
			if len(r.Groups) != 1 || len(r.Groups[0].Rules) != 1 {
				return false, fmt.Sprintf("%+v", r)
			}
			rule := r.Groups[0].Rules[0]
			return rule.Health == "ok" && rule.LastEvaluation.After(after), fmt.Sprintf("%+v", rule)
		})
	}
	evaluated(time.Time{})

	writeFile(t, good, fmt.Sprintf(goodRules, "2"))
	writeFile(t, bad, badRules)
	code, body := n.reload()
	if code != http.StatusInternalServerError || !contains(body, bad+": 6:", `group "broken", rule 1, "half": could not parse expression`, "nothing of them applied") {
		t.Fatalf("reload with a bad file: %d %s", code, body)
	}
	if err := n.ReloadRules(); !errors.Is(err, rules.ErrBadRuleFiles) || !contains(err.Error(), bad+": 6:") {
		t.Fatalf("ReloadRules (SIGHUP) with a bad file: %v", err)
	}
	refused := time.Now()
	evaluated(refused)
	r := n.rules(nil)
	if q := r.Groups[0].Rules[0].Query; len(r.Groups) != 1 || q != "vector(1)" {
		t.Fatalf("after a refused reload: %+v", r)
	}

	writeFile(t, bad, fmt.Sprintf(goodRules, "3"))
	if code, body := n.reload(); code != http.StatusOK {
		t.Fatalf("reload of good files: %d %s", code, body)
	}
	r = n.rules(nil)
	if len(r.Groups) != 2 || r.Groups[0].File != good || r.Groups[0].Rules[0].Query != "vector(2)" || r.Groups[1].File != bad || r.Groups[1].Rules[0].Query != "vector(3)" {
		t.Fatalf("after reload: %+v", r)
	}

	for _, q := range []url.Values{{"file[]": {good}}, {"rule_group[]": {"g"}, "file[]": {bad}}} {
		if r := n.rules(q); len(r.Groups) != 1 || r.Groups[0].File != q["file[]"][0] {
			t.Errorf("rules %v: %+v", q, r)
		}
	}

	// At start: a bad file, and a file that is not there.
	for _, files := range [][]string{{bad + "x"}, {good, filepath.Join(dir, "missing.yml")}} {
		writeFile(t, bad+"x", badRules)
		s, err := server.Start(context.Background(), server.Config{DataDir: t.TempDir(), Bucket: objstoretest.Mem(t), Standalone: true,
			HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler), Rules: rules.Options{Files: files}})
		if err == nil {
			_ = s.Shutdown(context.Background())
			t.Fatalf("started with rule files %v", files)
		}
		if !errors.Is(err, rules.ErrBadRuleFiles) || !contains(err.Error(), files[len(files)-1]) {
			t.Errorf("start with rule files %v: %v", files, err)
		}
		t.Logf("start with rule files %v: %v", files, err)
	}
}
