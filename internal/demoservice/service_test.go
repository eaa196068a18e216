package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The compliance query file asks for these names; each must be exported.
func TestExportsTheQueryFilesMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newService(reg, time.Now().Add(-time.Hour)) // past the start-up outage
	s.numCPUs.Set(4)
	s.cpuUsage.WithLabelValues("user").Add(1)
	s.memory.WithLabelValues("free").Set(1)
	for _, c := range []struct {
		method, path string
		status       int
	}{{http.MethodGet, "/api/nonexistent", 404}, {http.MethodDelete, "/api/foo", 405}} {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(c.method, c.path, nil))
		if w.Code != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, w.Code, c.status)
		}
	}
	got, err := testutil.GatherAndCount(reg)
	if err != nil || got == 0 {
		t.Fatalf("gathered %d series: %v", got, err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range fams {
		have[f.GetName()] = true
	}
	for _, n := range []string{"demo_api_request_duration_seconds", "demo_api_http_requests_in_progress",
		"demo_batch_last_success_timestamp_seconds", "demo_cpu_usage_seconds_total", "demo_num_cpus",
		"demo_disk_usage_bytes", "demo_memory_usage_bytes", "demo_items_shipped_total", "demo_is_holiday"} {
		if !have[n] {
			t.Errorf("%s is not exported", n)
		}
	}
}

// demo_intermittent_metric is there in even minutes only.
func TestIntermittentMetric(t *testing.T) {
	for _, c := range []struct {
		minute int
		want   int
	}{{0, 1}, {1, 0}, {58, 1}, {59, 0}} {
		now := time.Date(2026, 1, 1, 10, c.minute, 30, 0, time.UTC)
		if got := testutil.CollectAndCount(intermittent{now: func() time.Time { return now }}); got != c.want {
			t.Errorf("minute %d: %d series, want %d", c.minute, got, c.want)
		}
	}
}
