package rules

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"

	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/rules/rulestore"
)

// TestReconcileTenantKeys: the evaluators read every tenant's groups
// and owners by ID, and skip a key under the tenants' prefix that is no
// group's, reconciling the others.
func TestReconcileTenantKeys(t *testing.T) {
	ctx := context.Background()
	cli := clustertest.Etcd(t)
	const group = "groups:\n  - name: g\n    rules:\n      - record: r\n        expr: vector(1)\n"
	for _, tn := range []string{"default", "a", "b"} {
		if _, err := rulestore.LoadTenant(ctx, cli, tn, []rulestore.RuleFile{{Namespace: "ns", Content: []byte(group)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Put(ctx, rulestore.OwnersKeyOf(rulestore.ID("b", "ns", "g")), "elsewhere"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"junk", "a/junk/ns/g", "a|b/groups/ns/g"} {
		if _, err := cli.Put(ctx, rulestore.TenantsPrefix+k, group); err != nil {
			t.Fatal(err)
		}
	}
	m := &Manager{opts: Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, parser: parser.NewParser(parser.Options{})}
	c := newClusterRules(m, ClusterOptions{Client: cli, NodeID: "me"})
	defer c.cancel()
	if err := c.reconcile(); err != nil { // no lease yet: nothing claimed, the unowned noted
		t.Fatal(err)
	}
	var unowned []string
	for id := range c.unowned {
		unowned = append(unowned, id)
	}
	slices.Sort(unowned)
	if want := []string{"__t/a/ns/g", "ns/g"}; !slices.Equal(unowned, want) { // b's is owned
		t.Errorf("unowned groups %q, want %q", unowned, want)
	}
}
