package gcsched

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the scheduler's metrics. One Metrics serves every leadership
// term of a replica.
type Metrics struct {
	// Runs counts finished runs by mode (fast, full) and result (ok,
	// error). A run cut short by the end of the term is not counted: the
	// next leader runs it again.
	Runs *prometheus.CounterVec
	// Lag is how long after it was due a run started, by mode and result.
	Lag *prometheus.HistogramVec
	// Overdue is, per mode, how long the most overdue region has been due
	// at the latest round (0: none is due). It grows when the concurrency
	// limit or slow owners hold runs back.
	Overdue *prometheus.GaugeVec
}

// NewMetrics creates the scheduler's metrics, registered with reg unless it
// is nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_metasrv_gc_runs_total",
			Help: "GC runs the metasrv leader's scheduler finished, by mode (fast, full) and result (ok, error)."}, []string{"mode", "result"}),
		Lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "strata_metasrv_gc_lag_seconds",
			Help:    "How long after it was due a scheduled GC run started, by mode and result.",
			Buckets: prometheus.ExponentialBuckets(0.1, 4, 10)}, []string{"mode", "result"}),
		Overdue: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "strata_metasrv_gc_overdue_seconds",
			Help: "How long the most overdue region's GC has been due, by mode, at the scheduler's latest round (0: none is due)."}, []string{"mode"}),
	}
	if reg != nil {
		reg.MustRegister(m.Runs, m.Lag, m.Overdue)
	}
	return m
}

func mode(full bool) string {
	if full {
		return "full"
	}
	return "fast"
}
