package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestRequestCountsFromMetrics(t *testing.T) {
	m := map[string]float64{
		`strata_objstore_requests_total{op="PUT",result="ok"}`:        900,
		`strata_objstore_requests_total{op="PUT",result="error"}`:     100,
		`strata_objstore_requests_total{op="GET",result="not_found"}`: 10,
		`strata_objstore_requests_total{op="GET",result="ok"}`:        2490,
		`strata_objstore_requests_total{op="DELETE",result="ok"}`:     7,
		`process_resident_memory_bytes`:                               1e9,
	}
	got := requestsByOp(m)
	if got["PUT"] != 1000 || got["GET"] != 2500 || got["DELETE"] != 7 || len(got) != 3 {
		t.Fatalf("by op: %v", got)
	}
	if d := got.sub(requestCounts{"PUT": 400}); d["PUT"] != 600 || d["GET"] != 2500 {
		t.Fatalf("sub: %v", d)
	}
	// 1,000 PUTs at $0.005 per 1,000, 2,500 GETs at $0.0004, DELETE free.
	if p := got.price(s3Standard); math.Abs(p-(0.005+0.001)) > 1e-12 {
		t.Fatalf("price %v", p)
	}
	if s := got.scale(2).String(); s != "2000 PUT, 5000 GET, 0 HEAD, 0 LIST, 14 DELETE" {
		t.Fatalf("string %q", s)
	}
}

func TestBenchCPU(t *testing.T) {
	before := map[string]float64{"process_cpu_seconds_total": 12.5}
	after := map[string]float64{"process_cpu_seconds_total": 15.75, "process_resident_memory_bytes": 1e9}
	if s, ok := serverCPU(before, after); !ok || s != 3.25 {
		t.Fatalf("server CPU %v, %v; want 3.25, true", s, ok)
	}
	if _, ok := serverCPU(before, map[string]float64{}); ok {
		t.Fatal("server CPU known without the metric after the run")
	}
	// The loader's own CPU grows while it works.
	c0 := processCPU()
	if c0 <= 0 {
		t.Fatalf("process CPU %v", c0)
	}
	x := 1
	for i := 0; processCPU() == c0; i++ {
		x = x*31 + i
	}
	if processCPU() < c0 {
		t.Fatal("process CPU went back")
	}
	_ = x
}

func TestParseCPUTicks(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	got := parseCPUTicks("cpu  100 5 50 800 20 1 2 3 40 4\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	if !got.ok || got.idle != 820 || got.total != 981 {
		t.Fatalf("%+v: want idle 820 of 981", got)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 x 4 5", "cpu 1 2"} {
		if parseCPUTicks(bad).ok {
			t.Fatalf("%q parsed", bad)
		}
	}
}

// The RSS watch keeps the highest reading, its own and those observed
// for it, and 0 where the server exports none.
func TestRSSWatchKeepsThePeak(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		v := []int64{100, 300, 200}[min(n.Add(1)-1, 2)]
		fmt.Fprintf(w, "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %d\n", v)
	}))
	defer srv.Close()
	w := watchRSS(context.Background(), srv.Client(), srv.URL+"/metrics")
	for n.Load() < 3 {
		time.Sleep(50 * time.Millisecond) // the watch reads every 250 ms
	}
	w.observe(250)
	if p := w.stop(); p != 300 {
		t.Fatalf("peak %d, want 300", p)
	}
	none := watchRSS(context.Background(), srv.Client(), srv.URL+"/nothing-here")
	time.Sleep(300 * time.Millisecond) // a read or two
	if p := none.stop(); p != 0 {
		t.Fatalf("peak %d without the metric", p)
	}
}
