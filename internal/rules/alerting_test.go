package rules_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/prompb"

	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/rules"
)

// amAlert is an alert as Alertmanager's /api/v2/alerts lists it.
type amAlert struct {
	Labels   map[string]string `json:"labels"`
	EndsAt   time.Time         `json:"endsAt"`
	StartsAt time.Time         `json:"startsAt"`
	Status   struct {
		State string `json:"state"`
	} `json:"status"`
}

func amAlerts(t *testing.T, base string) []amAlert {
	t.Helper()
	resp, err := http.Get(base + "/api/v2/alerts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out []amAlert
	if err := json.Unmarshal(body, &out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("alertmanager /api/v2/alerts: %s %s (%v)", resp.Status, body, err)
	}
	return out
}

const alertingRules = `groups:
  - name: alerts
    interval: 1s
    rules:
      - alert: HotRoom
        expr: rw_room_temp > 30
        for: %s
        labels:
          severity: page
        annotations:
          summary: "room {{ $labels.room }} at {{ $value }}"
`

// temp writes room 1's temperature now.
func (n *node) temp(v float64) {
	n.t.Helper()
	n.remoteWrite(series{labels: map[string]string{"__name__": "rw_room_temp", "room": "1"}, samples: []prompb.Sample{{Timestamp: ms(time.Now()), Value: v}}})
}

// hotRoom waits until room 1's alert is in state, and returns it.
func (n *node) hotRoom(state string, deadline time.Duration) apiAlert {
	n.t.Helper()
	var got apiAlert
	clustertest.Until(n.t, deadline, "HotRoom "+state, func() (bool, string) {
		as := n.alerts()
		if len(as) != 1 {
			return false, fmt.Sprintf("%+v", as)
		}
		got = as[0]
		return got.State == state, got.State
	})
	return got
}

// TestAlertGoesPendingFiringResolvedThroughAlertmanager: an alert is
// pending for its `for`, then firing, written as ALERTS and
// ALERTS_FOR_STATE and received by a real Alertmanager, then resolved:
// Alertmanager learns it at once, long before the firing alert's endsAt.
func TestAlertGoesPendingFiringResolvedThroughAlertmanager(t *testing.T) {
	am := clustertest.Alertmanager(t)
	file := filepath.Join(rulesDir(t), "alerts.yml")
	writeFile(t, file, fmt.Sprintf(alertingRules, "3s"))
	n := start(t, t.TempDir(), objstoretest.Mem(t), rules.Options{Files: []string{file}, AlertmanagerURLs: []string{am}})

	n.temp(35)
	pending := n.hotRoom("pending", time.Minute)
	want := map[string]string{"alertname": "HotRoom", "severity": "page", "room": "1", "__name__": ""}
	for k, v := range want {
		if pending.Labels[k] != v {
			t.Errorf("pending alert's label %s = %q, want %q: %+v", k, pending.Labels[k], v, pending)
		}
	}
	if pending.Annotations["summary"] != "room 1 at 35" || pending.Value != "3.5e+01" {
		t.Errorf("pending alert: %+v", pending)
	}
	if got := amAlerts(t, am); len(got) != 0 {
		t.Errorf("alertmanager has a pending alert: %+v", got)
	}

	firing := n.hotRoom("firing", time.Minute)
	if !firing.ActiveAt.Equal(pending.ActiveAt) {
		t.Errorf("firing alert active at %v, pending at %v", firing.ActiveAt, pending.ActiveAt)
	}
	if held := time.Since(firing.ActiveAt); held < 3*time.Second {
		t.Errorf("firing %v after it became active, before its for (3s)", held)
	}
	r := n.rules(url.Values{"type": {"alert"}})
	if len(r.Groups) != 1 || len(r.Groups[0].Rules) != 1 {
		t.Fatalf("rules: %+v", r)
	}
	if rule := r.Groups[0].Rules[0]; rule.State != "firing" || rule.Health != "ok" || rule.Duration != 3 || rule.Type != "alerting" || len(rule.Alerts) != 1 {
		t.Errorf("alerting rule: %+v", rule)
	}
	if r := n.rules(url.Values{"type": {"alert"}, "exclude_alerts": {"true"}}); len(r.Groups[0].Rules[0].Alerts) != 0 {
		t.Errorf("exclude_alerts: %+v", r)
	}

	// ALERTS and ALERTS_FOR_STATE, written through the metrics table.
	clustertest.Until(t, 30*time.Second, "ALERTS and ALERTS_FOR_STATE", func() (bool, string) {
		var q queryResult
		n.get("/api/v1/query", url.Values{"query": {`ALERTS{alertname="HotRoom",alertstate="firing",room="1",severity="page"}`}}, &q)
		if len(q.Result) != 1 || q.Result[0].Value.value() != "1" {
			return false, fmt.Sprintf("ALERTS: %+v", q.Result)
		}
		n.get("/api/v1/query", url.Values{"query": {`ALERTS_FOR_STATE{alertname="HotRoom",room="1"}`}}, &q)
		activeAt := strconv.FormatInt(firing.ActiveAt.Unix(), 10)
		return len(q.Result) == 1 && q.Result[0].Value.value() == activeAt, fmt.Sprintf("ALERTS_FOR_STATE: %+v, want %s", q.Result, activeAt)
	})

	// Alertmanager has it, valid for minutes (4 resend delays).
	clustertest.Until(t, 30*time.Second, "alertmanager has the firing alert", func() (bool, string) {
		got := amAlerts(t, am)
		return len(got) == 1 && got[0].Labels["alertname"] == "HotRoom" && got[0].Labels["room"] == "1" && got[0].Status.State == "active" &&
			got[0].EndsAt.After(time.Now().Add(2*time.Minute)), fmt.Sprintf("%+v", got)
	})

	n.temp(20)
	clustertest.Until(t, 30*time.Second, "no active alert", func() (bool, string) {
		as := n.alerts()
		return len(as) == 0, fmt.Sprintf("%+v", as)
	})
	if rule := n.rules(nil).Groups[0].Rules[0]; rule.State != "inactive" {
		t.Errorf("resolved rule: %+v", rule)
	}
	// Resolved alerts leave Alertmanager's list: it was told, it did not
	// wait for the endsAt of the firing alert.
	clustertest.Until(t, 30*time.Second, "alertmanager has the resolution", func() (bool, string) {
		got := amAlerts(t, am)
		return len(got) == 0, fmt.Sprintf("%+v", got)
	})
}

// TestRestartKeepsAFiringAlertFiring: a standalone restarted while an
// alert fires restores the alert's `for` state from ALERTS_FOR_STATE: it
// fires again with the activeAt it had, without a new pending period.
func TestRestartKeepsAFiringAlertFiring(t *testing.T) {
	const hold = 10 * time.Second
	file := filepath.Join(rulesDir(t), "alerts.yml")
	writeFile(t, file, fmt.Sprintf(alertingRules, hold))
	dir, store := t.TempDir(), objstoretest.Mem(t)
	opts := rules.Options{Files: []string{file}}
	n := start(t, dir, store, opts)
	n.temp(35)
	before := n.hotRoom("firing", time.Minute)
	clustertest.Until(t, 30*time.Second, "ALERTS_FOR_STATE written", func() (bool, string) {
		var q queryResult
		n.get("/api/v1/query", url.Values{"query": {`ALERTS_FOR_STATE{alertname="HotRoom",room="1"}`}}, &q)
		activeAt := strconv.FormatInt(before.ActiveAt.Unix(), 10)
		return len(q.Result) == 1 && q.Result[0].Value.value() == activeAt, fmt.Sprintf("%+v, want %s", q.Result, activeAt)
	})
	n.Stop()

	restarted := time.Now()
	n = start(t, dir, store, opts)
	after := n.hotRoom("firing", time.Minute)
	if took := time.Since(restarted); took >= hold {
		t.Errorf("firing %v after the restart: a new pending period (for: %v)", took, hold)
	}
	if after.ActiveAt.Unix() != before.ActiveAt.Unix() {
		t.Errorf("active at %v after the restart, %v before", after.ActiveAt, before.ActiveAt)
	}
	t.Logf("firing again %v after the restart began, active since %v", time.Since(restarted).Round(time.Millisecond), after.ActiveAt)
}
