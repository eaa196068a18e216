package prom_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/stratadb/strata/internal/hatracker"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// TestRemoteWriteHADedup: with --ha-cluster-label cluster and
// --ha-replica-label replica, a request is decided from its first
// series: both labels, only the elected replica's is stored (the replica
// label removed from all its series) and the other's answered 202;
// otherwise it is stored as it is. Remote write 1.0 (labels sorted, the
// fast path, or not), 2.0 and OTLP alike.
func TestRemoteWriteHADedup(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{Config: func(c *server.Config) {
		c.HA = hatracker.Config{ClusterLabel: "cluster", ReplicaLabel: "replica"}
	}})
	base := "http://" + n.HTTPAddr()
	const t0 = 1767225600000 // ms
	series := func(name, cluster, replica string, v float64) prompb.TimeSeries {
		ls := []prompb.Label{{Name: "__name__", Value: name}}
		if cluster != "" {
			ls = append(ls, prompb.Label{Name: "cluster", Value: cluster})
		}
		if replica != "" {
			ls = append(ls, prompb.Label{Name: "replica", Value: replica})
		}
		return prompb.TimeSeries{Labels: ls, Samples: []prompb.Sample{{Value: v, Timestamp: t0}}}
	}
	v1 := func(ts ...prompb.TimeSeries) *prompb.WriteRequest { return &prompb.WriteRequest{Timeseries: ts} }
	post := func(m marshaler, want int, ct string) {
		t.Helper()
		if ct == "" {
			ct = "application/x-protobuf"
		}
		if resp := send(t, base, m, ct); resp.StatusCode != want {
			t.Fatalf("write: %d, want %d", resp.StatusCode, want)
		}
	}
	post(v1(series("ha_a", "c1", "r1", 1), series("ha_b", "", "r1", 1)), http.StatusNoContent, "")
	post(v1(series("ha_a", "c1", "r2", 2), series("ha_c", "", "", 2)), http.StatusAccepted, "")
	// Unsorted labels (the slow path): r2 of c1 is dropped, r1 stored.
	unsorted := series("ha_d", "c1", "r2", 2)
	unsorted.Labels[0], unsorted.Labels[2] = unsorted.Labels[2], unsorted.Labels[0]
	post(v1(unsorted), http.StatusAccepted, "")
	unsorted = series("ha_d", "c1", "r1", 1)
	unsorted.Labels[0], unsorted.Labels[2] = unsorted.Labels[2], unsorted.Labels[0]
	post(v1(unsorted), http.StatusNoContent, "")
	// A first series without both labels: the request is stored as sent.
	post(v1(series("ha_e", "c1", "", 3), series("ha_e", "c1", "r2", 3)), http.StatusNoContent, "")
	// Another cluster elects its own; 2.0 alike.
	v2 := func(replica string) *writev2.Request {
		return &writev2.Request{Symbols: []string{"", "__name__", "ha_f", "cluster", "c2", "replica", replica},
			Timeseries: []writev2.TimeSeries{{LabelsRefs: []uint32{1, 2, 3, 4, 5, 6}, Samples: []writev2.Sample{{Value: 4, Timestamp: t0}}}}}
	}
	const ct2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request"
	post(v2("r2"), http.StatusNoContent, ct2)
	post(v2("r1"), http.StatusAccepted, ct2)
	// OTLP: data point attributes become labels; c2's r2 is elected.
	otlp := func(replica string, v int) []byte {
		return fmt.Appendf(nil, `{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "ha_g", "gauge": {"dataPoints": [
			{"asInt": "%d", "timeUnixNano": "%d", "attributes": [{"key": "cluster", "value": {"stringValue": "c2"}}, {"key": "replica", "value": {"stringValue": "%s"}}]}]}}]}]}]}`,
			v, int64(t0)*1e6, replica)
	}
	if code, _, out := otlpPost(t, base, otlp("r1", 5), "application/json", ""); code != http.StatusOK {
		t.Fatalf("OTLP of the other replica: %d %s", code, out)
	}
	if code, _, out := otlpPost(t, base, otlp("r2", 6), "application/json", ""); code != http.StatusOK {
		t.Fatalf("OTLP of the elected replica: %d %s", code, out)
	}

	c := client{t, base}
	code, r := c.get("/api/v1/query", url.Values{"query": {`{__name__=~"ha_.*"}`}, "time": {strconv.Itoa(t0/1000 + 1)}})
	if code != 200 {
		t.Fatalf("query: %d %s", code, r.Data)
	}
	var res struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := json.Unmarshal(r.Data, &res); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range res.Result {
		var ls []string
		for k, v := range s.Metric {
			ls = append(ls, k+"="+v)
		}
		sort.Strings(ls)
		got = append(got, strings.Join(ls, ",")+" "+s.Value[1].(string))
	}
	sort.Strings(got)
	want := []string{
		"__name__=ha_a,cluster=c1 1",
		"__name__=ha_b 1",
		"__name__=ha_d,cluster=c1 1",
		"__name__=ha_e,cluster=c1 3",
		"__name__=ha_e,cluster=c1,replica=r2 3",
		"__name__=ha_f,cluster=c2 4",
		"__name__=ha_g,cluster=c2 6",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("stored:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
