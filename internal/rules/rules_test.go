package rules_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/prompb"

	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/rules"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// node is a standalone evaluating rules.
type node struct {
	*servertest.Node
	t    *testing.T
	base string
}

// start runs a standalone over dir and store (a restart when both are
// those of one before) evaluating opts; its log is printed if the test
// fails.
func start(t *testing.T, dir string, store objstore.Bucket, opts rules.Options) *node {
	t.Helper()
	logs := &clustertest.LogBuf{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("standalone log:\n%s", logs)
		}
	})
	n := servertest.Start(t, store, servertest.Options{Dir: dir, Config: func(c *server.Config) {
		c.Rules = opts
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}})
	return &node{Node: n, t: t, base: "http://" + n.HTTPAddr()}
}

// writeFile writes a rule file.
func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// series is one remote-written series.
type series struct {
	labels  map[string]string
	samples []prompb.Sample
}

// remoteWrite sends series through remote write 1.0.
func (n *node) remoteWrite(ss ...series) {
	n.t.Helper()
	req := &prompb.WriteRequest{}
	for _, s := range ss {
		ts := prompb.TimeSeries{Samples: s.samples}
		for k, v := range s.labels {
			ts.Labels = append(ts.Labels, prompb.Label{Name: k, Value: v})
		}
		req.Timeseries = append(req.Timeseries, ts)
	}
	raw, err := req.Marshal()
	if err != nil {
		n.t.Fatal(err)
	}
	resp, err := http.Post(n.base+"/api/v1/write", "application/x-protobuf", bytes.NewReader(snappy.Encode(nil, raw)))
	if err != nil {
		n.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		n.t.Fatalf("remote write: %s %s", resp.Status, body)
	}
}

// get answers a Prometheus API GET's data, decoded into out.
func (n *node) get(path string, q url.Values, out any) {
	n.t.Helper()
	resp, err := http.Get(n.base + path + "?" + q.Encode())
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil || resp.StatusCode != http.StatusOK || env.Status != "success" {
		n.t.Fatalf("GET %s %v: %s %s (%v)", path, q, resp.Status, body, err)
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		n.t.Fatalf("GET %s: %v: %s", path, err, env.Data)
	}
}

// The answers of /api/v1/rules and /api/v1/alerts, as a client reads them.
type (
	apiRules struct {
		Groups []struct {
			Name           string    `json:"name"`
			File           string    `json:"file"`
			Interval       float64   `json:"interval"`
			LastEvaluation time.Time `json:"lastEvaluation"`
			Rules          []apiRule `json:"rules"`
		} `json:"groups"`
	}
	apiRule struct {
		Name           string            `json:"name"`
		Query          string            `json:"query"`
		Type           string            `json:"type"`
		Health         string            `json:"health"`
		LastError      string            `json:"lastError"`
		State          string            `json:"state"`
		Duration       float64           `json:"duration"`
		Labels         map[string]string `json:"labels"`
		Alerts         []apiAlert        `json:"alerts"`
		LastEvaluation time.Time         `json:"lastEvaluation"`
	}
	apiAlert struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
		State       string            `json:"state"`
		ActiveAt    time.Time         `json:"activeAt"`
		Value       string            `json:"value"`
	}
)

func (n *node) rules(q url.Values) apiRules {
	n.t.Helper()
	var r apiRules
	n.get("/api/v1/rules", q, &r)
	return r
}

func (n *node) alerts() []apiAlert {
	n.t.Helper()
	var r struct {
		Alerts []apiAlert `json:"alerts"`
	}
	n.get("/api/v1/alerts", nil, &r)
	return r.Alerts
}

func rulesDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "rules")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func promTime(tms int64) string { return fmt.Sprintf("%d.%03d", tms/1000, tms%1000) }

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
