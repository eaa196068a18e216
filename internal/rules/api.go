package rules

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	promrules "github.com/prometheus/prometheus/rules"

	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/tenant"
)

// Register serves the Prometheus HTTP API's /api/v1/rules and
// /api/v1/alerts on mux, in Prometheus' JSON shape, and POST /-/reload,
// which loads the rule files again (Prometheus' lifecycle endpoint). A nil Manager answers no
// groups and no alerts, and has no /-/reload. A datanode of a cluster
// answers every group of the cluster (view.go).
func Register(mux *http.ServeMux, m *Manager) {
	mux.HandleFunc("GET /api/v1/rules", m.serveRules)
	mux.HandleFunc("GET /api/v1/alerts", m.serveAlerts)
	if m != nil {
		mux.HandleFunc("POST /-/reload", m.serveReload)
	}
}

// The answers' types, as Prometheus' web/api/v1 writes them.
type (
	ruleDiscovery struct {
		Groups []*ruleGroup `json:"groups"`
	}
	ruleGroup struct {
		Name           string    `json:"name"`
		File           string    `json:"file"`
		Rules          []any     `json:"rules"` // alertingRule and recordingRule, in the group's order
		Interval       float64   `json:"interval"`
		Limit          int       `json:"limit"`
		EvaluationTime float64   `json:"evaluationTime"`
		LastEvaluation time.Time `json:"lastEvaluation"`
	}
	alertingRule struct {
		State          string               `json:"state"` // pending, firing or inactive
		Name           string               `json:"name"`
		Query          string               `json:"query"`
		Duration       float64              `json:"duration"`
		KeepFiringFor  float64              `json:"keepFiringFor"`
		Labels         labels.Labels        `json:"labels"`
		Annotations    labels.Labels        `json:"annotations"`
		Alerts         []*alert             `json:"alerts"`
		Health         promrules.RuleHealth `json:"health"`
		LastError      string               `json:"lastError,omitempty"`
		EvaluationTime float64              `json:"evaluationTime"`
		LastEvaluation time.Time            `json:"lastEvaluation"`
		Type           string               `json:"type"` // "alerting"
	}
	recordingRule struct {
		Name           string               `json:"name"`
		Query          string               `json:"query"`
		Labels         labels.Labels        `json:"labels"`
		Health         promrules.RuleHealth `json:"health"`
		LastError      string               `json:"lastError,omitempty"`
		EvaluationTime float64              `json:"evaluationTime"`
		LastEvaluation time.Time            `json:"lastEvaluation"`
		Type           string               `json:"type"` // "recording"
	}
	alert struct {
		Labels          labels.Labels `json:"labels"`
		Annotations     labels.Labels `json:"annotations"`
		State           string        `json:"state"`
		ActiveAt        *time.Time    `json:"activeAt,omitempty"`
		KeepFiringSince *time.Time    `json:"keepFiringSince,omitempty"`
		Value           string        `json:"value"`
	}
)

func apiAlerts(as []*promrules.Alert) []*alert {
	out := make([]*alert, len(as))
	for i, a := range as {
		out[i] = &alert{Labels: a.Labels, Annotations: a.Annotations, State: a.State.String(), ActiveAt: &a.ActiveAt,
			Value: strconv.FormatFloat(a.Value, 'e', -1, 64)}
		if !a.KeepFiringSince.IsZero() {
			out[i].KeepFiringSince = &a.KeepFiringSince
		}
	}
	return out
}

// requestTenant is the one tenant whose rules a request asks for (its
// X-Scope-OrgID; auth checked that the caller may name it). A federated
// header (a|b) is refused, 400: a rule group and its alerts are one
// tenant's, and Prometheus' answer has no place to say whose.
func requestTenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	t, err := tenant.One(r.Header.Get(tenant.Header))
	if err != nil {
		prom.FailBadData(w, fmt.Errorf("%w (the rules and alerts of one tenant are asked for at a time)", err))
		return "", false
	}
	return t, true
}

// serveAlerts answers every active (pending or firing) alert of the
// request's tenant: of the groups evaluated here, and with a cluster of
// every stored group, from its evaluator (view.go).
func (m *Manager) serveAlerts(w http.ResponseWriter, r *http.Request) {
	t, ok := requestTenant(w, r)
	if !ok {
		return
	}
	out := []*alert{}
	if m != nil {
		for _, g := range m.view(r.Context(), t) {
			for _, rule := range g.Rules {
				out = append(out, rule.Alerts...)
			}
		}
	}
	prom.Respond(w, map[string]any{"alerts": out})
}

// serveRules answers the rule groups of the request's tenant and their
// rules' state: the groups evaluated here, and with a cluster every
// stored group, with its evaluator's state (view.go). Filters, as
// Prometheus': type (alert or record), rule_name[], rule_group[], file[],
// match[] (series selectors over a rule's labels) and exclude_alerts. A
// group none of whose rules pass is left out.
func (m *Manager) serveRules(w http.ResponseWriter, r *http.Request) {
	t, ok := requestTenant(w, r)
	if !ok {
		return
	}
	if err := r.ParseForm(); err != nil {
		prom.FailBadData(w, fmt.Errorf("error parsing form values: %w", err))
		return
	}
	typ := strings.ToLower(r.Form.Get("type"))
	if typ != "" && typ != "alert" && typ != "record" {
		prom.FailBadData(w, fmt.Errorf("invalid parameter \"type\": not supported value %q", typ))
		return
	}
	excludeAlerts := false
	if s := r.Form.Get("exclude_alerts"); s != "" {
		var err error
		if excludeAlerts, err = strconv.ParseBool(strings.ToLower(s)); err != nil {
			prom.FailBadData(w, fmt.Errorf("invalid parameter \"exclude_alerts\": %w", err))
			return
		}
	}
	var matcherSets [][]*labels.Matcher
	p := parser.NewParser(parser.Options{})
	for _, s := range r.Form["match[]"] {
		ms, err := p.ParseMetricSelector(s)
		if err != nil {
			prom.FailBadData(w, fmt.Errorf("invalid parameter \"match[]\": %w", err))
			return
		}
		matcherSets = append(matcherSets, ms)
	}
	if r.Form.Get("group_limit") != "" || r.Form.Get("group_next_token") != "" {
		prom.FailBadData(w, errors.New("group_limit and group_next_token (paging) are not supported: Strata answers every group at once"))
		return
	}
	names, groupNames, files := set(r.Form["rule_name[]"]), set(r.Form["rule_group[]"]), set(r.Form["file[]"])
	out := ruleDiscovery{Groups: []*ruleGroup{}}
	if m == nil {
		prom.Respond(w, out)
		return
	}
	for _, g := range m.view(r.Context(), t) {
		if !groupNames.has(g.Name) || !files.has(g.File) {
			continue
		}
		ag := &ruleGroup{Name: g.Name, File: g.File, Rules: []any{}, Interval: g.Interval, Limit: g.Limit,
			EvaluationTime: g.EvaluationTime, LastEvaluation: g.LastEvaluation}
		for _, rule := range g.Rules {
			if !names.has(rule.Name) || !matchesAny(matcherSets, rule.Labels) {
				continue
			}
			switch rule.Type {
			case "alerting":
				if typ == "record" {
					continue
				}
				alerts := rule.Alerts
				if excludeAlerts {
					alerts = nil
				} else if alerts == nil {
					alerts = []*alert{}
				}
				ag.Rules = append(ag.Rules, alertingRule{State: rule.State, Name: rule.Name, Query: rule.Query,
					Duration: rule.Duration, KeepFiringFor: rule.KeepFiringFor, Labels: rule.Labels,
					Annotations: rule.Annotations, Alerts: alerts, Health: rule.Health, LastError: rule.LastError,
					EvaluationTime: rule.EvaluationTime, LastEvaluation: rule.LastEvaluation, Type: "alerting"})
			case "recording":
				if typ == "alert" {
					continue
				}
				ag.Rules = append(ag.Rules, recordingRule{Name: rule.Name, Query: rule.Query, Labels: rule.Labels,
					Health: rule.Health, LastError: rule.LastError, EvaluationTime: rule.EvaluationTime,
					LastEvaluation: rule.LastEvaluation, Type: "recording"})
			}
		}
		if len(ag.Rules) > 0 {
			out.Groups = append(out.Groups, ag)
		}
	}
	prom.Respond(w, out)
}

// matchesAny reports whether lset passes one of the matcher sets (each
// set's matchers all), or there are none: Prometheus' Group.Rules.
func matchesAny(sets [][]*labels.Matcher, lset labels.Labels) bool {
	if len(sets) == 0 {
		return true
	}
	for _, ms := range sets {
		ok := true
		for _, m := range ms {
			if !m.Matches(lset.Get(m.Name)) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// serveReload loads the rule files again: 200 when they were applied,
// 500 with every problem when they were not (Prometheus' answers).
func (m *Manager) serveReload(w http.ResponseWriter, r *http.Request) {
	if err := m.Reload(); err != nil {
		http.Error(w, fmt.Sprintf("failed to reload rules: %v", err), http.StatusInternalServerError)
	}
}

// filter is a set of wanted values; an empty one wants every value.
type filter map[string]bool

func set(vs []string) filter {
	f := filter{}
	for _, v := range vs {
		f[v] = true
	}
	return f
}

func (f filter) has(v string) bool { return len(f) == 0 || f[v] }
