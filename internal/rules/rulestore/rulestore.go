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
)

// Rule groups loaded into a cluster live in etcd, beside the catalog:
//
//	/strata/rules/groups/{namespace}/{group}  one group (a rule file of that group alone, YAML)
//	/strata/rules/owners/{namespace}/{group}  the datanode evaluating it (its id), under that datanode's rules lease
//	/strata/rules/nodes/{id}                  a datanode evaluating rules, under its rules lease
//
// {group} is the group's name path-escaped (url.PathEscape). A namespace
// is what `strata rules load` names (default: the file's base name
// without extension); loading a namespace replaces all of its groups in
// one transaction. They are changed only through metasrv's admin API.
const (
	StorePrefix  = "/strata/rules/"
	GroupsPrefix = StorePrefix + "groups/"
	OwnersPrefix = StorePrefix + "owners/"
	NodesPrefix  = StorePrefix + "nodes/"
)

// ErrBadRuleFiles is the class of a load refused because a rule file is
// missing or invalid; nothing of the files was applied.
var ErrBadRuleFiles = errors.New("rules: bad rule files")

// ErrBadNamespace is the class of an invalid namespace name.
var ErrBadNamespace = errors.New("rules: bad namespace")

// StoredGroup is a group stored in etcd.
type StoredGroup struct {
	Namespace string
	Group     rulefmt.RuleGroup
	// Content is the group alone as a rule file (what the key holds).
	Content []byte
}

// Key is the group's key under GroupsPrefix (and OwnersPrefix).
func (g StoredGroup) Key() string { return GroupKey(g.Namespace, g.Group.Name) }

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

// Load validates every file and, if all are good, replaces each file's
// namespace with the file's groups in one etcd transaction: a bad file
// (ErrBadRuleFiles, with file, line and reason) or namespace
// (ErrBadNamespace) changes nothing. Two files naming one namespace are
// refused.
func Load(ctx context.Context, cli *clientv3.Client, files []RuleFile) (LoadResult, error) {
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
		keep[g.Key()] = true
		ops = append(ops, clientv3.OpPut(GroupsPrefix+g.Key(), string(g.Content)))
	}
	for ns := range seen {
		resp, err := cli.Get(ctx, GroupsPrefix+ns+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return LoadResult{}, fmt.Errorf("rules: read namespace %q: %w", ns, err)
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(GroupsPrefix+ns+"/").WithPrefix(), "<", resp.Header.Revision+1))
		for _, kv := range resp.Kvs {
			rel := strings.TrimPrefix(string(kv.Key), GroupsPrefix)
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

// List returns the stored groups (of one namespace, if given), ordered by
// namespace and key, each with its evaluator.
func List(ctx context.Context, cli *clientv3.Client, namespace string) ([]StoredGroupInfo, error) {
	prefix := ""
	if namespace != "" {
		if err := CheckNamespace(namespace); err != nil {
			return nil, err
		}
		prefix = namespace + "/"
	}
	resp, err := cli.Txn(ctx).Then(clientv3.OpGet(GroupsPrefix+prefix, clientv3.WithPrefix()), clientv3.OpGet(OwnersPrefix+prefix, clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, fmt.Errorf("rules: list: %w", err)
	}
	owners := map[string]string{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		owners[strings.TrimPrefix(string(kv.Key), OwnersPrefix)] = string(kv.Value)
	}
	var out []StoredGroupInfo
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		rel := strings.TrimPrefix(string(kv.Key), GroupsPrefix)
		g, err := decodeGroup(rel, kv.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, StoredGroupInfo{StoredGroup: g, Owner: owners[rel]})
	}
	return out, nil
}

// decodeGroup reads a stored group.
func decodeGroup(rel string, content []byte) (StoredGroup, error) {
	ns, name, ok := ParseGroupKey(rel)
	if !ok {
		return StoredGroup{}, fmt.Errorf("rules: bad key %q", GroupsPrefix+rel)
	}
	var rgs rulefmt.RuleGroups
	if err := yaml.Unmarshal(content, &rgs); err != nil || len(rgs.Groups) != 1 || rgs.Groups[0].Name != name {
		return StoredGroup{}, fmt.Errorf("rules: key %q does not hold group %q: %v", GroupsPrefix+rel, name, err)
	}
	return StoredGroup{Namespace: ns, Group: rgs.Groups[0], Content: content}, nil
}

// ErrNotFound is returned by Delete when there is nothing to delete.
var ErrNotFound = errors.New("rules: not found")

// Delete removes a namespace, or one group of it; it returns how many
// groups were removed (ErrNotFound if none).
func Delete(ctx context.Context, cli *clientv3.Client, namespace, group string) (int, error) {
	if err := CheckNamespace(namespace); err != nil {
		return 0, err
	}
	var resp *clientv3.DeleteResponse
	var err error
	if group == "" {
		resp, err = cli.Delete(ctx, GroupsPrefix+namespace+"/", clientv3.WithPrefix())
	} else {
		resp, err = cli.Delete(ctx, GroupsPrefix+GroupKey(namespace, group))
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
