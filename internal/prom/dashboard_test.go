package prom_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// TestGrafanaDashboard parses every expression of deploy/grafana/strata.json
// with Prometheus' parser and checks that every metric it reads is one a
// Strata node exports.
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("../../deploy/grafana/strata.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}

	// What a node exports: every registered collector's names, with the
	// object store opened by the node (so its metrics are registered too).
	dir := t.TempDir()
	n := servertest.Start(t, nil, servertest.Options{Config: func(c *server.Config) { c.Bucket, c.Store = nil, "file://"+dir }})
	descs := make(chan *prometheus.Desc, 1000)
	n.Registry.Describe(descs)
	close(descs)
	exported := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			exported[m[1]] = true
		}
	}
	known := func(name string) bool {
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && exported[base] {
				return true
			}
		}
		return false
	}

	// Grafana's variables stand for a duration or a label regex.
	vars := regexp.MustCompile(`\$\{?(\w+)\}?`)
	substitute := func(expr string) string {
		return vars.ReplaceAllStringFunc(expr, func(v string) string {
			if strings.Contains(v, "__rate_interval") || strings.Contains(v, "__interval") || strings.Contains(v, "__range") {
				return "5m"
			}
			return ".*"
		})
	}
	p := parser.NewParser(parser.Options{})
	used := map[string]bool{}
	exprs := 0
	for _, panel := range dash.Panels {
		if panel.Type == "row" {
			continue
		}
		if len(panel.Targets) == 0 {
			t.Errorf("panel %q has no query", panel.Title)
		}
		for _, target := range panel.Targets {
			exprs++
			expr, err := p.ParseExpr(substitute(target.Expr))
			if err != nil {
				t.Errorf("panel %q: %q: %v", panel.Title, target.Expr, err)
				continue
			}
			names := 0
			parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
				vs, ok := node.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				for _, m := range vs.LabelMatchers {
					if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
						names++
						used[m.Value] = true
						if !known(m.Value) {
							t.Errorf("panel %q reads %s, which Strata does not export", panel.Title, m.Value)
						}
					}
				}
				return nil
			})
			if names == 0 {
				t.Errorf("panel %q: %q names no metric", panel.Title, target.Expr)
			}
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((\w+), *\w+\)$`)
	for _, v := range dash.Templating.List {
		if v.Definition == "" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil || !known(m[1]) {
			t.Errorf("variable %s: %q is not label_values of an exported metric", v.Name, v.Definition)
		}
	}
	t.Logf("%d expressions over %d metrics, all parsed and exported", exprs, len(used))
}
