package cluster_test

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/cluster/clustertest"
)

// Rule evaluation in a cluster (docs/rules.md): rules loaded with the
// CLI are evaluated by one datanode at a time; when it dies (SIGKILL) or
// freezes (SIGSTOP), another takes the group over within the rules lease
// plus an interval, with no gap in the recorded series beyond that and a
// firing alert kept firing (its `for` state restored, no new pending
// period); a woken frozen evaluator does not evaluate again.

const (
	ruleInterval = time.Second
	ruleLease    = 4 * time.Second
	// ruleSlack is added to the bound (interval + lease) for a loaded
	// 2-core machine: process scheduling, etcd's lease expiry checks
	// (every 500 ms), the takeover's etcd round trips, the metrics
	// table's region reopening on another datanode.
	ruleSlack = 8 * time.Second
)

const heartbeatRules = `groups:
  - name: heartbeat
    interval: 1s
    rules:
      - record: rules_e2e:time
        expr: time()
      - alert: RulesE2EAlways
        expr: vector(1)
        for: 5s
        labels:
          severity: test
`

type ruleCluster struct {
	t    *testing.T
	meta *proc
	dns  map[string]*proc
	am   string
}

// startRuleCluster runs metasrv, three datanodes (lease 4 s, rules sent
// to Alertmanager am) and loads heartbeatRules with the CLI.
func startRuleCluster(t *testing.T, am string) *ruleCluster {
	etcd := freePort(t)
	store := "file://" + t.TempDir()
	rc := &ruleCluster{t: t, dns: map[string]*proc{}, am: am}
	rc.meta = start(t, "metasrv", "metasrv", "--data-dir", t.TempDir(), "--etcd-client-addr", etcd, "--grpc-addr", "127.0.0.1:0", "--store", store)
	for _, id := range []string{"dn1", "dn2", "dn3"} {
		args := []string{"--id", id, "--etcd-endpoints", "http://" + etcd, "--store", store,
			"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--lease", ruleLease.String(), "--heartbeat", "1s",
			"--metrics-regions", "3", "--log-level", "debug"}
		if am != "" {
			args = append(args, "--alertmanager-url", am)
		}
		rc.dns[id] = start(t, id, "datanode", args...)
	}
	if am != "" {
		rc.load("e2e.yml", heartbeatRules, "loaded e2e/heartbeat: 1 recording, 1 alerting rules")
	}
	return rc
}

// load loads a rule file named name with the CLI; its output must hold want.
func (rc *ruleCluster) load(name, content, want string) {
	file := filepath.Join(rc.t.TempDir(), name)
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		rc.t.Fatal(err)
	}
	if out, code := cli(rc.t, "rules", "load", file, "--metasrv", rc.meta.grpc); code != 0 || !strings.Contains(out, want) {
		rc.t.Fatalf("rules load: exit %d\n%s", code, out)
	}
}

// owner is the datanode `strata rules list` names as the group's
// evaluator ("" if none).
func (rc *ruleCluster) owner() string {
	out, code := cli(rc.t, "rules", "list", "-o", "csv", "--metasrv", rc.meta.grpc)
	if code != 0 {
		rc.t.Fatalf("rules list: exit %d\n%s", code, out)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(recs) != 2 || recs[1][1] != "heartbeat" {
		rc.t.Fatalf("rules list: %v\n%s", err, out)
	}
	if o := recs[1][5]; o != "(none)" {
		return o
	}
	return ""
}

type sample struct {
	t float64
	v float64
}

// series queries expr (a range selector) on a datanode and returns each
// series' samples, by its labels.
func series(t *testing.T, httpAddr, expr string) map[string][]sample {
	t.Helper()
	res, err := trySeries(httpAddr, expr)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// trySeries is series, with a failed query an error (while a region of
// the metrics table moves, a query may fail).
func trySeries(httpAddr, expr string) (map[string][]sample, error) {
	resp, err := http.Get("http://" + httpAddr + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("query %s: %s %s", expr, resp.Status, data)
	}
	var out struct {
		Data struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("query %s: %v: %s", expr, err, data)
	}
	res := map[string][]sample{}
	for _, r := range out.Data.Result {
		vals := r.Values
		if out.Data.ResultType == "vector" {
			vals = [][2]any{r.Value}
		}
		k := fmt.Sprint(r.Metric)
		for _, v := range vals {
			f, _ := strconv.ParseFloat(v[1].(string), 64)
			res[k] = append(res[k], sample{v[0].(float64), f})
		}
	}
	return res, nil
}

// only is the single series of m (failing otherwise).
func only(t *testing.T, what string, m map[string][]sample) []sample {
	t.Helper()
	if len(m) != 1 {
		t.Fatalf("%s: %d series, want 1: %v", what, len(m), m)
	}
	for _, s := range m {
		return s
	}
	return nil
}

// maxGap is the longest time between consecutive samples.
func maxGap(s []sample) (gap float64, at float64) {
	for i := 1; i < len(s); i++ {
		if d := s[i].t - s[i-1].t; d > gap {
			gap, at = d, s[i-1].t
		}
	}
	return gap, at
}

// metric reads one value of a datanode's /metrics (NaN if absent).
func metric(t *testing.T, httpAddr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return math.NaN()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`)
	m := re.FindSubmatch(b)
	if m == nil {
		return math.NaN()
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// amActive reports whether Alertmanager has RulesE2EAlways active, and
// since when.
func amActive(t *testing.T, am string) (bool, time.Time) {
	t.Helper()
	resp, err := http.Get(am + "/api/v2/alerts?filter=" + url.QueryEscape(`alertname="RulesE2EAlways"`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var alerts []struct {
		StartsAt time.Time `json:"startsAt"`
		Status   struct {
			State string `json:"state"`
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&alerts); err != nil {
		t.Fatal(err)
	}
	if len(alerts) != 1 || alerts[0].Status.State != "active" {
		return false, time.Time{}
	}
	return true, alerts[0].StartsAt
}

// firing waits until the alert fires and the group's evaluator has not
// changed for 3 leases (the first datanode up may take the group, then
// hand it to the one rendezvous hashing prefers once that one has been up
// for 2 leases), and returns the evaluator.
func (rc *ruleCluster) firing() string {
	t := rc.t
	dn1 := rc.dns["dn1"].http
	clustertest.Until(t, 2*time.Minute, "the alert firing", func() (bool, string) {
		s, err := trySeries(dn1, `ALERTS{alertname="RulesE2EAlways",alertstate="firing"}`)
		return err == nil && len(s) == 1, fmt.Sprint(s, err)
	})
	clustertest.Until(t, time.Minute, "Alertmanager receiving the alert", func() (bool, string) {
		ok, _ := amActive(t, rc.am)
		return ok, ""
	})
	var last string
	var since time.Time
	clustertest.Until(t, 2*time.Minute, "one evaluator for 3 leases", func() (bool, string) {
		o := rc.owner()
		if o != last || o == "" {
			last, since = o, time.Now()
		}
		return o != "" && time.Since(since) >= 3*ruleLease, last
	})
	return last
}

// failover stops the evaluator with sig and checks the takeover: another
// datanode evaluates within the bound; the recorded series and the firing
// alert have no gap beyond it; the alert never went pending again and
// kept its activeAt; Alertmanager kept it active from before.
func (rc *ruleCluster) failover(sig syscall.Signal) (old string, stoppedAt time.Time) {
	t := rc.t
	old = rc.firing()
	var live string
	for id := range rc.dns {
		if id != old {
			live = rc.dns[id].http
			break
		}
	}
	_, amSince := amActive(t, rc.am)
	forState := only(t, "ALERTS_FOR_STATE", series(t, live, `ALERTS_FOR_STATE{alertname="RulesE2EAlways"}`))[0].v
	stoppedAt = time.Now()
	rc.dns[old].signal(sig)
	t.Logf("%v sent to the evaluator %s", sig, old)

	bound := ruleInterval + ruleLease + ruleSlack
	var resumed float64
	clustertest.Until(t, 2*time.Minute, "evaluation resumed on another datanode", func() (bool, string) {
		m, err := trySeries(live, `rules_e2e:time`)
		if err != nil || len(m) != 1 {
			return false, fmt.Sprint(m, err)
		}
		s := only(t, "rules_e2e:time", m)
		resumed = s[0].v
		return resumed > float64(stoppedAt.UnixMilli())/1000, fmt.Sprint(s)
	})
	took := time.Duration((resumed - float64(stoppedAt.UnixMilli())/1000) * float64(time.Second))
	nw := rc.owner()
	t.Logf("evaluation resumed on %s %v after the evaluator stopped (bound: interval %v + lease %v, + %v slack)", nw, took.Round(10*time.Millisecond), ruleInterval, ruleLease, ruleSlack)
	if nw == old || nw == "" {
		t.Fatalf("the group's evaluator is %q after %s stopped", nw, old)
	}
	if took > bound {
		t.Errorf("evaluation resumed %v after the evaluator stopped, more than %v", took, bound)
	}
	// A few more evaluations, then the series.
	clustertest.Until(t, time.Minute, "10 evaluations after the takeover", func() (bool, string) {
		m, err := trySeries(live, `rules_e2e:time`)
		if err != nil || len(m) != 1 {
			return false, fmt.Sprint(m, err)
		}
		s := only(t, "rules_e2e:time", m)
		return s[0].v > resumed+10, fmt.Sprint(s)
	})
	window := fmt.Sprintf("[%ds]", int(time.Since(stoppedAt).Seconds())+30)
	rec := only(t, "rules_e2e:time", series(t, live, `rules_e2e:time`+window))
	for _, s := range rec {
		if math.Abs(s.v-s.t) > 0.001 {
			t.Errorf("rules_e2e:time at %.3f is %.3f, not its evaluation time", s.t, s.v)
		}
	}
	gap, at := maxGap(rec)
	t.Logf("recorded series: %d samples over %s, longest gap %.3fs (after %.3f; stopped at %.3f)", len(rec), window, gap, at, float64(stoppedAt.UnixMilli())/1000)
	if gap > bound.Seconds() {
		t.Errorf("recorded series has a gap of %.3fs after %.3f, more than %v", gap, at, bound)
	}
	firing := only(t, "ALERTS firing", series(t, live, `ALERTS{alertname="RulesE2EAlways",alertstate="firing"}`+window))
	if gap, at := maxGap(firing); gap > bound.Seconds() {
		t.Errorf("the firing alert's ALERTS series has a gap of %.3fs after %.3f, more than %v", gap, at, bound)
	}
	if last := firing[len(firing)-1].t; last < resumed {
		t.Errorf("ALERTS firing last written at %.3f, before the takeover's first evaluation %.3f", last, resumed)
	}
	if p := series(t, live, `ALERTS{alertname="RulesE2EAlways",alertstate="pending"}`+window); len(p) > 0 {
		for _, s := range only(t, "ALERTS pending", p) {
			if s.t >= float64(stoppedAt.UnixMilli())/1000 {
				t.Errorf("the alert went pending again at %.3f, after the failover", s.t)
			}
		}
	}
	for _, s := range only(t, "ALERTS_FOR_STATE", series(t, live, `ALERTS_FOR_STATE{alertname="RulesE2EAlways"}`+window)) {
		if s.v != forState {
			t.Errorf("ALERTS_FOR_STATE at %.3f is %v, not the activeAt %v from before the failover", s.t, s.v, forState)
		}
	}
	if ok, since := amActive(t, rc.am); !ok || !since.Equal(amSince) {
		t.Errorf("Alertmanager: alert active %v since %v, want active since %v (before the failover)", ok, since, amSince)
	}
	// One evaluator among the live datanodes.
	owned := 0.0
	for id, p := range rc.dns {
		if id != old {
			owned += metric(t, p.http, "strata_rule_groups_owned")
		}
	}
	if owned != 1 {
		t.Errorf("the live datanodes evaluate %v groups, want 1", owned)
	}
	return old, stoppedAt
}

// startAM runs a real Alertmanager until the test ends.

// TestRuleEvaluatorKilled: SIGKILL the evaluator of a group.
func TestRuleEvaluatorKilled(t *testing.T) {
	rc := startRuleCluster(t, clustertest.Alertmanager(t))
	rc.failover(syscall.SIGKILL)
}

// TestRuleEvaluatorFrozen: SIGSTOP the evaluator of a group; after the
// takeover, wake it: it must not evaluate the group again while another
// datanode owns it (it is handed groups back only once it has been up
// for 2 leases again).
func TestRuleEvaluatorFrozen(t *testing.T) {
	rc := startRuleCluster(t, clustertest.Alertmanager(t))
	old, stoppedAt := rc.failover(syscall.SIGSTOP)
	p := rc.dns[old]
	const last = `prometheus_rule_group_last_evaluation_timestamp_seconds{rule_group="e2e;heartbeat"}`
	p.signal(syscall.SIGCONT)
	woke := time.Now()
	t.Logf("%s woken", old)
	// For a lease after waking: it neither evaluates nor owns the group
	// (an evaluation it had begun before it froze may end: its time is
	// before the freeze).
	for time.Since(woke) < ruleLease {
		if v := metric(t, p.http, last); !math.IsNaN(v) && v > float64(stoppedAt.UnixMilli())/1000 {
			t.Fatalf("the woken former evaluator evaluated the group at %v, after it froze at %v", v, float64(stoppedAt.UnixMilli())/1000)
		}
		if o := rc.owner(); o == old {
			t.Fatalf("the group went back to %s %v after it woke", old, time.Since(woke))
		}
		time.Sleep(200 * time.Millisecond) // sampling for a fixed window: the check itself
	}
	clustertest.Until(t, time.Minute, "the woken datanode knowing it lost the group", func() (bool, string) {
		v := metric(t, p.http, `strata_rule_group_ownership_changes_total{change="lost"}`)
		return v >= 1, fmt.Sprint(v)
	})
	t.Logf("woken %s: skipped evaluations %v, fenced results %v", old, metric(t, p.http, "strata_rule_group_evaluations_skipped_total"),
		metric(t, p.http, "strata_rule_group_results_fenced_total"))
}

// TestRuleGroupsSpread: 12 groups loaded into a cluster of 3 datanodes are
// each evaluated by exactly one of them, every datanode taking some; a
// bad file through the CLI is refused with file, line and reason, and
// changes nothing.
func TestRuleGroupsSpread(t *testing.T) {
	rc := startRuleCluster(t, "")
	var b strings.Builder
	b.WriteString("groups:\n")
	for i := range 12 {
		fmt.Fprintf(&b, "  - name: g%d\n    interval: 1s\n    rules:\n      - record: spread:g%d\n        expr: vector(%d)\n", i, i, i)
	}
	rc.load("spread.rules", b.String(), "loaded spread/g11: 1 recording, 0 alerting rules")
	per := map[string]float64{}
	clustertest.Until(t, 2*time.Minute, "12 groups evaluated, each once, on every datanode", func() (bool, string) {
		total, each := 0.0, true
		for id, p := range rc.dns {
			per[id] = metric(t, p.http, "strata_rule_groups_owned")
			total += per[id]
			each = each && per[id] > 0
		}
		return total == 12 && each, fmt.Sprint(per)
	})
	t.Logf("groups per datanode: %v", per)
	for i := range 12 {
		clustertest.Until(t, time.Minute, fmt.Sprintf("spread:g%d recorded", i), func() (bool, string) {
			s, err := trySeries(rc.dns["dn1"].http, fmt.Sprintf("spread:g%d", i))
			return err == nil && len(s) == 1, fmt.Sprint(s, err)
		})
	}
	// A bad file for the same namespace: refused, the groups stay.
	file := filepath.Join(t.TempDir(), "spread.rules")
	if err := os.WriteFile(file, []byte("groups:\n  - name: g0\n    rules:\n      - record: bad\n        expr: rate(x[5m]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := cli(t, "rules", "load", file, "--metasrv", rc.meta.grpc)
	if code != 2 || !strings.Contains(out, file+": 5:15:") || !strings.Contains(out, "nothing of them applied") {
		t.Fatalf("bad file: exit %d (want 2)\n%s", code, out)
	}
	out, _ = cli(t, "rules", "list", "--metasrv", rc.meta.grpc)
	if strings.Count(out, "spread ") != 12 {
		t.Fatalf("after a refused load:\n%s", out)
	}
}
