package rules

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	promrules "github.com/prometheus/prometheus/rules"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/rules/rulestore"
	"github.com/stratadb/strata/internal/tlsutil"
)

// TestClusterViewOwners: the cluster's view of the stored groups takes
// each group's state from its evaluator, asked at once, and lists a group
// with health "unknown" and lastError naming its evaluator when that one
// is older than the RPC (Unimplemented), does not answer within
// PeerTimeout, or is not registered; and "unknown" without an error when
// no datanode evaluates it.
func TestClusterViewOwners(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := cluster.StartEtcd(filepath.Join(t.TempDir(), "etcd"), "", tlsutil.Config{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()

	var b strings.Builder
	b.WriteString("groups:\n")
	for _, g := range []string{"current", "old", "slow", "slow2", "gone", "none"} {
		b.WriteString("  - name: " + g + "\n    rules:\n      - record: r:" + g + "\n        expr: sum(up)\n      - alert: A\n        expr: vector(1)\n        for: 1m\n        labels:\n          severity: page\n")
	}
	if _, err := rulestore.Load(ctx, cli, []rulestore.RuleFile{{Namespace: "ns", Name: "ns.yml", Content: []byte(b.String())}}); err != nil {
		t.Fatal(err)
	}
	owners := map[string]string{"current": "dn-current", "old": "dn-old", "slow": "dn-slow", "slow2": "dn-slow2", "gone": "dn-gone"}
	for g, o := range owners {
		if _, err := cli.Put(ctx, rulestore.OwnersPrefix+rulestore.GroupKey("ns", g), o); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"dn-current", "dn-old", "dn-slow", "dn-slow2"} {
		data, _ := json.Marshal(cluster.NodeInfo{ID: id, GRPCAddr: "addr-" + id})
		if _, err := cli.Put(ctx, cluster.DatanodesPrefix+id, string(data)); err != nil {
			t.Fatal(err)
		}
	}
	evaluated := time.Now().Add(-time.Second).UTC()
	peer := func(ctx context.Context, addr string) ([]byte, error) {
		switch addr {
		case "addr-dn-current":
			return json.Marshal([]groupState{{Name: "current", File: "ns", Interval: 60, LastEvaluation: evaluated, Rules: []ruleState{
				{Type: "recording", Name: "r:current", Query: "sum(up)", Health: promrules.HealthBad, LastError: "boom", LastEvaluation: evaluated},
				{Type: "alerting", Name: "A", Query: "vector(1)", Health: promrules.HealthGood, State: "pending", Duration: 60, Alerts: []*alert{{State: "pending", Value: "1e+00"}}},
			}}})
		case "addr-dn-old":
			return nil, status.Error(codes.Unimplemented, "unknown method RuleGroups")
		default:
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	m := &Manager{opts: Options{Interval: time.Minute, Logger: quiet}, parser: parser.NewParser(parser.Options{})}
	c := newClusterRules(m, ClusterOptions{Client: cli, NodeID: "me", Peer: peer})
	began := time.Now()
	view := c.view(ctx)
	took := time.Since(began)
	if took < PeerTimeout || took > PeerTimeout+5*time.Second {
		t.Errorf("the view took %v: the two silent evaluators must be asked at once, each for %v", took, PeerTimeout)
	}
	got := map[string]groupState{}
	for _, g := range view {
		got[g.Name] = g
	}
	if len(view) != 6 || len(got) != 6 {
		t.Fatalf("view: %+v", view)
	}
	cur := got["current"]
	if !cur.LastEvaluation.Equal(evaluated) || len(cur.Rules) != 2 || cur.Rules[0].Health != promrules.HealthBad || cur.Rules[0].LastError != "boom" ||
		cur.Rules[1].State != "pending" || len(cur.Rules[1].Alerts) != 1 {
		t.Errorf("the answered group: %+v", cur)
	}
	for g, want := range map[string]string{"old": "datanode dn-old, evaluating this group, is older", "slow": "datanode dn-slow, evaluating this group, did not answer",
		"slow2": "datanode dn-slow2, evaluating this group, did not answer", "gone": "datanode dn-gone, evaluating this group, is not registered", "none": ""} {
		gs := got[g]
		if gs.File != "ns" || gs.Interval != 60 || len(gs.Rules) != 2 || !gs.LastEvaluation.IsZero() {
			t.Errorf("%s: %+v", g, gs)
			continue
		}
		for _, r := range gs.Rules {
			if r.Health != promrules.HealthUnknown || !strings.HasPrefix(r.LastError, want) || (want == "") != (r.LastError == "") {
				t.Errorf("%s: rule %s: health %s, lastError %q, want it to begin %q", g, r.Name, r.Health, r.LastError, want)
			}
		}
		if a := gs.Rules[1]; a.Type != "alerting" || a.Name != "A" || a.State != "inactive" || a.Duration != 60 || a.Labels.Get("severity") != "page" || a.Query != "vector(1)" {
			t.Errorf("%s: alerting rule %+v", g, a)
		}
		if r := gs.Rules[0]; r.Type != "recording" || r.Name != "r:"+g || r.Query != "sum(up)" {
			t.Errorf("%s: recording rule %+v", g, r)
		}
	}
}
