package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "github.com/stratadb/strata/proto/strata/v1"
)

// TestPausedOwnerWithQueuedWrites is issue 17's scenario with the real
// binaries: metasrv and two datanodes on one file:// store; the owner of
// a one-region table is frozen (SIGSTOP) with single-row writes queued at
// its HTTP port; past its lease the region reopens on the other datanode,
// which writes, flushes and runs fast GC with no lingering and full GC
// with no minimum age; then the frozen owner wakes (SIGCONT) with its
// writes in flight. Every acknowledged row must read back, the new owner
// must still write, and fsck must find nothing missing and nothing
// unowned.
func TestPausedOwnerWithQueuedWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and waits for a lease to expire")
	}
	etcd := freePort(t)
	store := "file://" + t.TempDir()
	meta := start(t, "metasrv", "metasrv", "--data-dir", t.TempDir(), "--etcd-client-addr", etcd, "--grpc-addr", "127.0.0.1:0", "--store", store)
	dns := map[string]*proc{}
	for _, id := range []string{"dn1", "dn2"} {
		dns[id] = start(t, id, "datanode", "--id", id, "--etcd-endpoints", "http://"+etcd,
			"--store", store, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--flush-bytes", "65536")
	}
	m := []string{"--metasrv", meta.grpc}
	run := func(args ...string) string {
		t.Helper()
		out, code := cli(t, args...)
		if code != 0 {
			t.Fatalf("strata %v: exit %d\n%s", args, code, out)
		}
		return out
	}
	run(append([]string{"cluster", "create-table", "t", "--regions", "1"}, m...)...)
	c := admin(t, meta.grpc)
	st := placed(t, c, 1, 30*time.Second, "")
	oldID := st.Regions[0].Owner
	newID := map[string]string{"dn1": "dn2", "dn2": "dn1"}[oldID]
	old, nw := dns[oldID], dns[newID]

	var mu sync.Mutex
	acked := map[string]bool{}
	var ts int64
	// write sends one request of n rows to p and records its rows if it
	// was acknowledged (204).
	httpc := &http.Client{Timeout: 2 * time.Minute}
	write := func(p *proc, n int) (int, error) {
		var b strings.Builder
		var keys []string
		mu.Lock()
		for range n {
			ts++
			host := fmt.Sprintf("h%d", ts%7)
			fmt.Fprintf(&b, "t,host=%s v=%d %d\n", host, ts, ts*1e9)
			keys = append(keys, fmt.Sprintf("%s/%d", host, ts*1e9))
		}
		mu.Unlock()
		resp, err := httpc.Post("http://"+p.http+"/write?db=x", "text/plain", strings.NewReader(b.String()))
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusNoContent {
			mu.Lock()
			for _, k := range keys {
				acked[k] = true
			}
			mu.Unlock()
		}
		return resp.StatusCode, nil
	}
	for range 20 {
		if code, err := write(old, 1); code != http.StatusNoContent {
			t.Fatalf("write to the owner: %d %v", code, err)
		}
	}

	// Freeze the owner with 40 single-row writes queued at its port.
	old.signal(syscall.SIGSTOP)
	frozen := true
	defer func() {
		if frozen {
			old.signal(syscall.SIGCONT)
		}
	}()
	var queued sync.WaitGroup
	codes := make([]int, 40)
	for i := range codes {
		queued.Add(1)
		go func() {
			defer queued.Done()
			codes[i], _ = write(old, 1)
		}()
	}
	paused := time.Now()
	placed(t, c, 1, 60*time.Second, oldID)
	t.Logf("%s frozen: the region reopened on %s in %v", oldID, newID, time.Since(paused).Round(100*time.Millisecond))

	// The new owner writes, flushes and collects, twice.
	for range 2 {
		for range 150 {
			if code, err := write(nw, 1); code != http.StatusNoContent {
				t.Fatalf("write to the new owner: %d %v", code, err)
			}
		}
		run("admin", "flush", "--server", nw.grpc)
		run(append([]string{"cluster", "gc", "run", "--table", "t", "--lingering", "0s"}, m...)...)
		run(append([]string{"cluster", "gc", "run", "--table", "t", "--full", "--min-age", "0s"}, m...)...)
	}

	// The frozen owner wakes with its writes in flight.
	old.signal(syscall.SIGCONT)
	frozen = false
	queued.Wait()
	late := 0
	for _, code := range codes {
		if code == http.StatusNoContent {
			late++
		}
	}
	t.Logf("%s woke: %d of %d queued writes acknowledged", oldID, late, len(codes))

	// The new owner still writes; the region is flushed and collected
	// once more.
	for range 10 {
		if code, err := write(nw, 1); code != http.StatusNoContent {
			t.Fatalf("write to the new owner after the old one woke: %d %v", code, err)
		}
	}
	run("admin", "flush", "--server", nw.grpc)
	run(append([]string{"cluster", "gc", "run", "--table", "t", "--lingering", "0s"}, m...)...)

	// Every acknowledged row reads back.
	have, missing := readBack(t, nw.grpc, acked, "t")
	if missing > 0 {
		t.Errorf("%d acknowledged rows are missing", missing)
	}
	// fsck: nothing missing, nothing unowned.
	fout, code := cli(t, "fsck", "--store", store)
	lines := strings.Split(strings.TrimSpace(fout), "\n")
	t.Logf("paused owner: acked=%d read=%d missing=%d late_acks=%d fsck: %s", len(acked), len(have), missing, late, lines[len(lines)-1])
	if code != 0 {
		t.Fatalf("fsck: exit %d\n%s", code, fout)
	}
	// The region stayed with the new owner.
	st2, err := c.ClusterStatus(context.Background(), &pb.ClusterStatusRequest{})
	if err != nil || st2.Regions[0].Owner != newID {
		t.Fatalf("placement after the wake: %v %v", st2, err)
	}
}
