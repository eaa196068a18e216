package gc

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the GC metrics of a process. Mode is "fast" or "full".
type Metrics struct {
	Runs           *prometheus.CounterVec   // mode, result
	ObjectsDeleted *prometheus.CounterVec   // mode, kind
	BytesDeleted   *prometheus.CounterVec   // mode, kind
	Requests       *prometheus.CounterVec   // mode, op
	OrphansFound   prometheus.Counter       // full-listing GC only; should stay 0
	DeleteErrors   *prometheus.CounterVec   // mode
	Duration       *prometheus.HistogramVec // mode
}

// NewMetrics creates the metrics and registers them with reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_gc_runs_total",
			Help: "GC runs by mode (fast, full) and result (ok, error, dry_run)."}, []string{"mode", "result"}),
		ObjectsDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_gc_objects_deleted_total",
			Help: "Objects deleted by GC, by mode and kind (sst, wal, manifest, other)."}, []string{"mode", "kind"}),
		BytesDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_gc_bytes_deleted_total",
			Help: "Bytes of the objects deleted by GC, by mode and kind (fast GC knows the sizes of SSTs only)."}, []string{"mode", "kind"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_gc_requests_total",
			Help: "Object-store requests issued by GC, by mode and operation."}, []string{"mode", "op"}),
		OrphansFound: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_gc_orphans_found_total",
			Help: "Unowned objects found by full-listing GC. Strata's protocols leave none: anything but 0 is a bug or a foreign writer."}),
		DeleteErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_gc_delete_errors_total",
			Help: "Deletes that failed (left for the next run), by mode."}, []string{"mode"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "strata_gc_duration_seconds",
			Help: "Duration of GC runs, by mode.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"mode"}),
	}
	if reg != nil {
		reg.MustRegister(m.Runs, m.ObjectsDeleted, m.BytesDeleted, m.Requests, m.OrphansFound, m.DeleteErrors, m.Duration)
	}
	return m
}

var unregistered = NewMetrics(nil)

func metricsOr(m *Metrics) *Metrics {
	if m == nil {
		return unregistered
	}
	return m
}
