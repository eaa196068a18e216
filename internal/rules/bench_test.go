package rules_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/prompb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/rules"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/tsbs"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// BenchmarkRecordingRules1000 measures the evaluation cost of 1,000
// recording rules over TSBS-shaped data (cpu-only: 100 hosts with TSBS'
// 10 tags, the 10 cpu fields as metrics cpu_usage_user..., one sample per
// host every 10 s for the last 10 minutes: 1,000 series, 60,000 samples),
// loaded with the admin API into a standalone (its rules, as a datanode
// runs them): 10 groups of 100 rules, every aggregation of avg, max, min,
// sum, count by each of the 10 tags, over the instant value and over
// avg_over_time(...[5m]), for each field. An iteration is one interval:
// every group evaluated once, the groups at once as the scheduler runs
// them (bounded by --query-concurrency, 8), their results written through
// the write path. Reported: seconds per interval, samples written per
// interval and per second of evaluation.
func BenchmarkRecordingRules1000(b *testing.B) {
	n := servertest.Start(b, objstoretest.Mem(b), servertest.Options{Config: func(c *server.Config) {
		c.Rules = rules.Options{}
	}})
	base := "http://" + n.HTTPAddr()
	const hosts, steps = 100, 60
	now := time.Now().Truncate(10 * time.Second)
	req := &prompb.WriteRequest{}
	for h := range hosts {
		var ls []prompb.Label
		for _, t := range tsbs.Tags(h) {
			ls = append(ls, prompb.Label{Name: t.Name, Value: t.Value})
		}
		for f, field := range tsbs.Fields {
			ts := prompb.TimeSeries{Labels: append([]prompb.Label{{Name: "__name__", Value: "cpu_" + field}}, ls...)}
			sort.Slice(ts.Labels, func(i, j int) bool { return ts.Labels[i].Name < ts.Labels[j].Name })
			for k := range steps {
				ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: now.Add(-time.Duration(steps-k) * 10 * time.Second).UnixMilli(), Value: tsbs.Value(h*steps+k, f)})
			}
			req.Timeseries = append(req.Timeseries, ts)
		}
	}
	raw, err := req.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	resp, err := http.Post(base+"/api/v1/write", "application/x-protobuf", bytes.NewReader(snappy.Encode(nil, raw)))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		b.Fatalf("remote write: %v %v", resp, err)
	}
	resp.Body.Close()

	// 1,000 rules in 10 groups (interval 1h: the scheduler stays out of
	// the way; the benchmark evaluates them).
	var file strings.Builder
	file.WriteString("groups:\n")
	aggs := []string{"avg", "max", "min", "sum", "count"}
	tags := tsbs.Tags(0)
	for _, field := range tsbs.Fields {
		fmt.Fprintf(&file, "  - name: %s\n    interval: 1h\n    rules:\n", field)
		for _, agg := range aggs {
			for _, t := range tags {
				fmt.Fprintf(&file, "      - record: %s:cpu_%s:%s\n        expr: %s by (%s) (cpu_%s)\n", t.Name, field, agg, agg, t.Name, field)
				fmt.Fprintf(&file, "      - record: %s:cpu_%s:%s_avg5m\n        expr: %s by (%s) (avg_over_time(cpu_%s[5m]))\n", t.Name, field, agg, agg, t.Name, field)
			}
		}
	}
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	if _, err := pb.NewMetaAdminClient(conn).LoadRules(context.Background(), &pb.LoadRulesRequest{Files: []*pb.RuleFile{{Namespace: "tsbs", Content: []byte(file.String())}}}); err != nil {
		b.Fatal(err)
	}
	m := n.Rules()
	deadline := time.Now().Add(time.Minute)
	for len(m.Groups()) < len(tsbs.Fields) {
		if time.Now().After(deadline) {
			b.Fatalf("%d groups evaluated here after a minute", len(m.Groups()))
		}
		time.Sleep(50 * time.Millisecond) // waiting for the groups to be taken, with a deadline
	}
	groups := m.Groups()
	rulesN := 0
	for _, g := range groups {
		rulesN += len(g.Rules())
	}
	if rulesN != 1000 {
		b.Fatalf("%d rules", rulesN)
	}

	evalAll := func(ts time.Time) {
		var wg sync.WaitGroup
		for _, g := range groups {
			wg.Add(1)
			go func() { defer wg.Done(); g.Eval(context.Background(), ts) }()
		}
		wg.Wait()
	}
	evalAll(now) // warm: the first write of each series creates it
	b.ResetTimer()
	began := time.Now()
	for i := range b.N {
		evalAll(now.Add(time.Duration(i+1) * time.Second))
	}
	took := time.Since(began)
	b.StopTimer()
	samples := 0.0
	for _, g := range groups {
		for _, r := range g.Rules() {
			if err := r.LastError(); err != nil {
				b.Fatalf("rule %s: %v", r.Name(), err)
			}
		}
	}
	mfs, err := n.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "prometheus_rule_group_last_evaluation_samples" {
			for _, mm := range mf.Metric {
				samples += gaugeValue(mm)
			}
		}
	}
	b.ReportMetric(took.Seconds()/float64(b.N), "s/interval")
	b.ReportMetric(samples, "samples/interval")
	b.ReportMetric(samples*float64(b.N)/took.Seconds(), "samples/s")
}

func gaugeValue(m *dto.Metric) float64 { return m.GetGauge().GetValue() }
