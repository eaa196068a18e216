package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratadb/strata/internal/wal"
)

// streamCollector exports the node's WAL stream counters.
type streamCollector struct {
	s                                   *wal.Stream
	segments, entries, bytes, rollovers *prometheus.Desc
}

func newStreamCollector(s *wal.Stream) *streamCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("strata_wal_stream_"+name, help, nil, nil)
	}
	return &streamCollector{s: s,
		segments:  d("segments_total", "WAL stream segments written: one object-store PUT each."),
		entries:   d("entries_total", "Rows and tombstones written to the WAL stream."),
		bytes:     d("bytes_total", "Bytes of WAL stream segments written."),
		rollovers: d("rollovers_total", "WAL streams sealed by a region's new owner, after which the node started a new one."),
	}
}

func (c *streamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.segments
	ch <- c.entries
	ch <- c.bytes
	ch <- c.rollovers
}

func (c *streamCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(c.segments, prometheus.CounterValue, float64(st.Segments))
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.CounterValue, float64(st.Entries))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(c.rollovers, prometheus.CounterValue, float64(st.Rollovers))
}
