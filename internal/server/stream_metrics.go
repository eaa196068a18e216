package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratadb/strata/internal/wal"
)

// streamCollector exports the node's WAL stream rollovers (its segments
// and bytes count in strata_wal_segments_total and strata_wal_bytes_total).
type streamCollector struct {
	s         *wal.Stream
	rollovers *prometheus.Desc
}

func newStreamCollector(s *wal.Stream) *streamCollector {
	return &streamCollector{s: s, rollovers: prometheus.NewDesc("strata_wal_stream_rollovers_total",
		"WAL streams sealed by a region's new owner, after which the node started a new one.", nil, nil)}
}

func (c *streamCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.rollovers }

func (c *streamCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.rollovers, prometheus.CounterValue, float64(c.s.Stats().Rollovers))
}
