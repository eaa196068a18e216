package cluster_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stratadb/strata/internal/cluster"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// frozenOwner is issue 17's set-up with the real binaries: metasrv and two
// datanodes on one file:// store, a one-region table t written through
// its owner, then the owner frozen (SIGSTOP) with 40 single-row writes
// queued at its HTTP port, until its lease has passed and the region
// reopened on the other datanode.
type frozenOwner struct {
	t        *testing.T
	etcd     string
	storeDir string
	meta     *proc
	old, nw  *proc
	oldID    string
	c        pb.MetaAdminClient

	mu     sync.Mutex
	acked  map[string]bool
	ts     int64
	httpc  *http.Client
	queued sync.WaitGroup
	codes  []int
	frozen bool
	paused time.Time
}

func freezeOwner(t *testing.T, metaArgs ...string) *frozenOwner {
	t.Helper()
	f := ownedTable(t, metaArgs...)
	f.freeze()
	f.failover()
	return f
}

// ownedTable starts freezeOwner's cluster and writes table t's first 20
// rows through the region's owner, f.old; f.nw is the other datanode.
func ownedTable(t *testing.T, metaArgs ...string) *frozenOwner {
	t.Helper()
	f := &frozenOwner{t: t, etcd: freePort(t), storeDir: t.TempDir(), acked: map[string]bool{}, httpc: &http.Client{Timeout: 2 * time.Minute}}
	store := "file://" + f.storeDir
	f.meta = start(t, "metasrv", "metasrv", append([]string{"--data-dir", t.TempDir(), "--etcd-client-addr", f.etcd, "--grpc-addr", "127.0.0.1:0", "--store", store}, metaArgs...)...)
	dns := map[string]*proc{}
	for _, id := range []string{"dn1", "dn2"} {
		dns[id] = start(t, id, "datanode", "--id", id, "--etcd-endpoints", "http://"+f.etcd,
			"--store", store, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--flush-bytes", "65536")
	}
	f.run("cluster", "create-table", "t", "--regions", "1")
	f.c = admin(t, f.meta.grpc)
	st := placed(t, f.c, 1, 30*time.Second, "")
	f.oldID = st.Regions[0].Owner
	f.old, f.nw = dns[f.oldID], dns[map[string]string{"dn1": "dn2", "dn2": "dn1"}[f.oldID]]
	for range 20 {
		if code, err := f.write(f.old, 1); code != http.StatusNoContent {
			t.Fatalf("write to the owner: %d %v", code, err)
		}
	}
	return f
}

// freeze freezes the owner (SIGSTOP) and queues 40 single-row writes at
// its HTTP port.
func (f *frozenOwner) freeze() {
	f.old.signal(syscall.SIGSTOP)
	f.frozen, f.paused = true, time.Now()
	f.t.Cleanup(func() { f.wake() })
	// The signal stops the process's threads asynchronously: wait until
	// the kernel reports it stopped.
	for end := time.Now().Add(30 * time.Second); ; {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", f.old.cmd.Process.Pid))
		if err != nil {
			break // not Linux: the signal has to do
		}
		// pid (comm) state ...
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && (stat[i+2] == 'T' || stat[i+2] == 't') {
			break
		}
		if time.Now().After(end) {
			f.t.Fatalf("%s not stopped 30 s after SIGSTOP: %s", f.oldID, stat)
		}
		time.Sleep(time.Millisecond) // the kernel's state of another process
	}
	f.codes = make([]int, 40)
	for i := range f.codes {
		f.queued.Add(1)
		go func() {
			defer f.queued.Done()
			f.codes[i], _ = f.write(f.old, 1)
		}()
	}
}

// failover waits until the frozen owner's region reopened on f.nw.
func (f *frozenOwner) failover() {
	f.t.Helper()
	placed(f.t, f.c, 1, 60*time.Second, f.oldID)
	f.t.Logf("%s frozen: the region reopened elsewhere in %v", f.oldID, time.Since(f.paused).Round(100*time.Millisecond))
}

// run runs the CLI against metasrv (admin and cluster commands get
// --metasrv) and fails the test on a non-zero exit.
func (f *frozenOwner) run(args ...string) string {
	f.t.Helper()
	if args[0] == "cluster" {
		args = append(args, "--metasrv", f.meta.grpc)
	}
	out, code := cli(f.t, args...)
	if code != 0 {
		f.t.Fatalf("strata %v: exit %d\n%s", args, code, out)
	}
	return out
}

// write sends one request of n unique rows of t to p and records them if
// it was acknowledged (204).
func (f *frozenOwner) write(p *proc, n int) (int, error) {
	var b strings.Builder
	var keys []string
	f.mu.Lock()
	for range n {
		f.ts++
		host := fmt.Sprintf("h%d", f.ts%7)
		fmt.Fprintf(&b, "t,host=%s v=%d %d\n", host, f.ts, f.ts*1e9)
		keys = append(keys, fmt.Sprintf("%s/%d", host, f.ts*1e9))
	}
	f.mu.Unlock()
	resp, err := f.httpc.Post("http://"+p.http+"/write?db=x", "text/plain", strings.NewReader(b.String()))
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		f.mu.Lock()
		for _, k := range keys {
			f.acked[k] = true
		}
		f.mu.Unlock()
	}
	return resp.StatusCode, nil
}

// wake lets the frozen owner run again and waits for its queued writes; it
// returns how many of them were acknowledged.
func (f *frozenOwner) wake() int {
	if f.frozen {
		f.old.signal(syscall.SIGCONT)
		f.frozen = false
	}
	f.queued.Wait()
	late := 0
	for _, code := range f.codes {
		if code == http.StatusNoContent {
			late++
		}
	}
	return late
}

// TestPausedOwnerWithQueuedWrites: while the owner is frozen, the new owner
// writes, flushes and runs fast GC with no lingering and full GC with no
// minimum age, twice; then the frozen owner wakes with its writes in
// flight. Every acknowledged row must read back, the new owner must still
// write, and fsck must find nothing missing and nothing unowned.
func TestPausedOwnerWithQueuedWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and waits for a lease to expire")
	}
	f := freezeOwner(t)
	for range 2 {
		for range 150 {
			if code, err := f.write(f.nw, 1); code != http.StatusNoContent {
				t.Fatalf("write to the new owner: %d %v", code, err)
			}
		}
		f.run("admin", "flush", "--server", f.nw.grpc)
		f.run("cluster", "gc", "run", "--table", "t", "--lingering", "0s")
		f.run("cluster", "gc", "run", "--table", "t", "--full", "--min-age", "0s")
	}
	late := f.wake()
	t.Logf("%s woke: %d of %d queued writes acknowledged", f.oldID, late, len(f.codes))

	// The new owner still writes; the region is flushed and collected
	// once more.
	for range 10 {
		if code, err := f.write(f.nw, 1); code != http.StatusNoContent {
			t.Fatalf("write to the new owner after the old one woke: %d %v", code, err)
		}
	}
	f.run("admin", "flush", "--server", f.nw.grpc)
	f.run("cluster", "gc", "run", "--table", "t", "--lingering", "0s")

	have, missing := readBack(t, f.nw.grpc, f.acked, "t")
	if missing > 0 {
		t.Errorf("%d acknowledged rows are missing", missing)
	}
	fout, code := cli(t, "fsck", "--store", "file://"+f.storeDir)
	lines := strings.Split(strings.TrimSpace(fout), "\n")
	t.Logf("paused owner: acked=%d read=%d missing=%d late_acks=%d fsck: %s", len(f.acked), len(have), missing, late, lines[len(lines)-1])
	if code != 0 {
		t.Fatalf("fsck: exit %d\n%s", code, fout)
	}
	st, err := f.c.ClusterStatus(context.Background(), &pb.ClusterStatusRequest{})
	if err != nil || st.Regions[0].Owner == f.oldID {
		t.Fatalf("placement after the wake: %v %v", st, err)
	}
}

// TestDropRacingAFrozenOwner drops the table while its former owner is
// frozen with writes queued, then wakes it. A write the woken owner
// acknowledges must not be one into the dropped table: past its lease its
// regions acknowledge nothing, and a write it routes lands in the table
// the write creates anew (line protocol creates missing tables), where it
// must read back. A call of its that was in flight when it froze may still
// land under the dropped prefix; the final sweep (shortened here with
// --final-sweep-after) deletes it: afterwards the prefix is empty and the
// catalog has forgotten the dropped table.
func TestDropRacingAFrozenOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and waits for a lease to expire")
	}
	f := freezeOwner(t, "--final-sweep-after", "20s")
	f.run("admin", "flush", "--server", f.nw.grpc)
	if out := f.run("cluster", "drop-table", "t"); !strings.Contains(out, "dropped table t") {
		t.Fatalf("drop-table: %s", out)
	}
	f.mu.Lock()
	before := maps.Clone(f.acked)
	f.mu.Unlock()
	late := f.wake()
	lateAcked := map[string]bool{}
	for k := range f.acked {
		if !before[k] {
			lateAcked[k] = true
		}
	}
	afterWake := files(t, filepath.Join(f.storeDir, "1"))
	ec, err := cluster.Connect([]string{"http://" + f.etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	for end := time.Now().Add(90 * time.Second); ; {
		resp, err := ec.Get(context.Background(), cluster.CatalogPrefix+"sweeps/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the final sweep did not run: %d sweeps pending", len(resp.Kvs))
		}
		time.Sleep(200 * time.Millisecond) // another process's progress, read from etcd
	}
	left := files(t, filepath.Join(f.storeDir, "1"))
	t.Logf("drop racing a frozen owner: %d late acks, %d objects under the dropped prefix after the wake %v, %d after the final sweep", late, len(afterWake), afterWake, len(left))
	if len(left) != 0 {
		t.Fatalf("objects left under the dropped table's prefix: %v", left)
	}
	if out, code := cli(t, "fsck", "--store", "file://"+f.storeDir); code != 0 {
		t.Fatalf("fsck: exit %d\n%s", code, out)
	}
	// Table t again (made by the woken owner's writes, or now): it takes
	// writes, and every write acknowledged after the drop reads back. A
	// woken owner's line-protocol write makes t a logical table (its rows
	// in __lines' regions), create-table a table of one region: which
	// regions exist depends on the race, so wait for all of them.
	if out, code := cli(t, "cluster", "create-table", "t", "--regions", "1", "--metasrv", f.meta.grpc); code != 0 && !strings.Contains(out, "exists") {
		t.Fatalf("create-table t: exit %d\n%s", code, out)
	}
	allPlaced(t, f.c, 30*time.Second)
	for range 5 {
		if code, err := f.write(f.nw, 1); code != http.StatusNoContent {
			t.Fatalf("write to table t made again: %d %v", code, err)
		}
		f.mu.Lock()
		lateAcked[fmt.Sprintf("h%d/%d", f.ts%7, f.ts*1e9)] = true
		f.mu.Unlock()
	}
	if _, missing := readBack(t, f.nw.grpc, lateAcked, "t"); missing > 0 {
		t.Fatalf("%d of %d writes acknowledged after the drop are missing (acknowledged into the dropped table)", missing, len(lateAcked))
	}
}

// files lists the regular files under dir (none if it does not exist).
func files(t *testing.T, dir string) []string {
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			out = append(out, path)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}
