package rulestore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/rules/rulestore"
)

const fileA = `groups:
  - name: api
    interval: 30s
    rules:
      - record: job:up:sum
        expr: sum by (job) (up)
      - alert: Down
        expr: up == 0
        for: 5m
        labels:
          severity: page
        annotations:
          summary: "{{ $labels.job }} down"
  - name: a/b slash
    rules:
      - record: x:y
        expr: vector(1)
`

func names(gs []rulestore.StoredGroupInfo) string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Namespace+"/"+g.Group.Name)
	}
	return strings.Join(out, ",")
}

func TestLoadListDelete(t *testing.T) {
	ctx := context.Background()
	cli := clustertest.Etcd(t)
	res, err := rulestore.Load(ctx, cli, []rulestore.RuleFile{{Namespace: "a", Name: "a.yml", Content: []byte(fileA)}, {Namespace: "b", Name: "b.yml", Content: []byte("groups:\n  - name: g\n    rules:\n      - record: r\n        expr: vector(2)\n")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Groups) != 3 || len(res.Removed) != 0 {
		t.Fatalf("loaded %+v", res)
	}
	gs, err := rulestore.List(ctx, cli, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(gs); got != "a/a/b slash,a/api,b/g" {
		t.Fatalf("list: %s", got)
	}
	// The stored group is what the file said, parsed again.
	api := gs[1].Group
	if api.Interval.String() != "30s" || len(api.Rules) != 2 || api.Rules[1].Annotations["summary"] != "{{ $labels.job }} down" || api.Rules[1].For.String() != "5m" {
		t.Fatalf("stored group differs: %+v", api)
	}

	// A bad file, even beside a good one: nothing applied; file, line and reason.
	bad := "groups:\n  - name: g\n    rules:\n      - record: r\n        expr: sum(rate(x[5m])\n"
	_, err = rulestore.Load(ctx, cli, []rulestore.RuleFile{{Namespace: "a", Name: "a.yml", Content: []byte("groups: []\n")}, {Namespace: "b", Name: "/tmp/b.yml", Content: []byte(bad)}})
	if !errors.Is(err, rulestore.ErrBadRuleFiles) || !strings.Contains(err.Error(), "/tmp/b.yml: 5:15:") || !strings.Contains(err.Error(), "unclosed left parenthesis") {
		t.Fatalf("bad file: %v", err)
	}
	if gs, _ := rulestore.List(ctx, cli, ""); names(gs) != "a/a/b slash,a/api,b/g" {
		t.Fatalf("a refused load changed the rules: %s", names(gs))
	}
	if _, err := rulestore.Load(ctx, cli, []rulestore.RuleFile{{Namespace: "x/y", Content: []byte(fileA)}}); !errors.Is(err, rulestore.ErrBadNamespace) {
		t.Fatalf("bad namespace: %v", err)
	}
	if _, err := rulestore.Load(ctx, cli, []rulestore.RuleFile{{Namespace: "a", Name: "1", Content: []byte(fileA)}, {Namespace: "a", Name: "2", Content: []byte(fileA)}}); !errors.Is(err, rulestore.ErrBadNamespace) {
		t.Fatalf("one namespace twice: %v", err)
	}

	// Loading a namespace replaces it.
	res, err = rulestore.Load(ctx, cli, []rulestore.RuleFile{{Namespace: "a", Content: []byte("groups:\n  - name: api\n    rules:\n      - record: r\n        expr: vector(3)\n")}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Removed, ",") != "a/a%2Fb%20slash" {
		t.Fatalf("removed %v", res.Removed)
	}
	if gs, _ := rulestore.List(ctx, cli, "a"); names(gs) != "a/api" || gs[0].Group.Rules[0].Expr != "vector(3)" {
		t.Fatalf("after replacing a: %s", names(gs))
	}

	// Delete a group, then a namespace.
	if n, err := rulestore.Delete(ctx, cli, "b", "g"); n != 1 || err != nil {
		t.Fatalf("delete b/g: %d %v", n, err)
	}
	if _, err := rulestore.Delete(ctx, cli, "b", "g"); !errors.Is(err, rulestore.ErrNotFound) {
		t.Fatalf("delete b/g again: %v", err)
	}
	if n, err := rulestore.Delete(ctx, cli, "a", ""); n != 1 || err != nil {
		t.Fatalf("delete a: %d %v", n, err)
	}
	if gs, _ := rulestore.List(ctx, cli, ""); len(gs) != 0 {
		t.Fatalf("left: %s", names(gs))
	}
}
