package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratadb/strata/internal/sst"
)

// cacheCollector exports the SST cache's counters.
type cacheCollector struct {
	c                     *sst.Cache
	lookups, bytes, count *prometheus.Desc
}

func newCacheCollector(c *sst.Cache) *cacheCollector {
	return &cacheCollector{c: c,
		lookups: prometheus.NewDesc("strata_sst_cache_lookups_total", "SST cache lookups, of open files (kind=file) and of blocks of files read in ranges (kind=block), by result.", []string{"kind", "result"}, nil),
		bytes:   prometheus.NewDesc("strata_sst_cache_bytes", "Bytes the SST cache holds (bounded by --cache-bytes).", nil, nil),
		count:   prometheus.NewDesc("strata_sst_cache_entries", "Open files and blocks the SST cache holds.", nil, nil)}
}

func (c *cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lookups
	ch <- c.bytes
	ch <- c.count
}

func (c *cacheCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.c.Stats()
	for _, m := range []struct {
		kind, result string
		n            uint64
	}{{"file", "hit", st.Hits}, {"file", "miss", st.Misses}, {"block", "hit", st.BlockHits}, {"block", "miss", st.BlockMisses}} {
		ch <- prometheus.MustNewConstMetric(c.lookups, prometheus.CounterValue, float64(m.n), m.kind, m.result)
	}
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(st.Entries))
}
