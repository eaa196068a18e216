// Package scrapetest runs a real Prometheus, scraping itself and a real
// node_exporter, remote-writing to Strata and to VictoriaMetrics side by
// side, and checks that every sample Prometheus stored reached both.
//
// The binaries come from STRATA_PROMETHEUS_BIN, STRATA_NODE_EXPORTER_BIN
// and STRATA_VM_BIN (scripts/test.sh builds them into its cache); without
// them the test is skipped, unless STRATA_REQUIRE_PROMETHEUS=1. The run
// lasts STRATA_SCRAPE_DURATION (default 45s) at a 2 s scrape interval.
package scrapetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/server/servertest"
)

func bin(t *testing.T, env string) string {
	p := os.Getenv(env)
	if p == "" {
		if os.Getenv("STRATA_REQUIRE_PROMETHEUS") == "1" {
			t.Fatalf("%s is not set", env)
		}
		t.Skipf("%s is not set", env)
	}
	return p
}

// waitUp waits until url answers 200.
func waitUp(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not come up: %v", url, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// metrics reads a Prometheus text exposition: every sample of name, by
// the value of its label lbl.
func metrics(t *testing.T, url, name, lbl string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	out := map[string]float64{}
	if f := fams[name]; f != nil {
		for _, m := range f.Metric {
			key := ""
			for _, l := range m.Label {
				if l.GetName() == lbl {
					key = l.GetValue()
				}
			}
			switch {
			case m.Counter != nil:
				out[key] += m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] += m.Gauge.GetValue()
			case m.Untyped != nil:
				out[key] += m.Untyped.GetValue()
			}
		}
	}
	return out
}

// promAPI asks a Prometheus-compatible API at base.
func promAPI(t *testing.T, base, path string, q url.Values) json.RawMessage {
	t.Helper()
	resp, err := http.PostForm(base+path, q)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
		t.Fatalf("%s%s %v: %d %.500s", base, path, q, resp.StatusCode, body)
	}
	return r.Data
}

// counts are a system's series and samples over (start, end]; of those,
// nanSeries hold only NaN samples, and nanSamples are NaN.
type counts struct{ series, samples, nanSeries, nanSamples int }

// countAll counts from the raw samples the API returns for a range
// selector over the whole run (a range function would drop the names,
// and the series of different names would collide).
func countAll(t *testing.T, base string, start, end time.Time) counts {
	t.Helper()
	rng := end.Sub(start).Milliseconds()
	data := promAPI(t, base, "/api/v1/query", url.Values{"query": {fmt.Sprintf(`{__name__=~".+"}[%dms]`, rng)}, "time": {fmtTime(end)}})
	var matrix struct {
		Result []struct {
			Values [][2]any `json:"values"`
		} `json:"result"`
	}
	if err := json.Unmarshal(data, &matrix); err != nil {
		t.Fatalf("%s: %v", base, err)
	}
	var c counts
	for _, s := range matrix.Result {
		if len(s.Values) == 0 {
			continue
		}
		c.series++
		c.samples += len(s.Values)
		nan := 0
		for _, v := range s.Values {
			if v[1] == "NaN" {
				nan++
			}
		}
		c.nanSamples += nan
		if nan == len(s.Values) {
			c.nanSeries++
		}
	}
	return c
}

func fmtTime(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }

func TestPrometheusScrapingItselfAndNodeExporter(t *testing.T) {
	promBin := bin(t, "STRATA_PROMETHEUS_BIN")
	neBin := bin(t, "STRATA_NODE_EXPORTER_BIN")
	vmBin := bin(t, "STRATA_VM_BIN")
	dur := 45 * time.Second
	if s := os.Getenv("STRATA_SCRAPE_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		dur = d
	}
	dir := t.TempDir()
	store, err := objstore.Open(context.Background(), "file://"+filepath.Join(dir, "store"), objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	strata := servertest.Start(t, store, servertest.Options{})
	strataURL := "http://" + strata.HTTPAddr()

	vmAddr := clustertest.FreeAddr(t)
	clustertest.Run(t, "victoria-metrics", vmBin, "-storageDataPath", filepath.Join(dir, "vm"), "-httpListenAddr", vmAddr,
		"-retentionPeriod", "100y", "-search.latencyOffset", "0s", "-loggerLevel", "ERROR")
	vmURL := "http://" + vmAddr
	waitUp(t, vmURL+"/health")

	neAddr := clustertest.FreeAddr(t)
	clustertest.Run(t, "node_exporter", neBin, "--web.listen-address", neAddr, "--log.level", "warn")
	waitUp(t, "http://"+neAddr+"/metrics")

	promAddr := clustertest.FreeAddr(t)
	cfg := fmt.Sprintf(`global:
  scrape_interval: 2s
  scrape_timeout: 2s
scrape_configs:
  - job_name: prometheus
    static_configs: [{targets: [%q]}]
  - job_name: node
    static_configs: [{targets: [%q]}]
remote_write:
  - name: strata
    url: %s/api/v1/write
    queue_config: {batch_send_deadline: 1s}
  - name: victoriametrics
    url: %s/api/v1/write
    queue_config: {batch_send_deadline: 1s}
`, promAddr, neAddr, strataURL, vmURL)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Second)
	clustertest.Run(t, "prometheus", promBin, "--config.file", filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path", filepath.Join(dir, "prom"),
		"--web.listen-address", promAddr, "--log.level", "warn")
	promURL := "http://" + promAddr
	waitUp(t, promURL+"/-/ready")
	t.Logf("scraping for %v", dur)
	time.Sleep(dur) // the workload itself: Prometheus scrapes on its own clock

	// Everything Prometheus holds up to end has reached both remotes once
	// each queue has sent a sample at or after end.
	end := time.Now().Add(-3 * time.Second).Truncate(time.Millisecond)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		sent := metrics(t, promURL+"/metrics", "prometheus_remote_storage_queue_highest_sent_timestamp_seconds", "remote_name")
		if sent["strata"] >= float64(end.Unix()+1) && sent["victoriametrics"] >= float64(end.Unix()+1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("remote write did not catch up to %v: %v", end, sent)
		}
		time.Sleep(500 * time.Millisecond)
	}
	failed := metrics(t, promURL+"/metrics", "prometheus_remote_storage_samples_failed_total", "remote_name")
	sentTotal := metrics(t, promURL+"/metrics", "prometheus_remote_storage_samples_total", "remote_name")
	t.Logf("prometheus_remote_storage_samples_total %v, samples_failed_total %v", sentTotal, failed)
	for _, r := range []string{"strata", "victoriametrics"} {
		if failed[r] != 0 || sentTotal[r] == 0 {
			t.Errorf("%s: %v samples sent, %v failed", r, sentTotal[r], failed[r])
		}
	}
	if resp, err := http.Get(vmURL + "/internal/force_flush"); err == nil {
		resp.Body.Close()
	}

	want := countAll(t, promURL, start, end)
	got := map[string]counts{"strata": countAll(t, strataURL, start, end), "victoriametrics": countAll(t, vmURL, start, end)}
	t.Logf("over %v: prometheus holds %d series, %d samples; strata %+v; victoriametrics %+v", end.Sub(start).Round(time.Second), want.series, want.samples, got["strata"], got["victoriametrics"])
	if want.series < 500 || want.samples < want.series {
		t.Fatalf("too little scraped to show anything: %+v", want)
	}
	if c := got["strata"]; c != want {
		t.Errorf("strata holds %+v; prometheus %+v", c, want)
	}
	// VictoriaMetrics drops NaN samples as it ingests them (a summary's
	// quantiles before any observation), but keeps Prometheus' staleness
	// markers (a NaN of their own, sent when a series leaves a scrape) and
	// returns them in a raw selection, where Prometheus and Strata hide
	// them: of what is not NaN, it holds everything.
	if c := got["victoriametrics"]; c.series-c.nanSeries != want.series-want.nanSeries || c.samples-c.nanSamples != want.samples-want.nanSamples {
		t.Errorf("victoriametrics holds %+v; prometheus %+v, of which NaN are %d series and %d samples", c, want, want.nanSeries, want.nanSamples)
	}
	refused := metrics(t, strataURL+"/metrics", "strata_remote_write_refused_samples_total", "")
	if refused[""] != 0 {
		t.Errorf("strata refused %v samples", refused[""])
	}
	// Prometheus' own summaries hold NaN quantiles before any
	// observation: the request that carried them was stored.
	data := promAPI(t, strataURL, "/api/v1/query", url.Values{"query": {`count(prometheus_engine_query_duration_seconds)`}, "time": {fmtTime(end)}})
	if !strings.Contains(string(data), `"value"`) {
		t.Errorf("no prometheus_engine_query_duration_seconds in strata: %s", data)
	}
}
