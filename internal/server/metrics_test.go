package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/prompb"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/faultstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// onlyOnFaults are the metrics a healthy workload leaves at zero (and one
// that only a cluster moves).
var onlyOnFaults = map[string]string{
	"strata_gc_orphans_found_total":                "full GC finds orphans only if the ownership invariant broke",
	"strata_gc_delete_errors_total":                "deletes fail only when the store does",
	"strata_region_write_stalls_total":             "writes stall only above --memory-limit",
	"strata_region_write_stall_seconds_total":      "as above",
	"strata_wal_stream_rollovers_total":            "a stream rolls over only when a region's new owner seals it",
	"strata_lease_losses_total":                    "the lease runs out only when etcd is out of reach",
	"strata_metasrv_elections_lost_total":          "a term ends early only when the election session expires",
	"strata_metasrv_datanode_lease_expiries_total": "a datanode's lease expires only when it dies, pauses or loses etcd",
	"strata_peer_grpc_bytes_total":                 "a standalone has no other datanode to call (TestPeerBytesCountsMessages)",
	"strata_remote_scan_retries_total":             "a remote scan starts again only when its region moves or its owner cannot answer",
	"strata_remote_column_scans_total":             "a standalone has no other datanode to scan (TestRemoteColumnScanIsTheLocalOne)",
	"strata_forwarded_writes_total":                "a standalone has no other datanode to forward to (internal/cluster TestForwardedWritesReadBackExactly)",
	"strata_forward_retries_total":                 "a forward is sent again only when its region moves or its owner cannot take it (TestWriteThroughAFrozenOwner)",
	"strata_rule_group_ownership_changes_total":    "rule groups stored in etcd move only when loaded (TestRulesLoadListDeleteOnAStandalone, internal/cluster TestRuleEvaluator*)",
	"strata_rule_group_evaluations_skipped_total":  "an evaluation is skipped only when a rules lease lapsed (TestRuleEvaluatorFrozen)",
	"strata_rule_group_results_fenced_total":       "a result is fenced only when a rules lease lapsed mid-evaluation",
	"strata_discarded_samples_total":               "samples are refused only over a tenant's limits, none by default (TestLimits*)",
	"strata_active_series":                         "active series are counted only while a tenant has a series limit, none by default (TestLimitsSeriesBurstThenRaised)",
}

// TestEveryMetricMoves runs a standard workload on a standalone: HTTP
// writes (line protocol, remote write, OTLP), flushes, a compaction, a
// cancelled compaction, a TTL expiry, fast and full GC (and a run of
// metasrv's GC scheduler), a scan and a PromQL query. Then every registered
// strata_ counter and histogram must have moved, but the few that only
// move on faults, and every strata_ metric must pass Prometheus' naming
// and help-text lint.
func TestEveryMetricMoves(t *testing.T) {
	ctx := context.Background()
	var armed atomic.Bool
	reached := make(chan struct{})
	var once sync.Once
	sstRead := func(c faultstore.Call) bool {
		return armed.Load() && c.Op == objstore.OpGet && strings.HasSuffix(c.Key, ".parquet")
	}
	// Once armed, the first SST read (the compaction's input) waits until
	// its context ends: the cancel.
	fs := faultstore.New(objstoretest.Mem(t), faultstore.Rule{Match: sstRead, N: 1, Action: faultstore.Delay, Delay: time.Hour})
	fs.Hook = func(c faultstore.Call) {
		if sstRead(c) {
			once.Do(func() { close(reached) })
		}
	}
	n := servertest.Start(t, fs, servertest.Options{
		Tune: func(o *datanode.Options) {
			o.Region.TTLInterval = 20 * time.Millisecond
			// No compaction in the background: the armed read must hold
			// the one the test cancels.
			o.Region.OnFlush = func(*region.Region) {}
		},
		Config: func(c *server.Config) {
			c.Heartbeat = 20 * time.Millisecond // renewals during the workload
			c.GCInterval = time.Second          // scheduled GC runs during it
		},
	})
	e := n.Engine()

	ts := time.Now().Add(-time.Hour).UnixNano()
	write := func(rows int) {
		t.Helper()
		var b strings.Builder
		for i := range rows {
			fmt.Fprintf(&b, "cpu,host=h%d usage=%d,ok=true %d\n", i%50, i, ts)
			ts += int64(time.Millisecond)
		}
		resp, err := http.Post("http://"+n.HTTPAddr()+"/write?db=x", "text/plain", strings.NewReader(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("write: %s", resp.Status)
		}
	}
	flush := func() {
		t.Helper()
		if err := e.Flush(ctx, "cpu"); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		write(500)
		flush()
	}
	// Remote write: one sample stored, one refused (no __name__).
	rw := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		{Labels: []prompb.Label{{Name: "__name__", Value: "up"}}, Samples: []prompb.Sample{{Value: 1, Timestamp: ts / 1e6}}},
		{Labels: []prompb.Label{{Name: "job", Value: "x"}}, Samples: []prompb.Sample{{Value: 1, Timestamp: ts / 1e6}}},
	}}
	raw, err := rw.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+n.HTTPAddr()+"/api/v1/write", "application/x-protobuf", bytes.NewReader(snappy.Encode(nil, raw)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("remote write with a refused sample: %s", resp.Status)
	}
	// OTLP: a gauge's point stored, a delta sum's refused (partial
	// success, 200).
	otlp := fmt.Sprintf(`{"resourceMetrics": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
		"scopeMetrics": [{"metrics": [
			{"name": "queue", "gauge": {"dataPoints": [{"timeUnixNano": "%d", "asDouble": 1}]}},
			{"name": "done", "sum": {"aggregationTemporality": 1, "isMonotonic": true, "dataPoints": [{"timeUnixNano": "%d", "asInt": "1"}]}}]}]}]}`, ts, ts)
	resp, err = http.Post("http://"+n.HTTPAddr()+"/opentelemetry/v1/metrics", "application/json", strings.NewReader(otlp))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("OTLP with a refused point: %s", resp.Status)
	}
	if res, err := e.Compact(ctx, "cpu", true); err != nil || len(res) == 0 {
		t.Fatalf("compaction: %v %v", res, err)
	}
	for range 2 {
		write(500)
		flush()
	}
	armed.Store(true)
	done := make(chan error, 1)
	go func() { _, err := e.Compact(ctx, "cpu", true); done <- err }()
	select {
	case <-reached:
	case err := <-done:
		t.Fatalf("the compaction read no input: %v", err)
	}
	if cancelled, _, err := e.CancelCompaction(context.Background(), "cpu"); err != nil || cancelled != 1 {
		t.Fatalf("cancel: %d %v", cancelled, err)
	}
	if err := <-done; !errors.Is(err, compact.ErrCancelled) {
		t.Fatalf("the cancelled compaction returned %v, want ErrCancelled", err)
	}
	armed.Store(false)

	// A table with a short TTL: its file expires a second after the write
	// (a write older than the TTL would be dropped before any file).
	if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "old", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	servertest.WaitHosted(t, e, "old")
	resp, err = http.Post("http://"+n.HTTPAddr()+"/write?db=x", "text/plain", strings.NewReader(fmt.Sprintf("old,host=a v=1 %d\n", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write: %s", resp.Status)
	}
	if err := e.Flush(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	// The region's TTL check drops the file.
	expired := func() float64 {
		for _, f := range must(n.Registry.Gather()) {
			if f.GetName() == "strata_ttl_expired_files_total" {
				return f.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return 0
	}
	for deadline := time.Now().Add(time.Minute); expired() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the TTL table's file did not expire in a minute")
		}
	}

	for _, full := range []bool{false, true} {
		if _, err := e.GC(ctx, datanode.GCRequest{Full: full, Lingering: -1, MinAge: -1}); err != nil {
			t.Fatalf("gc (full %v): %v", full, err)
		}
	}
	sc, err := e.Scan(ctx, "cpu", scan.Request{Start: math.MinInt64, End: math.MaxInt64})
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for sc.Next() {
		rows += len(sc.Batch())
	}
	sc.Close()
	if sc.Err() != nil || rows != 2500 {
		t.Fatalf("scan: %d rows, %v", rows, sc.Err())
	}
	resp, err = http.Get("http://" + n.HTTPAddr() + "/api/v1/query?query=sum(cpu_usage)")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PromQL query: %s", resp.Status)
	}

	// The scheduler's first fast run of a region is due within half an
	// interval of the region's creation.
	scheduled := func() bool {
		for _, f := range must(n.Registry.Gather()) {
			if f.GetName() == "strata_metasrv_gc_runs_total" {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(time.Minute); !scheduled(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("metasrv's GC scheduler ran no GC in a minute")
		}
	}

	families, err := n.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	var ours []*dto.MetricFamily
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "strata_") {
			byName[f.GetName()] = f
			ours = append(ours, f)
		}
	}
	// Every registered strata_ metric, including vectors with no child yet
	// (which Gather leaves out).
	descs := make(chan *prometheus.Desc, 1000)
	n.Registry.Describe(descs)
	close(descs)
	nameRE := regexp.MustCompile(`fqName: "([^"]+)"`)
	var registered, still []string
	for d := range descs {
		m := nameRE.FindStringSubmatch(d.String())
		if m == nil || !strings.HasPrefix(m[1], "strata_") {
			continue
		}
		name := m[1]
		registered = append(registered, name)
		if _, ok := onlyOnFaults[name]; ok {
			continue
		}
		f := byName[name]
		if f == nil {
			still = append(still, name+" (no series)")
			continue
		}
		moved := false
		for _, s := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				moved = moved || s.GetCounter().GetValue() > 0
			case dto.MetricType_HISTOGRAM:
				moved = moved || s.GetHistogram().GetSampleCount() > 0
			default:
				moved = true // gauges report a level, not an event
			}
		}
		if !moved {
			still = append(still, name)
		}
	}
	slices.Sort(registered)
	t.Logf("%d strata_ metrics registered: %s", len(registered), strings.Join(registered, " "))
	if len(still) > 0 {
		t.Errorf("metrics that did not move under the standard workload: %s", strings.Join(still, ", "))
	}
	for name := range onlyOnFaults {
		if !slices.Contains(registered, name) {
			t.Errorf("%s is listed as moving only on faults but is not registered", name)
		}
	}
	if c := byName["strata_compactions_total"]; c == nil || !hasLabel(c, "event", "cancelled") {
		t.Error("strata_compactions_total has no cancelled event")
	}
	problems, err := promlint.NewWithMetricFamilies(ours).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	for _, f := range ours {
		if h := f.GetHelp(); !strings.HasSuffix(h, ".") || strings.ToUpper(h[:1]) != h[:1] {
			t.Errorf("%s: help %q is not a capitalised sentence", f.GetName(), h)
		}
	}
}

func hasLabel(f *dto.MetricFamily, name, value string) bool {
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == name && l.GetValue() == value && m.GetCounter().GetValue() > 0 {
				return true
			}
		}
	}
	return false
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
