// Command demoservice exports the synthetic metrics of PromLabs' demo
// service (github.com/juliusv/prometheus_demo_service), which the PromQL
// compliance tester's query file is written against: the same metric names,
// label sets and kinds, with values moving the same way. It is written here
// so that scripts/promql-compliance.sh needs nothing outside the repository
// and the module proxy; it is a test fixture, not part of Strata.
//
//	demo_api_request_duration_seconds      histogram {method, path, status}
//	demo_api_http_requests_in_progress     gauge
//	demo_batch_last_success_timestamp_seconds, demo_batch_last_run_timestamp_seconds,
//	demo_batch_last_run_duration_seconds, demo_batch_last_run_processed_bytes
//	                                       gauges, a batch job once a minute
//	demo_cpu_usage_seconds_total           counter {mode: user, system, idle}
//	demo_num_cpus                          gauge (4)
//	demo_disk_usage_bytes, demo_disk_total_bytes
//	demo_is_holiday                        gauge, redrawn every 5 minutes
//	demo_items_shipped_total               counter
//	demo_memory_usage_bytes                gauge {type: used, cached, buffers, free}
//	demo_intermittent_metric               gauge, present in even minutes only
//
// plus the Go and process collectors every client_golang exporter has. The
// request histogram is fed by the service calling its own /api/foo and
// /api/bar (and a path that does not exist), so it listens on
// -listen-address and calls itself there.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	addr := flag.String("listen-address", ":8080", "The address to listen on for HTTP requests.")
	period := flag.Duration("oscillation-period", time.Hour, "The duration of the request rate oscillation period.")
	flag.Parse()

	s := newService(prometheus.DefaultRegisterer, time.Now())
	mux := http.NewServeMux()
	mux.Handle("/api/", s)
	mux.Handle("/metrics", promhttp.Handler())

	go s.runClient(*addr, *period)
	go s.runBatchJobs(time.Minute, 10*time.Second, 0.25)
	go s.runCPU(4, 0.3, 0.2)
	go s.runDisk(160e9, 0.5e6)
	go s.runHoliday(5*time.Minute, 0.2)
	go s.runMemory(8<<30, 1200<<20, 2500<<20, 165<<20, 0.5)

	log.Fatal(http.ListenAndServe(*addr, mux))
}
