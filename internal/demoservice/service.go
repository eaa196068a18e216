package main

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// service holds the demo metrics and the state the simulations share.
type service struct {
	start time.Time

	requests   *prometheus.HistogramVec
	inProgress prometheus.Gauge

	lastSuccess, lastRun, lastDuration, processedBytes prometheus.Gauge

	numCPUs  prometheus.Gauge
	cpuUsage *prometheus.CounterVec

	diskUsage, diskTotal prometheus.Gauge

	isHoliday    prometheus.Gauge
	shippedItems prometheus.Counter
	holiday      atomic.Bool

	memory *prometheus.GaugeVec
}

func newService(reg prometheus.Registerer, start time.Time) *service {
	gauge := func(subsystem, name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "demo", Subsystem: subsystem, Name: name, Help: help})
	}
	s := &service{
		start: start,
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "demo", Subsystem: "api", Name: "request_duration_seconds",
			Help:    "A histogram of the API HTTP request durations in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 1.5, 25),
		}, []string{"method", "path", "status"}),
		inProgress:     gauge("api", "http_requests_in_progress", "The current number of API HTTP requests in progress."),
		lastSuccess:    gauge("batch", "last_success_timestamp_seconds", "The Unix timestamp in seconds since the last successful demo batch job completion."),
		lastRun:        gauge("batch", "last_run_timestamp_seconds", "The Unix timestamp in seconds since the last demo batch job run."),
		lastDuration:   gauge("batch", "last_run_duration_seconds", "The duration in seconds of the last batch job run."),
		processedBytes: gauge("batch", "last_run_processed_bytes", "The number of bytes processed by the demo batch job in the last run."),
		numCPUs:        gauge("", "num_cpus", "The number of CPUs."),
		cpuUsage: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "demo", Name: "cpu_usage_seconds_total", Help: "The CPU usage in seconds split by mode.",
		}, []string{"mode"}),
		diskUsage: gauge("disk", "usage_bytes", "Disk usage in bytes."),
		diskTotal: gauge("disk", "total_bytes", "Total disk space in bytes."),
		isHoliday: gauge("", "is_holiday", "Set to 1 if it is currently a holiday, 0 otherwise."),
		shippedItems: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "demo", Name: "items_shipped_total",
			Help: "The total number of shipped items. Affected heavily by whether it's currently a holiday.",
		}),
		memory: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "demo", Name: "memory_usage_bytes", Help: "The memory usage by type.",
		}, []string{"type"}),
	}
	reg.MustRegister(s.requests, s.inProgress, s.lastSuccess, s.lastRun, s.lastDuration, s.processedBytes,
		s.numCPUs, s.cpuUsage, s.diskUsage, s.diskTotal, s.isHoliday, s.shippedItems, s.memory,
		intermittent{now: time.Now})
	return s
}

// endpoint is how one method of one API path answers: its latency and error
// ratio, both raised (×3 and ×10) during an outage of outage every
// 10×outage, the first at start-up.
type endpoint struct {
	latency    time.Duration
	errorRatio float64
	outage     time.Duration
}

var endpoints = map[string]map[string]endpoint{
	"/api/foo": {
		http.MethodGet:  {10 * time.Millisecond, 0.005, 23 * time.Second},
		http.MethodPost: {20 * time.Millisecond, 0.02, time.Minute},
	},
	"/api/bar": {
		http.MethodGet:  {15 * time.Millisecond, 0.0025, 13 * time.Second},
		http.MethodPost: {50 * time.Millisecond, 0.01, 47 * time.Second},
	},
}

// ServeHTTP answers /api/...: 404 for an unknown path, 405 for a method the
// path does not take, else 200 or, now and then, a fake 500, after a
// latency; each request is observed in demo_api_request_duration_seconds.
func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	begun := time.Now()
	s.inProgress.Inc()
	status := http.StatusOK
	defer func() {
		s.inProgress.Dec()
		s.requests.WithLabelValues(r.Method, r.URL.Path, fmt.Sprint(status)).Observe(time.Since(begun).Seconds())
	}()

	methods, ok := endpoints[r.URL.Path]
	if !ok {
		status = http.StatusNotFound
		http.Error(w, fmt.Sprintf("Path %q not found.", r.URL.Path), status)
		return
	}
	e, ok := methods[r.Method]
	if !ok {
		status = http.StatusMethodNotAllowed
		http.Error(w, fmt.Sprintf("Method %q not allowed.", r.Method), status)
		return
	}
	latency, errorRatio := e.latency, e.errorRatio
	if time.Since(s.start)%(10*e.outage) < e.outage {
		latency *= 3
		errorRatio *= 10
	}
	time.Sleep(latency + time.Duration(rand.NormFloat64()*float64(latency)/10))
	if rand.Float64() <= errorRatio {
		status = http.StatusInternalServerError
		http.Error(w, "Fake error to test monitoring.", status)
	}
}

// runClient calls the service's own API at addr forever, each of five loops
// pausing a base interval scaled by a factor oscillating over period.
func (s *service) runClient(addr string, period time.Duration) {
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	factor := func() float64 {
		return 2 + math.Sin(math.Sin(2*math.Pi*float64(time.Since(s.start))/float64(period)))
	}
	loop := func(method, path string, pause float64) {
		for {
			req, _ := http.NewRequest(method, "http://"+addr+path, &bytes.Buffer{})
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
			time.Sleep(time.Duration(pause*factor()) * time.Millisecond)
		}
	}
	go loop(http.MethodGet, "/api/foo", 10)
	go loop(http.MethodPost, "/api/foo", 150)
	go loop(http.MethodGet, "/api/bar", 20)
	go loop(http.MethodPost, "/api/bar", 100)
	loop(http.MethodGet, "/api/nonexistent", 500)
}

// runBatchJobs runs a fake batch job every interval, lasting about
// duration, failing with failureRatio.
func (s *service) runBatchJobs(interval, duration time.Duration, failureRatio float64) {
	last := unixSeconds(time.Now())
	tick := time.NewTicker(interval)
	for {
		time.Sleep(duration + time.Second - time.Duration(rand.IntN(2000))*time.Microsecond)
		now := unixSeconds(time.Now())
		if rand.Float64() > failureRatio {
			s.lastSuccess.Set(now)
			s.processedBytes.Set(float64(1e6 + 1e5 - rand.IntN(1e5)))
		}
		s.lastRun.Set(now)
		s.lastDuration.Set(now - last)
		last = now
		<-tick.C
	}
}

// runCPU spends, every 100 ms, cpus×0.1 s across user, system and idle,
// the first two about userRatio and sysRatio of it.
func (s *service) runCPU(cpus int, userRatio, sysRatio float64) {
	s.numCPUs.Set(float64(cpus))
	const pause = 100 * time.Millisecond
	total := float64(cpus) * pause.Seconds()
	for {
		user := (userRatio + (rand.Float64()-0.5)/5) * total
		sys := (sysRatio + (rand.Float64()-0.5)/5) * total
		s.cpuUsage.WithLabelValues("user").Add(user)
		s.cpuUsage.WithLabelValues("system").Add(sys)
		s.cpuUsage.WithLabelValues("idle").Add(total - user - sys)
		time.Sleep(pause)
	}
}

// runDisk fills a disk of total bytes by about inc a second, starting at
// and falling back to 10% once past 90%.
func (s *service) runDisk(total, inc float64) {
	s.diskTotal.Set(total)
	usage := int64(0.1 * total)
	for {
		usage += int64(inc * (1 - (rand.Float64() - 0.5)))
		if float64(usage) > 0.9*total {
			usage = int64(0.1 * total)
		}
		s.diskUsage.Set(float64(usage))
		time.Sleep(time.Second)
	}
}

// runHoliday redraws whether it is a holiday every day (holidayRatio of
// them are) and ships items at a rate following the time of day, slower on
// holidays.
func (s *service) runHoliday(day time.Duration, holidayRatio float64) {
	start := time.Now()
	go func() {
		for {
			s.shippedItems.Inc()
			d := 100 * (2 + math.Sin(1+2*math.Pi*float64(time.Since(start))/float64(day)))
			if s.holiday.Load() {
				d *= 1.8
			}
			time.Sleep(time.Duration(d) * time.Millisecond)
		}
	}()
	tick := time.NewTicker(day)
	for {
		h := rand.Float64() <= holidayRatio
		s.holiday.Store(h)
		if h {
			s.isHoliday.Set(1)
		} else {
			s.isHoliday.Set(0)
		}
		<-tick.C
	}
}

// runMemory walks used, cached and buffers memory randomly around their
// bases (back to the base once off by more than maxDeviation of it), free
// being the rest of total.
func (s *service) runMemory(total, usedBase, cachedBase, buffersBase uint64, maxDeviation float64) {
	used, cached, buffers := usedBase, cachedBase, buffersBase
	step := func(cur, base uint64) uint64 {
		cur = uint64(int64(cur) + int64((rand.Float64()-0.5)*60*1024*1024))
		dev := uint64(float64(base) * maxDeviation)
		if cur < base-dev || cur > base+dev {
			return base
		}
		return cur
	}
	for {
		used = step(used, usedBase)
		cached = step(cached, cachedBase)
		buffers = step(buffers, buffersBase)
		s.memory.WithLabelValues("used").Set(float64(used))
		s.memory.WithLabelValues("cached").Set(float64(cached))
		s.memory.WithLabelValues("buffers").Set(float64(buffers))
		s.memory.WithLabelValues("free").Set(float64(total - used - cached - buffers))
		time.Sleep(100 * time.Millisecond)
	}
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// intermittent is demo_intermittent_metric: 1 in even minutes of the
// clock, absent in odd ones, so that its series goes stale every other
// minute (the staleness markers the compliance queries test).
type intermittent struct{ now func() time.Time }

var intermittentDesc = prometheus.NewDesc("demo_intermittent_metric",
	"A metric that is only present intermittently to test staleness handling.", nil, nil)

func (intermittent) Describe(ch chan<- *prometheus.Desc) { ch <- intermittentDesc }

func (m intermittent) Collect(ch chan<- prometheus.Metric) {
	if m.now().Minute()%2 == 0 {
		ch <- prometheus.MustNewConstMetric(intermittentDesc, prometheus.GaugeValue, 1)
	}
}
