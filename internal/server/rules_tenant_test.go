package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/auth"
	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/tenant"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// tenantRules is the same rule file for every tenant: one namespace and
// group name, a recording rule of one name over the tenant's up, and an
// alert firing while the tenant's sum(up) is under 300.
const tenantRules = `groups:
  - name: g
    interval: 1s
    rules:
      - record: tenant:up:sum
        expr: sum(up)
      - alert: UpLow
        expr: sum(up) < 300
`

// rulesOf is /api/v1/rules as tenant h: each group's file/name and its
// rules' health, and the alerts of /api/v1/alerts.
func rulesOf(t *testing.T, addr, h, tok string) (groups []string, health []string, alerts []string) {
	t.Helper()
	code, body := tenantReq(t, http.MethodGet, addr, "/api/v1/rules", h, tok, "", nil)
	var rs struct {
		Groups []struct {
			Name  string `json:"name"`
			File  string `json:"file"`
			Rules []struct {
				Name   string `json:"name"`
				Health string `json:"health"`
			} `json:"rules"`
		} `json:"groups"`
	}
	promData(t, code, body, &rs)
	for _, g := range rs.Groups {
		groups = append(groups, g.File+"/"+g.Name)
		for _, r := range g.Rules {
			health = append(health, r.Name+":"+r.Health)
		}
	}
	code, body = tenantReq(t, http.MethodGet, addr, "/api/v1/alerts", h, tok, "", nil)
	var as struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	promData(t, code, body, &as)
	for _, a := range as.Alerts {
		alerts = append(alerts, a.Labels["alertname"]+":"+a.State)
	}
	return groups, health, alerts
}

// TestRulesPerTenant: tenants a and b load a namespace of one name with
// one group, recording rule and alert of one name into a cluster of two
// datanodes; each group reads and records its tenant's series only, each
// tenant's /api/v1/rules and /api/v1/alerts (on either datanode) answer
// its own groups and alerts, the default tenant sees neither, and a's
// delete leaves b's group evaluating.
func TestRulesPerTenant(t *testing.T) {
	c := servertest.StartCluster(t, 2, servertest.ClusterOptions{DefaultRegions: 2})
	dn1, dn2 := c.Datanodes[0], c.Datanodes[1]
	now := time.Now().Add(-time.Minute)
	base := map[string]float64{"a": 100, "b": 200, "": 300}
	for _, h := range []string{"a", "b", ""} {
		if code, body := retried(t, func() (int, string) {
			return tenantReq(t, http.MethodPost, dn1.HTTPAddr(), "/api/v1/write", h, "", "application/x-protobuf", rwBody(t, "up", 2, base[h], now.UnixMilli()))
		}); code != http.StatusNoContent {
			t.Fatalf("tenant %q: remote write: %d %s", h, code, body)
		}
	}
	admin := pb.NewMetaAdminClient(dial(t, c.MetasrvAddr))
	as := func(h string) context.Context { return tenant.Outgoing(context.Background(), h) }
	for _, h := range []string{"a", "b"} {
		resp, err := admin.LoadRules(as(h), &pb.LoadRulesRequest{Files: []*pb.RuleFile{{Namespace: "ns", Name: "ns.yml", Content: []byte(tenantRules)}}})
		if err != nil || len(resp.GetGroups()) != 1 {
			t.Fatalf("load %s's rules: %v, %v", h, resp, err)
		}
	}
	// sum(up): a 100+101, b 200+201; the default tenant has no rule.
	want := map[string]string{"a": "201", "b": "401"}
	clustertest.Until(t, time.Minute, "each tenant's rule recorded its own sum", func() (bool, string) {
		var got []string
		ok := true
		for _, h := range []string{"a", "b", ""} {
			v := instant(t, dn2.HTTPAddr(), h, "", "tenant:up:sum", time.Now().Unix())
			got = append(got, fmt.Sprintf("%q: %v", h, v))
			ok = ok && v["map[__name__:tenant:up:sum]"] == want[h] && len(v) == len(want[h])/3
		}
		return ok, strings.Join(got, ", ")
	})
	// The recorded series are in each tenant's own metrics table: the
	// default tenant has none of them, a federated read has both.
	if got := instant(t, dn1.HTTPAddr(), "a|b", "", "tenant:up:sum", time.Now().Unix()); len(got) != 2 || got["map[__name__:tenant:up:sum __tenant_id__:a]"] != "201" || got["map[__name__:tenant:up:sum __tenant_id__:b]"] != "401" {
		t.Errorf("tenant:up:sum over a|b: %v", got)
	}
	if got := instant(t, dn1.HTTPAddr(), "", "", "count(tenant:up:sum) or ALERTS", time.Now().Unix()); len(got) != 0 {
		t.Errorf("the default tenant sees another's rule results: %v", got)
	}

	for _, dn := range []*server.Server{dn1, dn2} {
		clustertest.Until(t, time.Minute, "each tenant's /api/v1/rules and alerts on "+dn.HTTPAddr(), func() (bool, string) {
			ga, ha, aa := rulesOf(t, dn.HTTPAddr(), "a", "")
			gb, hb, ab := rulesOf(t, dn.HTTPAddr(), "b", "")
			gd, _, ad := rulesOf(t, dn.HTTPAddr(), "", "")
			ok := slices.Equal(ga, []string{"ns/g"}) && slices.Equal(gb, []string{"ns/g"}) && len(gd) == 0 &&
				slices.Equal(ha, []string{"tenant:up:sum:ok", "UpLow:ok"}) && slices.Equal(hb, ha) &&
				slices.Equal(aa, []string{"UpLow:firing"}) && len(ab) == 0 && len(ad) == 0
			return ok, fmt.Sprintf("a %v %v %v; b %v %v %v; default %v %v", ga, ha, aa, gb, hb, ab, gd, ad)
		})
	}
	// Each tenant's group has its own rule metrics (Prometheus keys them by
	// file and name: the file is the tenant's namespace, qualified).
	clustertest.Until(t, time.Minute, "each tenant's rule metrics", func() (bool, string) {
		var all strings.Builder
		for _, dn := range []*server.Server{dn1, dn2} {
			code, body := tenantReq(t, http.MethodGet, dn.HTTPAddr(), "/metrics", "", "", "", nil)
			if code != http.StatusOK {
				return false, fmt.Sprintf("/metrics of %s: %d", dn.HTTPAddr(), code)
			}
			all.WriteString(body)
		}
		for _, want := range []string{`prometheus_rule_group_last_evaluation_timestamp_seconds{rule_group="__t/a/ns;g"}`, `prometheus_rule_group_last_evaluation_timestamp_seconds{rule_group="__t/b/ns;g"}`} {
			if !strings.Contains(all.String(), want) {
				return false, "no " + want
			}
		}
		return true, ""
	})
	// a's alert is in a's series, and b's ALERTS has none.
	if got := instant(t, dn1.HTTPAddr(), "b", "", "ALERTS", time.Now().Unix()); len(got) != 0 {
		t.Errorf("b's ALERTS: %v", got)
	}
	// One tenant's rules at a time: a federated header is refused.
	for _, path := range []string{"/api/v1/rules", "/api/v1/alerts"} {
		if code, body := tenantReq(t, http.MethodGet, dn1.HTTPAddr(), path, "a|b", "", "", nil); code != http.StatusBadRequest || !strings.Contains(body, "one tenant") {
			t.Errorf("%s as a|b: %d %s", path, code, body)
		}
		if code, body := tenantReq(t, http.MethodGet, dn1.HTTPAddr(), path, "a/b", "", "", nil); code != http.StatusBadRequest {
			t.Errorf("%s as a bad tenant: %d %s", path, code, body)
		}
	}

	// The admin API lists and deletes the call's tenant's namespaces only.
	for _, h := range []string{"a", "b"} {
		resp, err := admin.ListRules(as(h), &pb.ListRulesRequest{})
		if err != nil || len(resp.GetGroups()) != 1 || resp.GetGroups()[0].GetNamespace() != "ns" || !strings.Contains(resp.GetGroups()[0].GetContent(), "UpLow") {
			t.Fatalf("%s's rules: %v, %v", h, resp, err)
		}
	}
	if resp, err := admin.ListRules(as(""), &pb.ListRulesRequest{}); err != nil || len(resp.GetGroups()) != 0 {
		t.Fatalf("the default tenant's rules: %v, %v", resp, err)
	}
	if _, err := admin.DeleteRules(as(""), &pb.DeleteRulesRequest{Namespace: "ns"}); status.Code(err) != codes.NotFound {
		t.Fatalf("delete the default tenant's ns (none): %v", err)
	}
	fed := metadata.AppendToOutgoingContext(context.Background(), tenant.MetadataKey, "a|b")
	if _, err := admin.ListRules(fed, &pb.ListRulesRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("list as a|b: %v", err)
	}
	if _, err := admin.LoadRules(fed, &pb.LoadRulesRequest{Files: []*pb.RuleFile{{Namespace: "ns", Content: []byte(tenantRules)}}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("load as a|b: %v", err)
	}
	if _, err := admin.DeleteRules(fed, &pb.DeleteRulesRequest{Namespace: "ns"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("delete as a|b: %v", err)
	}
	if resp, err := admin.DeleteRules(as("a"), &pb.DeleteRulesRequest{Namespace: "ns"}); err != nil || resp.GetDeleted() != 1 {
		t.Fatalf("delete a's ns: %v, %v", resp, err)
	}
	clustertest.Until(t, time.Minute, "a's group gone, b's evaluating", func() (bool, string) {
		ga, _, aa := rulesOf(t, dn2.HTTPAddr(), "a", "")
		gb, hb, ab := rulesOf(t, dn2.HTTPAddr(), "b", "")
		return len(ga) == 0 && len(aa) == 0 && slices.Equal(gb, []string{"ns/g"}) && slices.Equal(hb, []string{"tenant:up:sum:ok", "UpLow:ok"}) && len(ab) == 0,
			fmt.Sprintf("a %v %v; b %v %v %v", ga, aa, gb, hb, ab)
	})
	if resp, err := admin.ListRules(as("b"), &pb.ListRulesRequest{}); err != nil || len(resp.GetGroups()) != 1 {
		t.Fatalf("b's rules after a's delete: %v, %v", resp, err)
	}
}

// TestRuleTenantTokens: a tenant's token reads its own tenant's rules
// and alerts, and is refused another's (403, naming it); metasrv's rules
// API takes the cluster's token, which may name any tenant. A
// standalone's rule file is the default tenant's.
func TestRuleTenantTokens(t *testing.T) {
	tok := auth.New("cluster-secret").NewTenant("a-secret", auth.Binding{Tenants: []string{"a"}})
	file := filepath.Join(t.TempDir(), "file.yml")
	if err := os.WriteFile(file, []byte("groups:\n  - name: f\n    interval: 1s\n    rules:\n      - record: from:file\n        expr: vector(7)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{Config: func(c *server.Config) {
		c.Auth = tok
		c.Rules.Files = []string{file}
	}})
	bearer := func(s, h string) context.Context {
		return tenant.Outgoing(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+s), h)
	}
	admin := pb.NewMetaAdminClient(dial(t, n.GRPCAddr()))
	if _, err := admin.LoadRules(bearer("cluster-secret", "b"), &pb.LoadRulesRequest{Files: []*pb.RuleFile{{Namespace: "ns", Content: []byte(tenantRules)}}}); err != nil {
		t.Fatalf("load b's rules with the cluster's token: %v", err)
	}
	if _, err := admin.LoadRules(bearer("a-secret", "a"), &pb.LoadRulesRequest{Files: []*pb.RuleFile{{Namespace: "ns", Content: []byte(tenantRules)}}}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("load a's rules with a's token: %v", err)
	}
	clustertest.Until(t, time.Minute, "b's group in b's /api/v1/rules", func() (bool, string) {
		gb, _, _ := rulesOf(t, n.HTTPAddr(), "b", "cluster-secret")
		return slices.Equal(gb, []string{"ns/g"}), fmt.Sprint(gb)
	})
	if ga, _, aa := rulesOf(t, n.HTTPAddr(), "", "a-secret"); len(ga) != 0 || len(aa) != 0 {
		t.Errorf("a's token (its tenant a): groups %v, alerts %v", ga, aa)
	}
	if gd, _, _ := rulesOf(t, n.HTTPAddr(), "", "cluster-secret"); !slices.Equal(gd, []string{file + "/f"}) {
		t.Errorf("the default tenant's groups: %v, want the rule file's", gd)
	}
	for _, path := range []string{"/api/v1/rules", "/api/v1/alerts"} {
		if code, body := tenantReq(t, http.MethodGet, n.HTTPAddr(), path, "b", "a-secret", "", nil); code != http.StatusForbidden || !strings.Contains(body, "may not name tenant b") {
			t.Errorf("%s of b with a's token: %d %s", path, code, body)
		}
	}
	if resp, err := admin.ListRules(bearer("cluster-secret", "a"), &pb.ListRulesRequest{}); err != nil || len(resp.GetGroups()) != 0 {
		t.Errorf("a's rules with the cluster's token: %v, %v", resp, err)
	}
	if resp, err := admin.ListRules(bearer("cluster-secret", "b"), &pb.ListRulesRequest{}); err != nil || len(resp.GetGroups()) != 1 {
		t.Errorf("b's rules with the cluster's token: %v, %v", resp, err)
	}
	if _, err := admin.ListRules(bearer("a-secret", "a"), &pb.ListRulesRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("list a's rules with a's token: %v", err)
	}
}

// TestTenantAlertFiringAfterARestart: a standalone restarted while a
// tenant's alert fires restores its `for` state from the tenant's
// ALERTS_FOR_STATE (not the default tenant's): the alert fires again with
// the activeAt it had, without a new pending period.
func TestTenantAlertFiringAfterARestart(t *testing.T) {
	const hold = 10 * time.Second
	dir, store := t.TempDir(), objstoretest.Mem(t)
	n := servertest.Start(t, store, servertest.Options{Dir: dir})
	rules := fmt.Sprintf("groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: Down\n        expr: up < 1\n        for: %s\n", hold)
	admin := pb.NewMetaAdminClient(dial(t, n.GRPCAddr()))
	if _, err := admin.LoadRules(tenant.Outgoing(context.Background(), "a"), &pb.LoadRulesRequest{Files: []*pb.RuleFile{{Namespace: "ns", Content: []byte(rules)}}}); err != nil {
		t.Fatal(err)
	}
	// a's up is 0 (a sample at now holds for the 5 minutes of lookback);
	// the default tenant's is 1.
	now := time.Now().UnixMilli()
	for h, v := range map[string]float64{"a": 0, "": 1} {
		if code, body := tenantReq(t, http.MethodPost, n.HTTPAddr(), "/api/v1/write", h, "", "application/x-protobuf", rwBody(t, "up", 1, v, now)); code != http.StatusNoContent {
			t.Fatalf("write of %q: %d %s", h, code, body)
		}
	}
	firing := func(n *servertest.Node, within time.Duration) time.Time {
		t.Helper()
		var at time.Time
		clustertest.Until(t, within, "a's alert firing", func() (bool, string) {
			code, body := tenantReq(t, http.MethodGet, n.HTTPAddr(), "/api/v1/alerts", "a", "", "", nil)
			var as struct {
				Alerts []struct {
					State    string    `json:"state"`
					ActiveAt time.Time `json:"activeAt"`
				} `json:"alerts"`
			}
			promData(t, code, body, &as)
			if len(as.Alerts) == 1 && as.Alerts[0].State == "firing" {
				at = as.Alerts[0].ActiveAt
				return true, ""
			}
			return false, body
		})
		return at
	}
	before := firing(n, time.Minute)
	clustertest.Until(t, 30*time.Second, "a's ALERTS_FOR_STATE written", func() (bool, string) {
		got := instant(t, n.HTTPAddr(), "a", "", `ALERTS_FOR_STATE{alertname="Down"}`, time.Now().Unix())
		return len(got) == 1, fmt.Sprint(got)
	})
	if got := instant(t, n.HTTPAddr(), "", "", `ALERTS_FOR_STATE`, time.Now().Unix()); len(got) != 0 {
		t.Errorf("the default tenant's ALERTS_FOR_STATE: %v", got)
	}
	// After the restart a's metrics table opens late (its region's reads
	// slowed, as a slow store or a large manifest would): the restore must
	// still read a's ALERTS_FOR_STATE (the node waits for every tenant's
	// metrics table before its rules start, and a query waits for a region
	// that is opening).
	mt, err := n.Engine().Table(tenant.Qualify("a", catalog.MetricsTable))
	if err != nil {
		t.Fatal(err)
	}
	n.Stop()
	slow := faultstore.New(store)
	slow.Hook = func(c faultstore.Call) {
		if strings.HasPrefix(c.Key, layout.TablePrefix(mt.ID)) {
			time.Sleep(200 * time.Millisecond) // a slow store: the fault itself, not a wait on the server
		}
	}
	restarted := time.Now()
	n = servertest.Start(t, slow, servertest.Options{Dir: dir})
	after := firing(n, time.Minute)
	if took := time.Since(restarted); took >= hold {
		t.Errorf("firing %v after the restart: a new pending period (for: %v)", took, hold)
	}
	if after.Unix() != before.Unix() {
		t.Errorf("active at %v after the restart, %v before", after, before)
	}
}

// TestTenantAlertsApartInAlertmanager: every tenant's alerts go to the
// same Alertmanager; a tenant's carry __tenant_id__, so Alertmanager keeps
// two tenants' alerts of one name and labels apart (the default tenant's
// as before, without it), and a tenant's ALERTS series has no such label.
func TestTenantAlertsApartInAlertmanager(t *testing.T) {
	am := clustertest.Alertmanager(t)
	const rule = "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - alert: Always\n        expr: vector(1)\n        labels:\n          severity: page\n"
	file := filepath.Join(t.TempDir(), "always.yml")
	if err := os.WriteFile(file, []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{Config: func(c *server.Config) {
		c.Rules.Files = []string{file}
		c.Rules.AlertmanagerURLs = []string{am}
	}})
	admin := pb.NewMetaAdminClient(dial(t, n.GRPCAddr()))
	if _, err := admin.LoadRules(tenant.Outgoing(context.Background(), "a"), &pb.LoadRulesRequest{Files: []*pb.RuleFile{{Namespace: "ns", Content: []byte(rule)}}}); err != nil {
		t.Fatal(err)
	}
	clustertest.Until(t, time.Minute, "both tenants' alerts in Alertmanager", func() (bool, string) {
		resp, err := http.Get(am + "/api/v2/alerts")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var got []struct {
			Labels map[string]string `json:"labels"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			return false, err.Error()
		}
		var tenants []string
		for _, a := range got {
			if a.Labels["alertname"] == "Always" && a.Labels["severity"] == "page" {
				tenants = append(tenants, a.Labels[tenant.Label])
			}
		}
		slices.Sort(tenants)
		return slices.Equal(tenants, []string{"", "a"}), fmt.Sprintf("%+v", got)
	})
	clustertest.Until(t, time.Minute, "a's ALERTS series", func() (bool, string) {
		got := instant(t, n.HTTPAddr(), "a", "", `ALERTS{alertname="Always"}`, time.Now().Unix())
		return len(got) == 1, fmt.Sprint(got)
	})
	if got := instant(t, n.HTTPAddr(), "a", "", `ALERTS{alertname="Always"}`, time.Now().Unix()); strings.Contains(fmt.Sprint(got), tenant.Label) {
		t.Errorf("a's ALERTS: %v, want no %s", got, tenant.Label)
	}
}
