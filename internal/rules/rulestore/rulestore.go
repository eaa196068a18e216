// Package rulestore keeps the rule groups loaded into a cluster in etcd
// (metasrv's admin API writes them; package rules evaluates them).
package rulestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.yaml.in/yaml/v3"

	"github.com/stratadb/strata/internal/tenant"
)

// Rule groups loaded into a cluster live in etcd, beside the catalog:
//
//	/strata/rules/groups/{namespace}/{group}                   one group of the default tenant (a rule file of that group alone, YAML)
//	/strata/rules/owners/{namespace}/{group}                   the datanode evaluating it (its id), under that datanode's rules lease
//	/strata/rules/tenants/{tenant}/groups/{namespace}/{group}  one group of another tenant
//	/strata/rules/tenants/{tenant}/owners/{namespace}/{group}  the datanode evaluating it
//	/strata/rules/nodes/{id}                                   a datanode evaluating rules, under its rules lease
//
// {group} is the group's name path-escaped (url.PathEscape). A namespace
// is what `strata rules load` names (default: the file's base name
// without extension); loading a namespace replaces all of its groups in
// one transaction. They are changed only through metasrv's admin API.
//
// The default tenant's keys are those made before tenants. Another
// tenant's are under a prefix of their own beside groups/ and owners/,
// so that no prefix read or delete of a default namespace (whatever its
// name: "tenants" and "__t" are namespaces too) reaches them, nor one of
// a tenant's another's (a tenant name has no '/').
const (
	StorePrefix   = "/strata/rules/"
	GroupsPrefix  = StorePrefix + "groups/"
	OwnersPrefix  = StorePrefix + "owners/"
	NodesPrefix   = StorePrefix + "nodes/"
	TenantsPrefix = StorePrefix + "tenants/"
)

// GroupsPrefixOf is the prefix of tenant t's groups' keys.
func GroupsPrefixOf(t string) string {
	if t == tenant.Default || t == "" {
		return GroupsPrefix
	}
	return TenantsPrefix + t + "/groups/"
}

// OwnersPrefixOf is the prefix of tenant t's groups' owner keys.
func OwnersPrefixOf(t string) string {
	if t == tenant.Default || t == "" {
		return OwnersPrefix
	}
	return TenantsPrefix + t + "/owners/"
}

// ID is a group's identity among every tenant's groups (what the
// evaluators key, hash and lease a group by): GroupKey(namespace, group)
// for the default tenant's, as before tenants, and
// "__t/{tenant}/{namespace}/{group}" for another's (tenant.Qualify of the
// namespace). A namespace has no '/', so the two never meet.
func ID(t, namespace, group string) string {
	return GroupKey(tenant.Qualify(t, namespace), group)
}

// ParseID splits an ID into tenant, namespace and group name.
func ParseID(id string) (t, namespace, group string, ok bool) {
	i := strings.LastIndexByte(id, '/')
	if i < 0 {
		return "", "", "", false
	}
	group, err := url.PathUnescape(id[i+1:])
	if err != nil {
		return "", "", "", false
	}
	t, namespace = tenant.Split(id[:i])
	if strings.Contains(namespace, "/") {
		return "", "", "", false
	}
	return t, namespace, group, true
}

// GroupsKeyOf is the etcd key of the group of id, OwnersKeyOf its owner's.
func GroupsKeyOf(id string) string { return keyOf(id, GroupsPrefixOf) }

// OwnersKeyOf is the etcd key of the owner of the group of id.
func OwnersKeyOf(id string) string { return keyOf(id, OwnersPrefixOf) }

func keyOf(id string, prefix func(string) string) string {
	t, ns, g, _ := ParseID(id)
	return prefix(t) + GroupKey(ns, g)
}

// IDOfKey is the ID of a group's (or its owner's) key under
// TenantsPrefix: "{tenant}/{groups|owners}/{namespace}/{group}" relative
// to it; owner reports which.
func IDOfKey(rel string) (id string, owner, ok bool) {
	t, rest, ok1 := strings.Cut(rel, "/")
	kind, key, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 || tenant.Check(t) != nil || t == tenant.Default || kind != "groups" && kind != "owners" {
		return "", false, false
	}
	ns, g, ok := ParseGroupKey(key)
	if !ok {
		return "", false, false
	}
	return ID(t, ns, g), kind == "owners", true
}

// ErrBadRuleFiles is the class of a load refused because a rule file is
// missing or invalid; nothing of the files was applied.
var ErrBadRuleFiles = errors.New("rules: bad rule files")

// ErrBadNamespace is the class of an invalid namespace name.
var ErrBadNamespace = errors.New("rules: bad namespace")

// StoredGroup is a group stored in etcd.
type StoredGroup struct {
	// Tenant is the tenant whose namespace the group is of (tenant.Default
	// or empty: the default tenant's).
	Tenant    string
	Namespace string
	Group     rulefmt.RuleGroup
	// Content is the group alone as a rule file (what the key holds).
	Content []byte
}

// Key is the group's ID: for the default tenant's, its key under
// GroupsPrefix (and OwnersPrefix).
func (g StoredGroup) Key() string { return ID(g.Tenant, g.Namespace, g.Group.Name) }

// Name is the group's namespace and name as its tenant sees them:
// namespace/group, the group path-escaped (what Load reports removed).
func (g StoredGroup) Name() string { return GroupKey(g.Namespace, g.Group.Name) }

// GroupKey is the key of a namespace's group, relative to GroupsPrefix.
func GroupKey(namespace, group string) string { return namespace + "/" + url.PathEscape(group) }

// ParseGroupKey splits a relative key into namespace and group name.
func ParseGroupKey(rel string) (ns, group string, ok bool) {
	ns, esc, ok := strings.Cut(rel, "/")
	if !ok {
		return "", "", false
	}
	group, err := url.PathUnescape(esc)
	return ns, group, err == nil
}

// CheckNamespace refuses a name that cannot be a namespace: empty, with a
// '/', or longer than 200 bytes.
func CheckNamespace(ns string) error {
	if ns == "" || strings.ContainsAny(ns, "/\x00") || len(ns) > 200 || ns == "." || ns == ".." {
		return fmt.Errorf("%w %q: a namespace is 1 to 200 bytes without '/'", ErrBadNamespace, ns)
	}
	return nil
}

// ParseRuleFile parses and validates a rule file's content with rulefmt,
// as Prometheus does (unknown fields refused, expressions parsed,
// templates checked). name prefixes every problem, as a file's path does.
// It returns the file's groups, each alone as a rule file, or every
// problem (ErrBadRuleFiles).
func ParseRuleFile(name string, content []byte, namespace string) ([]StoredGroup, error) {
	rgs, errs := rulefmt.Parse(content, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		problems := make([]string, len(errs))
		for i, err := range errs {
			problems[i] = fmt.Sprintf("%s: %v", name, err)
		}
		return nil, fmt.Errorf("%w (nothing of them applied):\n  %s", ErrBadRuleFiles, strings.Join(problems, "\n  "))
	}
	out := make([]StoredGroup, 0, len(rgs.Groups))
	for _, g := range rgs.Groups {
		b, err := yaml.Marshal(rulefmt.RuleGroups{Groups: []rulefmt.RuleGroup{g}})
		if err != nil {
			return nil, fmt.Errorf("%w: %s: group %q: %v", ErrBadRuleFiles, name, g.Name, err)
		}
		out = append(out, StoredGroup{Namespace: namespace, Group: g, Content: b})
	}
	return out, nil
}

// RuleFile is a rule file to load into a namespace.
type RuleFile struct {
	Namespace string
	Name      string // for errors: the file's path
	Content   []byte
}

// LoadResult is what Load did.
type LoadResult struct {
	Groups  []StoredGroup // the groups loaded, by namespace and file order
	Removed []string      // keys (namespace/group) of groups no longer in their namespace
}

// Load is LoadTenant of the default tenant.
func Load(ctx context.Context, cli *clientv3.Client, files []RuleFile) (LoadResult, error) {
	return LoadTenant(ctx, cli, tenant.Default, files)
}

// LoadTenant validates every file and, if all are good, replaces each
// file's namespace of tenant t with the file's groups in one etcd
// transaction: a bad file (ErrBadRuleFiles, with file, line and reason),
// namespace (ErrBadNamespace) or tenant (tenant.ErrInvalid) changes
// nothing. Two files naming one namespace are refused.
func LoadTenant(ctx context.Context, cli *clientv3.Client, t string, files []RuleFile) (LoadResult, error) {
	t, err := checkTenant(t)
	if err != nil {
		return LoadResult{}, err
	}
	groups := GroupsPrefixOf(t)
	var res LoadResult
	var problems []string
	seen := map[string]string{}
	for _, f := range files {
		if err := CheckNamespace(f.Namespace); err != nil {
			return LoadResult{}, err
		}
		if prev, dup := seen[f.Namespace]; dup {
			return LoadResult{}, fmt.Errorf("%w %q: given by both %s and %s", ErrBadNamespace, f.Namespace, prev, f.Name)
		}
		seen[f.Namespace] = f.Name
		gs, err := ParseRuleFile(f.Name, f.Content, f.Namespace)
		if err != nil {
			_, msg, _ := strings.Cut(err.Error(), "\n  ")
			problems = append(problems, msg)
			continue
		}
		for i := range gs {
			gs[i].Tenant = t
		}
		res.Groups = append(res.Groups, gs...)
	}
	if len(problems) > 0 {
		return LoadResult{}, fmt.Errorf("%w (nothing of them applied):\n  %s", ErrBadRuleFiles, strings.Join(problems, "\n  "))
	}
	// Read the namespaces' keys, then replace them if none changed since.
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	keep := map[string]bool{}
	for _, g := range res.Groups {
		keep[g.Name()] = true
		ops = append(ops, clientv3.OpPut(groups+g.Name(), string(g.Content)))
	}
	for ns := range seen {
		resp, err := cli.Get(ctx, groups+ns+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return LoadResult{}, fmt.Errorf("rules: read namespace %q: %w", ns, err)
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(groups+ns+"/").WithPrefix(), "<", resp.Header.Revision+1))
		for _, kv := range resp.Kvs {
			rel := strings.TrimPrefix(string(kv.Key), groups)
			if !keep[rel] {
				res.Removed = append(res.Removed, rel)
				ops = append(ops, clientv3.OpDelete(string(kv.Key)))
			}
		}
	}
	slices.Sort(res.Removed)
	resp, err := cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return LoadResult{}, fmt.Errorf("rules: store: %w", err)
	}
	if !resp.Succeeded {
		return LoadResult{}, errors.New("rules: a namespace changed while it was being loaded; nothing applied, retry")
	}
	return res, nil
}

// StoredGroupInfo is a stored group and its evaluator.
type StoredGroupInfo struct {
	StoredGroup
	Owner string // the datanode evaluating it; empty: none now
}

// checkTenant is t, "" being the default tenant, or its error.
func checkTenant(t string) (string, error) {
	if t == "" {
		return tenant.Default, nil
	}
	return t, tenant.Check(t)
}

// List is ListTenant of the default tenant.
func List(ctx context.Context, cli *clientv3.Client, namespace string) ([]StoredGroupInfo, error) {
	return ListTenant(ctx, cli, tenant.Default, namespace)
}

// ListTenant returns tenant t's stored groups (of one namespace, if
// given), ordered by namespace and key, each with its evaluator.
func ListTenant(ctx context.Context, cli *clientv3.Client, t, namespace string) ([]StoredGroupInfo, error) {
	t, err := checkTenant(t)
	if err != nil {
		return nil, err
	}
	groups, owners := GroupsPrefixOf(t), OwnersPrefixOf(t)
	prefix := ""
	if namespace != "" {
		if err := CheckNamespace(namespace); err != nil {
			return nil, err
		}
		prefix = namespace + "/"
	}
	resp, err := cli.Txn(ctx).Then(clientv3.OpGet(groups+prefix, clientv3.WithPrefix()), clientv3.OpGet(owners+prefix, clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, fmt.Errorf("rules: list: %w", err)
	}
	owner := map[string]string{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		owner[strings.TrimPrefix(string(kv.Key), owners)] = string(kv.Value)
	}
	var out []StoredGroupInfo
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		rel := strings.TrimPrefix(string(kv.Key), groups)
		g, err := decodeGroup(t, groups, rel, kv.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, StoredGroupInfo{StoredGroup: g, Owner: owner[rel]})
	}
	return out, nil
}

// decodeGroup reads a stored group of tenant t, at key prefix+rel.
func decodeGroup(t, prefix, rel string, content []byte) (StoredGroup, error) {
	ns, name, ok := ParseGroupKey(rel)
	if !ok {
		return StoredGroup{}, fmt.Errorf("rules: bad key %q", prefix+rel)
	}
	var rgs rulefmt.RuleGroups
	if err := yaml.Unmarshal(content, &rgs); err != nil || len(rgs.Groups) != 1 || rgs.Groups[0].Name != name {
		return StoredGroup{}, fmt.Errorf("rules: key %q does not hold group %q: %v", prefix+rel, name, err)
	}
	return StoredGroup{Tenant: t, Namespace: ns, Group: rgs.Groups[0], Content: content}, nil
}

// ErrNotFound is returned by Delete when there is nothing to delete.
var ErrNotFound = errors.New("rules: not found")

// Delete is DeleteTenant of the default tenant.
func Delete(ctx context.Context, cli *clientv3.Client, namespace, group string) (int, error) {
	return DeleteTenant(ctx, cli, tenant.Default, namespace, group)
}

// DeleteTenant removes a namespace of tenant t, or one group of it; it
// returns how many groups were removed (ErrNotFound if none).
func DeleteTenant(ctx context.Context, cli *clientv3.Client, t, namespace, group string) (int, error) {
	t, err := checkTenant(t)
	if err != nil {
		return 0, err
	}
	if err := CheckNamespace(namespace); err != nil {
		return 0, err
	}
	groups := GroupsPrefixOf(t)
	var resp *clientv3.DeleteResponse
	if group == "" {
		resp, err = cli.Delete(ctx, groups+namespace+"/", clientv3.WithPrefix())
	} else {
		resp, err = cli.Delete(ctx, groups+GroupKey(namespace, group))
	}
	if err != nil {
		return 0, fmt.Errorf("rules: delete: %w", err)
	}
	if resp.Deleted == 0 {
		if group != "" {
			return 0, fmt.Errorf("%w: namespace %q has no group %q", ErrNotFound, namespace, group)
		}
		return 0, fmt.Errorf("%w: no namespace %q", ErrNotFound, namespace)
	}
	return int(resp.Deleted), nil
}
