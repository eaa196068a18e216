package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/prompb"

	"github.com/stratadb/strata/internal/hatracker"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// haSend remote-writes one sample of series ha_up of cluster's replica to
// addr and answers the status.
func haSend(t *testing.T, addr, cluster, replica string, v float64, ts int64) int {
	t.Helper()
	var ls []prompb.Label
	ls = append(ls, prompb.Label{Name: "__name__", Value: "ha_up"})
	if replica != "" {
		ls = append(ls, prompb.Label{Name: "__replica__", Value: replica})
	}
	if cluster != "" {
		ls = append(ls, prompb.Label{Name: "cluster", Value: cluster})
	}
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: ls, Samples: []prompb.Sample{{Value: v, Timestamp: ts}}}}}
	raw, err := req.Marshal()
	if err != nil {
		t.Error(err)
		return 0
	}
	resp, err := http.Post("http://"+addr+"/api/v1/write", "application/x-protobuf", bytes.NewReader(snappy.Encode(nil, raw)))
	if err != nil {
		t.Error(err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestHAPairTwoDatanodesAgree: two datanodes of a cluster (one etcd)
// receive at once the first requests of two replicas of each of many HA
// clusters, each replica's on both: every cluster elects one replica,
// whose requests both datanodes store, and the other's both drop.
func TestHAPairTwoDatanodesAgree(t *testing.T) {
	c := servertest.StartCluster(t, 2, servertest.ClusterOptions{DefaultRegions: 2, Config: func(c *server.Config) {
		c.HA = hatracker.Config{ClusterLabel: "cluster", FailoverTimeout: time.Minute}
	}})
	dn := c.Datanodes
	ts := time.Now().UnixMilli()
	// The metrics table first, hosted (a write to it may answer 503
	// while its regions open).
	for deadline := time.Now().Add(time.Minute); haSend(t, dn[0].HTTPAddr(), "", "", 0, ts) != http.StatusNoContent; {
		if time.Now().After(deadline) {
			t.Fatal("the metrics table is not writable")
		}
		time.Sleep(50 * time.Millisecond) // polling the table's readiness
	}
	const clusters = 10
	var mu sync.Mutex
	stored := map[string]map[string]bool{} // cluster, replica: a write stored
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range clusters {
		cl := fmt.Sprint("c", i)
		stored[cl] = map[string]bool{}
		for _, r := range []string{"r1", "r2"} {
			for _, d := range dn {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					code := haSend(t, d.HTTPAddr(), cl, r, 1, ts)
					switch code {
					case http.StatusNoContent:
						mu.Lock()
						stored[cl][r] = true
						mu.Unlock()
					case http.StatusAccepted:
					default:
						t.Errorf("%s %s: %d", cl, r, code)
					}
				}()
			}
		}
	}
	close(start)
	wg.Wait()
	for cl, rs := range stored {
		if len(rs) != 1 {
			t.Errorf("cluster %s: replicas stored %v, want one", cl, rs)
			continue
		}
		// Both datanodes agree afterwards too.
		for r := range rs {
			other := map[string]string{"r1": "r2", "r2": "r1"}[r]
			for _, d := range dn {
				if code := haSend(t, d.HTTPAddr(), cl, r, 1, ts+1000); code != http.StatusNoContent {
					t.Errorf("cluster %s, elected %s on %s: %d", cl, r, d.HTTPAddr(), code)
				}
				if code := haSend(t, d.HTTPAddr(), cl, other, 1, ts+1000); code != http.StatusAccepted {
					t.Errorf("cluster %s, not elected %s on %s: %d", cl, other, d.HTTPAddr(), code)
				}
			}
		}
	}
	elections := 0.
	for _, d := range dn {
		elections += servertest.Counter(t, d, "strata_ha_elected_replica_changes_total", func(map[string]string) bool { return true })
	}
	if elections != clusters {
		t.Errorf("elections: %v, want %d", elections, clusters)
	}
}

// TestHAPairFailover: two remote-write senders of one HA pair (the same
// cluster label, replicas a and b) send the same series at the same
// times, a's values 1 and b's 2. Only a's are stored, without the
// replica label, and b's requests are answered 202. Then a stops: within
// the failover timeout (and the update interval and a send) b is elected
// and its samples stored, so no gap is longer than that.
func TestHAPairFailover(t *testing.T) {
	const timeout = 2 * time.Second
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{Config: func(c *server.Config) {
		c.HA = hatracker.Config{ClusterLabel: "cluster", FailoverTimeout: timeout}
	}})
	update := hatracker.Config{ClusterLabel: "cluster", FailoverTimeout: timeout}.WithDefaults().UpdateInterval
	send := func(replica string, v float64, ts int64) int {
		t.Helper()
		req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
			Labels:  []prompb.Label{{Name: "__name__", Value: "ha_up"}, {Name: "__replica__", Value: replica}, {Name: "cluster", Value: "c1"}, {Name: "job", Value: "x"}},
			Samples: []prompb.Sample{{Value: v, Timestamp: ts}},
		}}}
		raw, err := req.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post("http://"+n.HTTPAddr()+"/api/v1/write", "application/x-protobuf", bytes.NewReader(snappy.Encode(nil, raw)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const step = 100 * time.Millisecond
	tick := time.NewTicker(step) // the senders' pace, not a wait on the server
	defer tick.Stop()

	// Both send; a, first, is elected (its first write may wait for the
	// metrics table's regions: 503, sent again, as Prometheus does).
	deadline := time.Now().Add(time.Minute)
	for sent := 0; sent < 20; <-tick.C {
		if time.Now().After(deadline) {
			t.Fatal("a's writes not stored")
		}
		ts := time.Now().UnixMilli()
		if code := send("a", 1, ts); code == http.StatusServiceUnavailable {
			continue
		} else if code != http.StatusNoContent {
			t.Fatalf("a's write: %d", code)
		}
		if code := send("b", 2, ts); code != http.StatusAccepted {
			t.Fatalf("b's write while a is elected: %d, want 202", code)
		}
		sent++
	}
	lastA := time.Now().UnixMilli()
	if code := send("a", 1, lastA); code != http.StatusNoContent {
		t.Fatalf("a's write: %d", code)
	}

	// a stops; b keeps sending until it is elected.
	var firstB int64
	for deadline := time.Now().Add(30 * timeout); firstB == 0; <-tick.C {
		if time.Now().After(deadline) {
			t.Fatal("b not elected")
		}
		ts := time.Now().UnixMilli()
		switch code := send("b", 2, ts); code {
		case http.StatusNoContent:
			firstB = ts
		case http.StatusAccepted:
		default:
			t.Fatalf("b's write: %d", code)
		}
	}
	for range 5 {
		<-tick.C
		if code := send("b", 2, time.Now().UnixMilli()); code != http.StatusNoContent {
			t.Fatalf("b's write once elected: %d", code)
		}
	}
	if code := send("a", 1, time.Now().UnixMilli()); code != http.StatusAccepted {
		t.Fatalf("a's write once b is elected: %d, want 202", code)
	}

	// What is stored: one series, without the replica label; a's values
	// up to lastA, then b's from firstB.
	q := url.Values{"query": {"ha_up[10m]"}, "time": {strconv.FormatInt(time.Now().Unix()+1, 10)}}
	resp, err := http.Get("http://" + n.HTTPAddr() + "/api/v1/query?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("query: %s, %v", resp.Status, err)
	}
	if len(body.Data.Result) != 1 {
		t.Fatalf("%d series stored, want 1: %+v", len(body.Data.Result), body.Data.Result)
	}
	r := body.Data.Result[0]
	if want := map[string]string{"__name__": "ha_up", "cluster": "c1", "job": "x"}; len(r.Metric) != len(want) || r.Metric["cluster"] != "c1" || r.Metric["job"] != "x" {
		t.Fatalf("stored series %v, want %v", r.Metric, want)
	}
	var prev int64
	as, bs := 0, 0
	for _, s := range r.Values {
		ts := int64(s[0].(float64) * 1000)
		switch s[1] {
		case "1":
			as++
			if ts > lastA {
				t.Errorf("a's sample at %d, after its last %d", ts, lastA)
			}
		case "2":
			bs++
			if ts < firstB {
				t.Errorf("b's sample at %d stored, before its election at %d", ts, firstB)
			}
		default:
			t.Errorf("sample %v", s)
		}
		if gap := time.Duration(ts-prev) * time.Millisecond; prev != 0 && gap > timeout+update+time.Second {
			t.Errorf("a gap of %v, over the failover timeout %v and the update interval %v (and a second)", gap, timeout, update)
		}
		prev = ts
	}
	if as < 21 || bs < 6 {
		t.Errorf("%d of a's samples and %d of b's stored, want 21 and 6", as, bs)
	}
	if got := servertest.Counter(t, n.Server, "strata_ha_elected_replica_changes_total", func(map[string]string) bool { return true }); got != 2 {
		t.Errorf("elections: %v, want 2", got)
	}
	if got := servertest.Counter(t, n.Server, "strata_ha_samples_dropped_total", func(map[string]string) bool { return true }); got < 21 {
		t.Errorf("samples dropped: %v, want at least 21", got)
	}
	t.Logf("failover: a's last sample %v before b's first stored", time.Duration(firstB-lastA)*time.Millisecond)
}
