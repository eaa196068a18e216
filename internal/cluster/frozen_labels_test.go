package cluster_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// hostValues asks a datanode for the hosts of table t (freezeOwner's)
// through the Prometheus API, answered from the postings of t's region
// (RegionTags if another datanode owns it), or returns the error the
// datanode answered with.
func hostValues(httpAddr string) ([]string, error) {
	c := &http.Client{Timeout: 3 * time.Minute}
	resp, err := c.Get("http://" + httpAddr + "/api/v1/label/host/values?match[]=t_v")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out struct {
		Status string   `json:"status"`
		Error  string   `json:"error"`
		Data   []string `json:"data"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("%d %s", resp.StatusCode, data)
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("%d %s", resp.StatusCode, out.Error)
	}
	return out.Data, nil
}

// ackedHosts are the hosts of the rows f acknowledged, sorted.
func (f *frozenOwner) ackedHosts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var hosts []string
	for k := range f.acked {
		h, _, _ := strings.Cut(k, "/")
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// A label look-up sent to a datanode while the owner of the region it
// reads is frozen (SIGSTOP) waits on the owner's RegionTags, which never
// answers. It must neither hang nor answer in part (no value, the one
// region's being missing): once the owner's lease ends, the call is
// cancelled and made again where the region reopened (here), and every
// value comes.
func TestLabelValuesThroughAFrozenOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and waits for a lease to expire")
	}
	f := ownedTable(t)
	want := f.ackedHosts()
	if got, err := hostValues(f.nw.http); err != nil || !slices.Equal(got, want) {
		t.Fatalf("before the freeze: %v, %v; want %v", got, err, want)
	}
	retries := metricValue(t, f.nw.http, "strata_remote_scan_retries_total")
	f.freeze()
	type answer struct {
		hosts []string
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		hosts, err := hostValues(f.nw.http)
		done <- answer{hosts, err}
	}()
	// The look-up's call to the frozen owner is open while metasrv still
	// places the region there.
	for end := time.Now().Add(60 * time.Second); metricValue(t, f.nw.http, "strata_remote_scans") < 1; {
		if time.Now().After(end) {
			t.Fatal("no call to another datanode open on the asking datanode after 60 s")
		}
		time.Sleep(20 * time.Millisecond) // another process's state, read from its metrics
	}
	if st := placed(t, f.c, 1, time.Second, ""); st.Regions[0].Owner != f.oldID {
		t.Fatalf("the region moved to %s before the look-up reached its frozen owner: the machine is too slow for this test", st.Regions[0].Owner)
	}
	select {
	case a := <-done:
		t.Fatalf("the look-up answered while the region's only owner was frozen: %v, %v", a.hosts, a.err)
	default:
	}
	f.failover()
	select {
	case a := <-done:
		if a.err != nil || !slices.Equal(a.hosts, want) {
			t.Fatalf("look-up across the failover: %v, %v; want %v", a.hosts, a.err, want)
		}
		t.Logf("the look-up answered %d hosts %v after the freeze", len(a.hosts), time.Since(f.paused).Round(100*time.Millisecond))
	case <-time.After(2 * time.Minute):
		t.Fatal("no answer 2 min after the region reopened on a live datanode")
	}
	f.retriedAndClosed(retries)
}

// Label look-ups on both datanodes, in a loop, while the region they read
// moves back and forth: every answer has every value, or is an error
// naming the region. None is partial.
func TestLabelValuesWhileTheRegionMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	f := ownedTable(t)
	want := f.ackedHosts()
	f.askWhileMoving(4, func(p *proc) (bool, string, error) {
		hosts, err := hostValues(p.http)
		return err == nil && slices.Equal(hosts, want), fmt.Sprintf("%v (want %v)", hosts, want), err
	})
}
