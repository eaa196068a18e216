package region

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the region engine's Prometheus metrics, shared by every region
// of a process.
type Metrics struct {
	WriteRows     prometheus.Counter
	WriteBatches  *prometheus.CounterVec // result
	Stalls        prometheus.Counter
	StallSeconds  prometheus.Counter
	WALSegments   prometheus.Counter
	WALBytes      prometheus.Counter
	WALPut        prometheus.Histogram
	Flushes       *prometheus.CounterVec // result
	FlushBytes    prometheus.Counter
	FlushRows     prometheus.Counter
	FlushDuration prometheus.Histogram
	MemtableBytes prometheus.Gauge
	SeriesCache   prometheus.Gauge
	ScanRows      prometheus.Counter
	ExpiredFiles  prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		WriteRows:    prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_region_write_rows_total", Help: "Rows and tombstones acknowledged as durable."}),
		WriteBatches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_region_write_batches_total", Help: "Write batches by result."}, []string{"result"}),
		Stalls:       prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_region_write_stalls_total", Help: "Writes that waited for memtable memory."}),
		StallSeconds: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_region_write_stall_seconds_total", Help: "Time writes spent waiting for memtable memory."}),
		WALSegments:  prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_wal_segments_total", Help: "WAL segments written: one object-store PUT each (the node's stream, or a region's own)."}),
		WALBytes:     prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_wal_bytes_total", Help: "Bytes of WAL segments written."}),
		WALPut: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "strata_wal_put_duration_seconds", Help: "Time to create a WAL segment in the object store: what an acknowledgement waits on.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		Flushes:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_flush_total", Help: "Memtable flushes by result."}, []string{"result"}),
		FlushBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_flush_bytes_total", Help: "Bytes of SSTs written by flushes."}),
		FlushRows:  prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_flush_rows_total", Help: "Rows written to SSTs by flushes."}),
		FlushDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "strata_flush_duration_seconds", Help: "Flush duration.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12)}),
		MemtableBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_memtable_bytes", Help: "Bytes held in memtables."}),
		SeriesCache:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_series_cache_bytes", Help: "Bytes of decoded SST series indexes held (bounded per region by --series-cache-bytes)."}),
		ScanRows:      prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_scan_rows_total", Help: "Rows returned by scans."}),
		ExpiredFiles:  prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_ttl_expired_files_total", Help: "SSTs dropped from manifests because every row expired."}),
	}
	if reg != nil {
		reg.MustRegister(m.WriteRows, m.WriteBatches, m.Stalls, m.StallSeconds, m.WALSegments, m.WALBytes, m.WALPut, m.Flushes,
			m.FlushBytes, m.FlushRows, m.FlushDuration, m.MemtableBytes, m.SeriesCache, m.ScanRows, m.ExpiredFiles)
	}
	return m
}

// ObserveWALPut counts a WAL segment created (wal.StreamOptions.OnPut).
func (m *Metrics) ObserveWALPut(bytes int, took time.Duration) {
	m.WALSegments.Inc()
	m.WALBytes.Add(float64(bytes))
	m.WALPut.Observe(took.Seconds())
}
