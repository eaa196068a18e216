package rulestore_test

import (
	"context"
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/rules/rulestore"
	"github.com/stratadb/strata/internal/tenant"
)

// TestTenantsNamespacesApart: tenants a and b and the default tenant
// load a namespace of one name with a group of one name; each lists,
// replaces and deletes its own only, the default tenant's keys are those
// of before tenants, and a default namespace named like the tenants'
// prefix ("tenants", "__t") reaches no tenant's group.
func TestTenantsNamespacesApart(t *testing.T) {
	ctx := context.Background()
	cli := clustertest.Etcd(t)
	file := func(expr string) []byte {
		return []byte("groups:\n  - name: g\n    rules:\n      - record: r\n        expr: " + expr + "\n")
	}
	for _, c := range []struct{ tenant, ns, expr string }{
		{"a", "ns", "vector(1)"}, {"b", "ns", "vector(2)"}, {tenant.Default, "ns", "vector(3)"},
		{"", "tenants", "vector(4)"}, {"", "__t", "vector(5)"},
	} {
		res, err := rulestore.LoadTenant(ctx, cli, c.tenant, []rulestore.RuleFile{{Namespace: c.ns, Content: file(c.expr)}})
		if err != nil || len(res.Groups) != 1 {
			t.Fatalf("load %s's %s: %+v, %v", c.tenant, c.ns, res, err)
		}
	}
	keys := func(prefix string) []string {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, kv := range resp.Kvs {
			out = append(out, string(kv.Key))
		}
		return out
	}
	if got, want := keys(rulestore.StorePrefix), []string{
		"/strata/rules/groups/__t/g", "/strata/rules/groups/ns/g", "/strata/rules/groups/tenants/g",
		"/strata/rules/tenants/a/groups/ns/g", "/strata/rules/tenants/b/groups/ns/g",
	}; !equal(got, want) {
		t.Fatalf("keys %q, want %q", got, want)
	}
	expr := func(tn string) map[string]string {
		gs, err := rulestore.ListTenant(ctx, cli, tn, "")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, g := range gs {
			if g.Tenant != tn {
				t.Errorf("%s's group %s is of tenant %q", tn, g.Key(), g.Tenant)
			}
			out[g.Namespace+"/"+g.Group.Name] = g.Group.Rules[0].Expr
		}
		return out
	}
	if got := expr("a"); len(got) != 1 || got["ns/g"] != "vector(1)" {
		t.Errorf("a's groups: %v", got)
	}
	if got := expr("b"); len(got) != 1 || got["ns/g"] != "vector(2)" {
		t.Errorf("b's groups: %v", got)
	}
	if got := expr(tenant.Default); len(got) != 3 || got["ns/g"] != "vector(3)" || got["__t/g"] != "vector(5)" {
		t.Errorf("the default tenant's groups: %v", got)
	}
	if gs, err := rulestore.List(ctx, cli, ""); err != nil || len(gs) != 3 {
		t.Errorf("List (the default tenant's): %d groups, %v", len(gs), err)
	}

	// Replacing a's namespace removes a's group only.
	res, err := rulestore.LoadTenant(ctx, cli, "a", []rulestore.RuleFile{{Namespace: "ns", Content: []byte("groups:\n  - name: h\n    rules:\n      - record: r\n        expr: vector(6)\n")}})
	if err != nil || len(res.Removed) != 1 || res.Removed[0] != "ns/g" {
		t.Fatalf("reload a's ns: %+v, %v", res, err)
	}
	if got := expr("b"); got["ns/g"] != "vector(2)" {
		t.Errorf("b's groups after a's reload: %v", got)
	}
	// Deleting the default namespaces named like the tenants' keys, and
	// a's namespace, leaves b's.
	for _, c := range []struct{ tenant, ns string }{{"", "__t"}, {"", "tenants"}, {"a", "ns"}} {
		if n, err := rulestore.DeleteTenant(ctx, cli, c.tenant, c.ns, ""); n != 1 || err != nil {
			t.Fatalf("delete %q's %s: %d, %v", c.tenant, c.ns, n, err)
		}
	}
	if _, err := rulestore.DeleteTenant(ctx, cli, "a", "ns", "h"); !errors.Is(err, rulestore.ErrNotFound) {
		t.Errorf("delete a's deleted group: %v", err)
	}
	if got := expr("b"); len(got) != 1 || got["ns/g"] != "vector(2)" {
		t.Errorf("b's groups after the deletes: %v", got)
	}
	if got := expr(tenant.Default); len(got) != 1 || got["ns/g"] != "vector(3)" {
		t.Errorf("the default tenant's groups after the deletes: %v", got)
	}

	// A bad tenant name changes nothing.
	if _, err := rulestore.LoadTenant(ctx, cli, "a/b", []rulestore.RuleFile{{Namespace: "ns", Content: file("vector(1)")}}); !errors.Is(err, tenant.ErrInvalid) {
		t.Errorf("load as tenant a/b: %v", err)
	}
	if _, err := rulestore.ListTenant(ctx, cli, "..", ""); !errors.Is(err, tenant.ErrInvalid) {
		t.Errorf("list as tenant ..: %v", err)
	}
	if _, err := rulestore.DeleteTenant(ctx, cli, "a|b", "ns", ""); !errors.Is(err, tenant.ErrInvalid) {
		t.Errorf("delete as tenant a|b: %v", err)
	}
}

// TestGroupIDs: a group's ID is its default tenant's key as before
// tenants, and another tenant's names the tenant; IDs and keys go both
// ways.
func TestGroupIDs(t *testing.T) {
	for _, c := range []struct{ tenant, ns, group, id, groups, owners string }{
		{tenant.Default, "ns", "g", "ns/g", "/strata/rules/groups/ns/g", "/strata/rules/owners/ns/g"},
		{tenant.Default, "__t", "a/b", "__t/a%2Fb", "/strata/rules/groups/__t/a%2Fb", "/strata/rules/owners/__t/a%2Fb"},
		{"a", "ns", "g x", "__t/a/ns/g%20x", "/strata/rules/tenants/a/groups/ns/g%20x", "/strata/rules/tenants/a/owners/ns/g%20x"},
	} {
		id := rulestore.ID(c.tenant, c.ns, c.group)
		if id != c.id {
			t.Errorf("ID(%s, %s, %s) = %q, want %q", c.tenant, c.ns, c.group, id, c.id)
		}
		if tn, ns, g, ok := rulestore.ParseID(id); !ok || tn != c.tenant || ns != c.ns || g != c.group {
			t.Errorf("ParseID(%q) = %s, %s, %s, %v", id, tn, ns, g, ok)
		}
		if k := rulestore.GroupsKeyOf(id); k != c.groups {
			t.Errorf("GroupsKeyOf(%q) = %q, want %q", id, k, c.groups)
		}
		if k := rulestore.OwnersKeyOf(id); k != c.owners {
			t.Errorf("OwnersKeyOf(%q) = %q, want %q", id, k, c.owners)
		}
		if c.tenant == tenant.Default {
			continue
		}
		for _, k := range []string{c.groups, c.owners} {
			got, owner, ok := rulestore.IDOfKey(k[len(rulestore.TenantsPrefix):])
			if !ok || got != id || owner != (k == c.owners) {
				t.Errorf("IDOfKey(%q) = %q, %v, %v", k, got, owner, ok)
			}
		}
	}
	for _, rel := range []string{"a", "a/groups", "a/other/ns/g", "default/groups/ns/g", "a|b/groups/ns/g", "a/groups/ns"} {
		if id, _, ok := rulestore.IDOfKey(rel); ok {
			t.Errorf("IDOfKey(%q) = %q: not a group's key", rel, id)
		}
	}
	for _, id := range []string{"nogroup", "ns/%zz", "__t/a/ns/x/g"} {
		if _, _, _, ok := rulestore.ParseID(id); ok {
			t.Errorf("ParseID(%q): not an ID", id)
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
