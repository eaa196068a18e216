package rules

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	promrules "github.com/prometheus/prometheus/rules"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/rules/rulestore"
	"github.com/stratadb/strata/internal/tenant"
)

// The cluster's view of the rules, for /api/v1/rules and /api/v1/alerts
// on any datanode: the rule files' groups evaluated here, and every
// stored group, each with the state its evaluator reports (asked over
// gRPC, ClusterOptions.Peer), or health "unknown" when no datanode
// evaluates it now or its evaluator did not answer.
//
// A request sees its tenant's groups only (its X-Scope-OrgID, which auth
// checked): the default tenant the rule files' groups and its stored
// ones, another tenant its stored ones.

// PeerTimeout bounds the question to each evaluator (they are asked at
// once), and the read of the stored groups.
const PeerTimeout = 5 * time.Second

// groupState is a group's state, unfiltered: what a datanode reports of
// the groups it evaluates (RuleGroups RPC, as JSON), and what the API
// answers after its filters.
type groupState struct {
	// Tenant is the stored group's tenant; empty for the default tenant's
	// (what a datanode from before tenants reports).
	Tenant         string      `json:"tenant,omitempty"`
	Name           string      `json:"name"`
	File           string      `json:"file"`
	Interval       float64     `json:"interval"`
	Limit          int         `json:"limit"`
	EvaluationTime float64     `json:"evaluationTime"`
	LastEvaluation time.Time   `json:"lastEvaluation"`
	Rules          []ruleState `json:"rules"`
}

// ruleState is a rule's state; Type is "alerting" or "recording", the
// alerting fields are empty for a recording rule.
type ruleState struct {
	Type           string               `json:"type"`
	Name           string               `json:"name"`
	Query          string               `json:"query"`
	Labels         labels.Labels        `json:"labels"`
	Health         promrules.RuleHealth `json:"health"`
	LastError      string               `json:"lastError,omitempty"`
	EvaluationTime float64              `json:"evaluationTime"`
	LastEvaluation time.Time            `json:"lastEvaluation"`
	State          string               `json:"state,omitempty"`
	Duration       float64              `json:"duration,omitempty"`
	KeepFiringFor  float64              `json:"keepFiringFor,omitempty"`
	Annotations    labels.Labels        `json:"annotations"`
	Alerts         []*alert             `json:"alerts,omitempty"`
}

// stateOf is the state of a group running here.
func stateOf(g *promrules.Group) groupState {
	gs := groupState{Name: g.Name(), File: tenant.Base(g.File()), Interval: g.Interval().Seconds(), Limit: g.Limit(),
		EvaluationTime: g.GetEvaluationTime().Seconds(), LastEvaluation: g.GetLastEvaluation(), Rules: []ruleState{}}
	for _, rule := range g.Rules() {
		rs := ruleState{Name: rule.Name(), Labels: rule.Labels(), Health: rule.Health(),
			EvaluationTime: rule.GetEvaluationDuration().Seconds(), LastEvaluation: rule.GetEvaluationTimestamp()}
		if err := rule.LastError(); err != nil {
			rs.LastError = err.Error()
		}
		switch rule := rule.(type) {
		case *promrules.AlertingRule:
			rs.Type, rs.Query, rs.State = "alerting", rule.Query().String(), rule.State().String()
			rs.Duration, rs.KeepFiringFor = rule.HoldDuration().Seconds(), rule.KeepFiringFor().Seconds()
			rs.Annotations, rs.Alerts = rule.Annotations(), apiAlerts(rule.ActiveAlerts())
		case *promrules.RecordingRule:
			rs.Type, rs.Query = "recording", rule.Query().String()
		default:
			continue
		}
		gs.Rules = append(gs.Rules, rs)
	}
	return gs
}

// unknownState is a stored group's state when it is not known: as stored,
// every rule's health "unknown", with lastError why, if given.
func (m *Manager) unknownState(sg rulestore.StoredGroupInfo, why string) groupState {
	g := sg.Group
	gs := groupState{Tenant: tenantField(sg.Tenant), Name: g.Name, File: sg.Namespace, Interval: cmpDuration(time.Duration(g.Interval), m.opts.Interval).Seconds(),
		Limit: g.Limit, Rules: []ruleState{}}
	for _, r := range g.Rules {
		query := r.Expr
		if e, err := m.parser.ParseExpr(r.Expr); err == nil {
			query = e.String()
		}
		rs := ruleState{Name: r.Record, Query: query, Labels: labels.FromMap(r.Labels), Health: promrules.HealthUnknown, LastError: why}
		if r.Alert != "" {
			rs.Type, rs.Name, rs.State = "alerting", r.Alert, promrules.StateInactive.String()
			rs.Duration, rs.KeepFiringFor = time.Duration(r.For).Seconds(), time.Duration(r.KeepFiringFor).Seconds()
			rs.Annotations, rs.Alerts = labels.FromMap(r.Annotations), []*alert{}
		} else {
			rs.Type = "recording"
		}
		gs.Rules = append(gs.Rules, rs)
	}
	return gs
}

// tenantField is tenant t as groupState.Tenant holds it.
func tenantField(t string) string {
	if t == tenant.Default {
		return ""
	}
	return t
}

// localState is the state of a stored group running here.
func localState(g runningGroup) groupState {
	gs := stateOf(g.Group)
	gs.Tenant = tenantField(g.tenant)
	return gs
}

// view is tenant t's every group: for the default tenant the rule files'
// (evaluated here), and with a cluster every stored group of t (see
// above), ordered by file and name.
func (m *Manager) view(ctx context.Context, t string) []groupState {
	var out []groupState
	if t == tenant.Default {
		for _, g := range m.rules.RuleGroups() {
			out = append(out, stateOf(g))
		}
	}
	if m.cluster != nil {
		out = append(out, m.cluster.viewOf(ctx, t)...)
	}
	slices.SortStableFunc(out, func(a, b groupState) int {
		return cmp.Or(strings.Compare(a.File, b.File), strings.Compare(a.Name, b.Name))
	})
	return out
}

// LocalRuleGroups is the state of the stored groups this datanode
// evaluates now, as JSON (the RuleGroups RPC's answer).
func (m *Manager) LocalRuleGroups() ([]byte, error) {
	out := []groupState{}
	if m.cluster != nil {
		for _, g := range m.cluster.running() {
			out = append(out, localState(g))
		}
	}
	return json.Marshal(out)
}

// peerAnswer is what an evaluator reported.
type peerAnswer struct {
	groups map[string]groupState // by group ID
	err    error
}

// view is viewOf the default tenant.
func (c *clusterRules) view(ctx context.Context) []groupState { return c.viewOf(ctx, tenant.Default) }

// viewOf is every stored group of tenant t with its state. If the stored
// groups cannot be read, it is t's groups running here.
func (c *clusterRules) viewOf(ctx context.Context, t string) []groupState {
	local := map[string]groupState{}
	for _, g := range c.running() {
		if g.tenant == t {
			local[rulestore.ID(g.tenant, tenant.Base(g.File()), g.Name())] = localState(g)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, PeerTimeout)
	defer cancel()
	stored, err := rulestore.ListTenant(rctx, c.opts.Client, t, "")
	var nodes []cluster.NodeInfo
	if err == nil {
		nodes, err = datanodes(rctx, c)
	}
	if err != nil {
		c.m.opts.Logger.Warn("rules: cannot read the stored rule groups; answering the groups evaluated here", "err", err)
		out := make([]groupState, 0, len(local))
		for _, g := range local {
			out = append(out, g)
		}
		return out
	}
	addrs := map[string]string{}
	for _, n := range nodes {
		addrs[n.ID] = n.GRPCAddr
	}
	// Ask every other evaluator at once.
	answers := map[string]*peerAnswer{}
	for _, sg := range stored {
		if o := sg.Owner; o != "" && o != c.opts.NodeID && answers[o] == nil {
			answers[o] = &peerAnswer{}
		}
	}
	var wg sync.WaitGroup
	for id, a := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.groups, a.err = c.ask(ctx, id, addrs[id])
		}()
	}
	wg.Wait()
	out := make([]groupState, 0, len(stored))
	for _, sg := range stored {
		key := sg.Key()
		switch sg.Owner {
		case "":
			out = append(out, c.m.unknownState(sg, ""))
		case c.opts.NodeID:
			if g, ok := local[key]; ok {
				out = append(out, g)
			} else {
				out = append(out, c.m.unknownState(sg, ""))
			}
		default:
			a := answers[sg.Owner]
			if a.err != nil {
				out = append(out, c.m.unknownState(sg, a.err.Error()))
			} else if g, ok := a.groups[key]; ok {
				out = append(out, g)
			} else {
				out = append(out, c.m.unknownState(sg, ""))
			}
		}
	}
	return out
}

// ask asks datanode id, at gRPC address addr, for the groups it
// evaluates, within PeerTimeout.
func (c *clusterRules) ask(ctx context.Context, id, addr string) (map[string]groupState, error) {
	if addr == "" {
		return nil, fmt.Errorf("datanode %s, evaluating this group, is not registered (down?)", id)
	}
	if c.opts.Peer == nil {
		return nil, fmt.Errorf("datanode %s evaluates this group; its state is not asked for here", id)
	}
	ctx, cancel := context.WithTimeout(ctx, PeerTimeout)
	defer cancel()
	data, err := c.opts.Peer(ctx, addr)
	if status.Code(err) == codes.Unimplemented {
		return nil, fmt.Errorf("datanode %s, evaluating this group, is older than this one and does not report its state", id)
	}
	if err != nil {
		return nil, fmt.Errorf("datanode %s, evaluating this group, did not answer: %w", id, err)
	}
	var gs []groupState
	if err := json.Unmarshal(data, &gs); err != nil {
		return nil, fmt.Errorf("datanode %s, evaluating this group, answered garbage: %w", id, err)
	}
	out := make(map[string]groupState, len(gs))
	for _, g := range gs {
		out[rulestore.ID(cmp.Or(g.Tenant, tenant.Default), g.File, g.Name)] = g
	}
	return out, nil
}

// datanodes are the registered datanodes.
func datanodes(ctx context.Context, c *clusterRules) ([]cluster.NodeInfo, error) {
	resp, err := c.opts.Client.Get(ctx, cluster.DatanodesPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("rules: list datanodes: %w", err)
	}
	var out []cluster.NodeInfo
	for _, kv := range resp.Kvs {
		var n cluster.NodeInfo
		if json.Unmarshal(kv.Value, &n) == nil {
			out = append(out, n)
		}
	}
	return out, nil
}
