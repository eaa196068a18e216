package cluster_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/cluster/clustertest"
)

// apiRules is /api/v1/rules' answer, as far as the test reads it.
type apiRules struct {
	Status string `json:"status"`
	Data   struct {
		Groups []struct {
			Name           string    `json:"name"`
			File           string    `json:"file"`
			LastEvaluation time.Time `json:"lastEvaluation"`
			Rules          []struct {
				Name           string    `json:"name"`
				Type           string    `json:"type"`
				Health         string    `json:"health"`
				LastError      string    `json:"lastError"`
				LastEvaluation time.Time `json:"lastEvaluation"`
				State          string    `json:"state"`
				Alerts         []struct {
					State string `json:"state"`
				} `json:"alerts"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"data"`
}

func getJSON(httpAddr, path string, v any) error {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get("http://" + httpAddr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// wholeClusterRules checks one datanode's /api/v1/rules: every group once,
// each evaluated within the last few seconds by whichever datanode owns
// it (health ok, but the limited group's err with its evaluator's error).
func wholeClusterRules(httpAddr string, want []string) (bool, string) {
	var r apiRules
	if err := getJSON(httpAddr, "/api/v1/rules", &r); err != nil {
		return false, err.Error()
	}
	var got []string
	for _, g := range r.Data.Groups {
		got = append(got, g.File+"/"+g.Name)
		if time.Since(g.LastEvaluation) > 10*time.Second {
			return false, fmt.Sprintf("group %s/%s last evaluated %v", g.File, g.Name, g.LastEvaluation)
		}
		for _, rule := range g.Rules {
			wantHealth := "ok"
			if g.Name == "limited" {
				wantHealth = "err"
				if !strings.Contains(rule.LastError, "exceeded limit of 1") {
					return false, fmt.Sprintf("group limited: lastError %q", rule.LastError)
				}
			}
			if rule.Health != wantHealth || time.Since(rule.LastEvaluation) > 10*time.Second {
				return false, fmt.Sprintf("rule %s of %s/%s: health %s (%s), last evaluated %v", rule.Name, g.File, g.Name, rule.Health, rule.LastError, rule.LastEvaluation)
			}
			if rule.Type == "alerting" && (rule.State != "firing" || len(rule.Alerts) != 1 || rule.Alerts[0].State != "firing") {
				return false, fmt.Sprintf("alerting rule %s: state %s, alerts %v", rule.Name, rule.State, rule.Alerts)
			}
		}
	}
	if !slices.Equal(got, want) {
		return false, fmt.Sprintf("groups %v, want %v", got, want)
	}
	return true, ""
}

// TestRulesAPIWholeCluster: /api/v1/rules and /api/v1/alerts asked of any
// datanode answer every group of the cluster, with the state its
// evaluator has; a frozen evaluator's groups are answered "unknown",
// naming it, within the bound of the question to it.
func TestRulesAPIWholeCluster(t *testing.T) {
	rc := startRuleCluster(t, clustertest.Alertmanager(t))
	var b strings.Builder
	b.WriteString("groups:\n")
	for i := range 6 {
		fmt.Fprintf(&b, "  - name: g%d\n    interval: 1s\n    rules:\n      - record: view:g%d\n        expr: vector(%d)\n", i, i, i)
	}
	b.WriteString(`  - name: limited
    interval: 1s
    limit: 1
    rules:
      - record: view:limited
        expr: label_replace(vector(1), "x", "a", "", "") or label_replace(vector(1), "x", "b", "", "")
`)
	rc.load("view.rules", b.String(), "loaded view/limited: 1 recording, 0 alerting rules")
	want := []string{"e2e/heartbeat", "view/g0", "view/g1", "view/g2", "view/g3", "view/g4", "view/g5", "view/limited"}
	per := map[string]float64{}
	clustertest.Until(t, 2*time.Minute, "8 groups evaluated, each once, on every datanode", func() (bool, string) {
		total, each := 0.0, true
		for id, p := range rc.dns {
			per[id] = metric(t, p.http, "strata_rule_groups_owned")
			total += per[id]
			each = each && per[id] > 0
		}
		return total == 8 && each, fmt.Sprint(per)
	})
	t.Logf("groups per datanode: %v", per)
	ids := []string{"dn1", "dn2", "dn3"}
	for _, id := range ids {
		clustertest.Until(t, 2*time.Minute, "/api/v1/rules of "+id+" answering the whole cluster", func() (bool, string) {
			return wholeClusterRules(rc.dns[id].http, want)
		})
		clustertest.Until(t, time.Minute, "/api/v1/alerts of "+id+" listing the firing alert", func() (bool, string) {
			var r struct {
				Data struct {
					Alerts []struct {
						Labels map[string]string `json:"labels"`
						State  string            `json:"state"`
					} `json:"alerts"`
				} `json:"data"`
			}
			if err := getJSON(rc.dns[id].http, "/api/v1/alerts", &r); err != nil {
				return false, err.Error()
			}
			a := r.Data.Alerts
			return len(a) == 1 && a[0].Labels["alertname"] == "RulesE2EAlways" && a[0].State == "firing", fmt.Sprint(a)
		})
	}
	// Filters apply to the merged answer.
	var r apiRules
	if err := getJSON(rc.dns["dn1"].http, "/api/v1/rules?type=alert", &r); err != nil || len(r.Data.Groups) != 1 || r.Data.Groups[0].Name != "heartbeat" {
		t.Fatalf("type=alert: %v %+v", err, r.Data.Groups)
	}
	r = apiRules{}
	if err := getJSON(rc.dns["dn2"].http, "/api/v1/rules?rule_group[]=g3&rule_group[]=g4&file[]=view", &r); err != nil || len(r.Data.Groups) != 2 ||
		r.Data.Groups[0].Name != "g3" || r.Data.Groups[1].Name != "g4" {
		t.Fatalf("rule_group[]: %v %+v", err, r.Data.Groups)
	}
	r = apiRules{}
	if err := getJSON(rc.dns["dn3"].http, `/api/v1/rules?exclude_alerts=true&match[]={severity="test"}`, &r); err != nil || len(r.Data.Groups) != 1 ||
		len(r.Data.Groups[0].Rules) != 1 || r.Data.Groups[0].Rules[0].Alerts != nil {
		t.Fatalf("match[] and exclude_alerts: %v %+v", err, r.Data.Groups)
	}

	// Freeze a datanode: another answers at once (within the 5 s bound of
	// the question to it), its groups "unknown", naming it, until they move.
	frozen, asked := "", ""
	for _, id := range ids {
		if per[id] > 0 && frozen == "" {
			frozen = id
		} else if asked == "" {
			asked = id
		}
	}
	// evaluatedBy lists the groups metasrv says the node to freeze
	// evaluates.
	evaluatedBy := func() ([]string, error) {
		var groups []string
		out, code := cli(t, "rules", "list", "-o", "csv", "--metasrv", rc.meta.grpc)
		if code != 0 {
			return nil, fmt.Errorf("rules list: %d\n%s", code, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Split(line, ","); len(f) > 5 && f[5] == frozen {
				groups = append(groups, f[0]+"/"+f[1])
			}
		}
		return groups, nil
	}
	theirs, err := evaluatedBy()
	if err != nil {
		t.Fatal(err)
	}
	if len(theirs) == 0 {
		t.Fatalf("no group evaluated by %s", frozen)
	}
	rc.dns[frozen].signal(syscall.SIGSTOP)
	frozeAt := time.Now()
	t.Cleanup(func() { rc.dns[frozen].signal(syscall.SIGCONT) })
	// A node starved on a loaded machine may have lost its lease just
	// before it was frozen: a group that had moved already is answered by
	// its new evaluator. metasrv, asked within a lease of the freeze (less
	// a heartbeat: the lease was renewed that long before at most), still
	// names the frozen node for every group it evaluated when it froze.
	stillCh, stillErr := make(chan []string, 1), make(chan error, 1)
	go func() {
		var still []string
		err := errors.New("rules list did not finish")
		defer func() { stillCh <- still; stillErr <- err }() // run even if cli's t.Fatal ends the goroutine
		still, err = evaluatedBy()
		if time.Since(frozeAt) > ruleLease-time.Second {
			still = nil // too late to tell: nothing checked
		}
	}()
	began := time.Now()
	r = apiRules{}
	if err := getJSON(rc.dns[asked].http, "/api/v1/rules", &r); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	still := <-stillCh
	if err := <-stillErr; err != nil {
		t.Fatal(err)
	}
	t.Logf("%s answered in %v with %s frozen (its groups %v; still its after: %v)", asked, took, frozen, theirs, still)
	if took > 15*time.Second {
		t.Errorf("%s answered in %v", asked, took)
	}
	var got []string
	for _, g := range r.Data.Groups {
		key := g.File + "/" + g.Name
		got = append(got, key)
		if !slices.Contains(theirs, key) {
			continue
		}
		if !slices.Contains(still, key) {
			t.Logf("%s had moved from %s before it froze, or metasrv was asked too late to tell: not checked", key, frozen)
			continue
		}
		for _, rule := range g.Rules {
			if rule.Health != "unknown" || !strings.Contains(rule.LastError, "datanode "+frozen) {
				t.Errorf("%s, evaluated by the frozen %s: rule %s health %s, lastError %q", key, frozen, rule.Name, rule.Health, rule.LastError)
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("groups %v, want %v", got, want)
	}
	// Once they moved, every group is answered again with its state.
	clustertest.Until(t, 2*time.Minute, "/api/v1/rules of "+asked+" after the groups moved", func() (bool, string) {
		return wholeClusterRules(rc.dns[asked].http, want)
	})
}
