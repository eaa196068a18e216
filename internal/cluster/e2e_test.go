package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/auth"
	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/gcsched"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/testseed"
	"github.com/stratadb/strata/internal/tlsutil"
	"github.com/stratadb/strata/internal/version"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

var bins string

// oldVersion is stamped into the datanode-old binary.
const oldVersion = "v0.0.1-old"

// procEnv is added to the environment of every process a test starts.
var procEnv []string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "strata-cluster-")
	if err != nil {
		panic(err)
	}
	bins = dir
	for _, c := range []string{"metasrv", "datanode", "strata"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, c), "../../cmd/"+c).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", c, err, out)
			os.Exit(1)
		}
	}
	// An older build of the datanode, for a cluster with mixed versions
	// (only the link differs: -X stamps the version, as release builds do).
	out, err := exec.Command("go", "build", "-ldflags", "-X github.com/stratadb/strata/internal/version.Version="+oldVersion,
		"-o", filepath.Join(dir, "datanode-old"), "../../cmd/datanode").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building datanode-old: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	objstoretest.StopMinIO()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func freePort(t *testing.T) string { return clustertest.FreeAddr(t) }

type logBuf = clustertest.LogBuf

type proc struct {
	name   string
	cmd    *exec.Cmd
	logs   *logBuf
	exited chan struct{}
	http   string
	grpc   string
}

var servingRE = regexp.MustCompile(`msg=serving http=(\S+) grpc=(\S+)`)
var metaServingRE = regexp.MustCompile(`msg=serving grpc=(\S+)`)

// start runs a binary and waits until it logs its addresses. Its logs are
// printed if the test fails.
func start(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	if bin == "metasrv" && !slices.Contains(args, "--http-addr") {
		// Not the default :8089: two metasrvs of a test, or a test
		// beside a running metasrv, would take the same port.
		args = append(args, "--http-addr", "127.0.0.1:0")
	}
	cmd := exec.Command(filepath.Join(bins, bin), args...)
	cmd.Env = append(os.Environ(), procEnv...)
	pr, pw := io.Pipe()
	cmd.Stderr, cmd.Stdout = pw, pw
	p := &proc{name: name, cmd: cmd, logs: &logBuf{}, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			_, _ = p.logs.Write([]byte(line + "\n"))
			if m := servingRE.FindStringSubmatch(line); m != nil {
				ready <- m[1:]
			} else if m := metaServingRE.FindStringSubmatch(line); m != nil {
				ready <- []string{"", m[1]}
			}
		}
	}()
	go func() { _ = cmd.Wait(); _ = pw.Close(); close(p.exited) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- logs of %s ---\n%s", name, p.logs.String())
		}
		_ = cmd.Process.Kill()
		<-p.exited
	})
	select {
	case a := <-ready:
		p.http, p.grpc = a[0], a[1]
	case <-p.exited:
		t.Fatalf("%s exited before serving", name)
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start in 60 s", name)
	}
	return p
}

func (p *proc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// authed is admin with procEnv's token.
func authed(t *testing.T, addr string) pb.MetaAdminClient {
	tok, err := auth.Load("")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range procEnv {
		if v, ok := strings.CutPrefix(e, "STRATA_AUTH_TOKEN="); ok {
			tok = auth.New(v)
		}
	}
	conn, err := grpc.NewClient(addr, append(tok.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewMetaAdminClient(conn)
}

func admin(t *testing.T, addr string) pb.MetaAdminClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewMetaAdminClient(conn)
}

// placed waits until every region of the cluster has a live owner among
// want (nil: any live datanode) and returns the status.
func placed(t *testing.T, c pb.MetaAdminClient, regions int, deadline time.Duration, notOn string) *pb.ClusterStatusResponse {
	t.Helper()
	return placedWhen(t, c, func(n int) bool { return n == regions }, deadline, notOn)
}

// allPlaced waits, like placed, until at least one region is placed and
// every region has a live owner, whatever their number (a test that
// cannot know which tables a racing write made).
func allPlaced(t *testing.T, c pb.MetaAdminClient, deadline time.Duration) *pb.ClusterStatusResponse {
	t.Helper()
	return placedWhen(t, c, func(n int) bool { return n > 0 }, deadline, "")
}

func placedWhen(t *testing.T, c pb.MetaAdminClient, count func(int) bool, deadline time.Duration, notOn string) *pb.ClusterStatusResponse {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := c.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		cancel()
		if err == nil && count(len(st.Regions)) {
			ok := true
			for _, r := range st.Regions {
				if !r.OwnerLive || r.Owner == notOn {
					ok = false
				}
			}
			if ok {
				return st
			}
		}
		if time.Now().After(end) {
			t.Fatalf("regions not placed within %v: %v %v", deadline, st, err)
		}
		time.Sleep(200 * time.Millisecond) // polling an external process's view; no signal to wait on
	}
}

// TestFailoverLosesNoAcknowledgedWrite runs metasrv (embedded etcd) and
// three datanodes as processes over one store. Writers send line protocol
// to every datanode while one datanode is killed with -9 and another is
// paused (SIGSTOP) past its lease: their regions reopen on the others
// within 30 s, a paused datanode that wakes up acknowledges nothing it
// cannot keep, and every acknowledged row is readable at the end.
func TestFailoverLosesNoAcknowledgedWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and waits for leases to expire")
	}
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 7))
	store := objstoretest.MinIO(t).NewBucket(t)
	etcd := freePort(t)
	meta := start(t, "metasrv", "metasrv", "--data-dir", t.TempDir(), "--etcd-client-addr", etcd, "--grpc-addr", "127.0.0.1:0", "--log-level", "debug")
	var dns []*proc
	for i := range 3 {
		dns = append(dns, start(t, fmt.Sprintf("dn%d", i+1), "datanode", "--id", fmt.Sprintf("dn%d", i+1), "--etcd-endpoints", "http://"+etcd,
			"--store", store, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--flush-bytes", "65536"))
	}
	c := admin(t, meta.grpc)
	// Scheduled GC at test speed, with no lingering and no minimum age:
	// it runs during the whole scenario, kills and pauses included.
	ec, err := cluster.Connect([]string{"http://" + etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	if err := gcsched.SaveOptions(context.Background(), ec, gcsched.Options{Enabled: true, FastInterval: time.Second, FullInterval: 3 * time.Second, Concurrency: 4, RunTimeout: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	const regions = 6
	if _, err := c.CreateTable(context.Background(), &pb.CreateTableRequest{Name: "cpu", Regions: regions}); err != nil {
		t.Fatal(err)
	}
	st := placed(t, c, regions, 30*time.Second, "")
	t.Logf("placed: %v", st.Regions)

	// Writers: each request is one batch of unique rows; a 204 means
	// every row of it is acknowledged.
	// Writers: one always to dn1 (it stays up), the others to any
	// datanode at random.
	survivor := dns[0]
	var mu sync.Mutex // guards rng and compactions
	g := clustertest.StartIngest(clustertest.IngestOptions{Writers: 4, Batch: 50, Hosts: 97, Target: func(w, _ int) string {
		if w == 0 {
			return survivor.http
		}
		mu.Lock()
		defer mu.Unlock()
		return dns[rng.IntN(len(dns))].http
	}})
	var stop sync.WaitGroup
	done := make(chan struct{})
	// Compactions of every file, again and again, through metasrv.
	var compactions int
	stop.Add(1)
	go func() {
		defer stop.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			resp, err := c.Compact(ctx, &pb.CompactRequest{Table: "cpu", All: true})
			cancel()
			if err == nil {
				mu.Lock()
				compactions += len(resp.Jobs)
				mu.Unlock()
			}
		}
	}()
	g.WaitMore(t, 2000, 90*time.Second)
	// kill -9 dn2 during ingest and compactions.
	killed := time.Now()
	dns[1].signal(syscall.SIGKILL)
	placed(t, c, regions, 30*time.Second, "dn2")
	t.Logf("dn2 killed: its regions reopened elsewhere in %v", time.Since(killed).Round(100*time.Millisecond))
	g.WaitMore(t, 2000, 90*time.Second)

	// Pause dn3 past its lease (10 s), then let it run again.
	dns[2].signal(syscall.SIGSTOP)
	paused := time.Now()
	placed(t, c, regions, 30*time.Second, "dn3")
	t.Logf("dn3 paused: its regions moved in %v", time.Since(paused).Round(100*time.Millisecond))
	dns[2].signal(syscall.SIGCONT)
	g.WaitMore(t, 2000, 90*time.Second)
	close(done)
	stop.Wait()
	acked, _ := g.Stop()

	// Every acknowledged row is there.
	have, missing := readBack(t, survivor.grpc, acked)
	t.Logf("failover: acked=%d rows=%d missing=%d compactions=%d", len(acked), len(have), missing, compactions)
	if missing > 0 {
		t.Fatalf("%d acknowledged rows are missing", missing)
	}
	// PromQL on one datanode fans out to the regions the others own: the
	// series endpoint and a sum over every row agree with the raw scan.
	hosts := map[string]bool{}
	var sum float64
	for k := range have {
		host, ts, _ := strings.Cut(k, "/")
		hosts[host] = true
		n, _ := strconv.ParseInt(ts, 10, 64)
		sum += float64(n / 1e9) // the row's v is its sequence number, its ts that many seconds
	}
	var series struct{ Data []map[string]string }
	promGet(t, survivor.http, "/api/v1/series?match[]=cpu_v", &series)
	if len(series.Data) != len(hosts) {
		t.Fatalf("PromQL series: %d, the scan read %d hosts", len(series.Data), len(hosts))
	}
	var res struct {
		Data struct {
			Result []struct{ Value [2]any }
		}
	}
	promGet(t, survivor.http, "/api/v1/query?query=sum(sum_over_time(cpu_v[100y]))&time=1000000", &res)
	if len(res.Data.Result) != 1 || res.Data.Result[0].Value[1] != strconv.FormatFloat(sum, 'f', -1, 64) {
		t.Fatalf("PromQL sum over every row: %+v, want %v", res.Data.Result, sum)
	}
	// The stale datanode closed its regions when it woke up.
	if !strings.Contains(dns[2].logs.String(), "region lease lost") {
		t.Fatal("dn3 did not notice it lost its lease")
	}
	// The scheduler runs both modes on every region (it kept running
	// through the kill and the pause); full GC never finds an orphan.
	var runs, orphans int64
	for end := time.Now().Add(20 * time.Second); ; {
		states, err := gcsched.States(context.Background(), ec)
		if err != nil {
			t.Fatal(err)
		}
		runs, orphans = 0, 0
		var behind []string
		for i := range regions {
			s := states[layout.RegionID{Table: 1, Region: uint32(i)}]
			if s.LastFast.Before(paused) || s.LastFull.Before(paused) {
				behind = append(behind, fmt.Sprintf("1/%d: %+v", i, s))
			}
			runs += s.Runs
			orphans += s.Orphans
		}
		if len(behind) == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("scheduled GC did not run both modes on every region after the pause:\n%s", strings.Join(behind, "\n"))
		}
		time.Sleep(200 * time.Millisecond) // the scheduler is another process
	}
	t.Logf("scheduled GC: %d runs, %d orphans found", runs, orphans)
	if orphans != 0 {
		t.Fatalf("full-listing GC found %d orphans", orphans)
	}
	// Offline: nothing missing, nothing unowned once fast GC has run on
	// the surviving owners (it ran throughout).
	out, code := cli(t, "fsck", "--store", store)
	if code != 0 {
		t.Fatalf("fsck: exit %d\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	t.Logf("fsck: %s", lines[len(lines)-1])
}

// TestMetasrvLeaderFailover runs two metasrv replicas over one etcd (in
// this test process), kills the leader with -9, and checks that the other
// takes over within 15 s: it answers admin calls, and places the regions
// of a table created after the failover.
func TestMetasrvLeaderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and waits for the election to expire")
	}
	cli := clustertest.Etcd(t)
	ep := cli.Endpoints()[0]
	if err := gcsched.SaveOptions(context.Background(), cli, gcsched.Options{Enabled: true, FastInterval: time.Second, FullInterval: 2 * time.Second, Concurrency: 2, RunTimeout: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	m1 := start(t, "metasrv-1", "metasrv", "--etcd-endpoints", ep, "--grpc-addr", "127.0.0.1:0")
	m2 := start(t, "metasrv-2", "metasrv", "--etcd-endpoints", ep, "--grpc-addr", "127.0.0.1:0")
	start(t, "dn1", "datanode", "--id", "dn1", "--etcd-endpoints", ep, "--store", "file://"+t.TempDir(), "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--gc-interval", "0")
	// Either replica answers; the follower forwards to the leader.
	st, err := admin(t, m2.grpc).ClusterStatus(context.Background(), &pb.ClusterStatusRequest{})
	for err != nil || st.Leader == "" {
		time.Sleep(100 * time.Millisecond) // the first election
		st, err = admin(t, m2.grpc).ClusterStatus(context.Background(), &pb.ClusterStatusRequest{})
	}
	leader, follower := m1, m2
	if st.Leader == m2.grpc {
		leader, follower = m2, m1
	}
	if _, err := admin(t, follower.grpc).CreateTable(context.Background(), &pb.CreateTableRequest{Name: "before", Regions: 2}); err != nil {
		t.Fatal(err)
	}
	placed(t, admin(t, follower.grpc), 2, 30*time.Second, "")
	killed := time.Now()
	leader.signal(syscall.SIGKILL)
	c := admin(t, follower.grpc)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err = c.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		cancel()
		if err == nil && st.Leader == follower.grpc {
			break
		}
		if time.Since(killed) > 15*time.Second {
			t.Fatalf("no new leader 15 s after the leader was killed: %v %v", st, err)
		}
		time.Sleep(100 * time.Millisecond) // polling another process
	}
	t.Logf("leader killed: %s leads after %v", follower.name, time.Since(killed).Round(100*time.Millisecond))
	if _, err := c.CreateTable(context.Background(), &pb.CreateTableRequest{Name: "after", Regions: 2}); err != nil {
		t.Fatal(err)
	}
	placed(t, c, 4, 15*time.Second, "")
	// The new leader's scheduler continues from the state in etcd: the
	// regions GC'd before the kill keep their run counts and run again.
	before, err := gcsched.States(context.Background(), cli)
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(20 * time.Second); ; {
		now, _ := gcsched.States(context.Background(), cli)
		ok := len(now) == 4
		for id, s := range now {
			if s.LastFast.Before(killed) || s.Runs < before[id].Runs {
				ok = false
			}
		}
		if ok {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the new leader's scheduler did not run every region: before %v, now %v", before, now)
		}
		time.Sleep(200 * time.Millisecond) // another process's schedule
	}
}

// promGet GETs a Prometheus API path from a datanode and decodes the JSON.
func promGet(t *testing.T, httpAddr, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(data, v) != nil {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, data)
	}
}

// readBack queries a table (cpu unless named) through the CLI on a datanode
// and returns the rows read (as "host/ts") and how many acknowledged ones
// are missing.
func readBack(t *testing.T, grpcAddr string, acked map[string]bool, table ...string) (map[string]bool, int) {
	t.Helper()
	name := "cpu"
	if len(table) > 0 {
		name = table[0]
	}
	out, code := cli(t, "query", name, "-o", "csv", "--server", grpcAddr, "--timeout", "2m")
	if code != 0 {
		t.Fatalf("query: exit %d\n%s", code, out)
	}
	have := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		f := strings.Split(l, ",")
		ts, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			t.Fatalf("row %q: %v", l, err)
		}
		have[fmt.Sprintf("%s/%d", f[1], ts.UnixNano())] = true
	}
	missing := 0
	for k := range acked {
		if !have[k] {
			missing++
		}
	}
	return have, missing
}

func cli(t *testing.T, args ...string) (string, int) {
	t.Helper()
	c := exec.Command(filepath.Join(bins, "strata"), args...)
	c.Env = append(os.Environ(), procEnv...)
	out, err := c.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// The admin API through the CLI: create a table, write, list regions with
// their owners' statistics, move a region (the data stays readable),
// compact, cancel, GC now (dry and real), and read and change the
// scheduler's options.
func TestClusterAdminCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	// With auth on: every process and the CLI share the token; a caller
	// without it is refused.
	procEnv = []string{"STRATA_AUTH_TOKEN=cluster-test-token"}
	defer func() { procEnv = nil }()
	etcd := freePort(t)
	storeDir := t.TempDir()
	store := "file://" + storeDir
	meta := start(t, "metasrv", "metasrv", "--data-dir", t.TempDir(), "--etcd-client-addr", etcd, "--grpc-addr", "127.0.0.1:0", "--store", store)
	var dns []*proc
	for i, bin := range []string{"datanode", "datanode-old"} { // mixed versions
		dns = append(dns, start(t, fmt.Sprintf("dn%d", i+1), bin, "--id", fmt.Sprintf("dn%d", i+1), "--etcd-endpoints", "http://"+etcd,
			"--store", store, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"))
	}
	m := []string{"--metasrv", meta.grpc}
	run := func(args ...string) string {
		t.Helper()
		out, code := cli(t, append(args, m...)...)
		if code != 0 {
			t.Fatalf("strata %v: exit %d\n%s", args, code, out)
		}
		return out
	}
	if out := run("cluster", "create-table", "cpu", "--regions", "4"); !strings.Contains(out, "4 regions") {
		t.Fatalf("create-table: %s", out)
	}
	placed(t, authed(t, meta.grpc), 4, 30*time.Second, "")
	if _, err := admin(t, meta.grpc).ClusterStatus(context.Background(), &pb.ClusterStatusRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("admin call without the token: %v", err)
	}
	if out, code := cli(t, "cluster", "status", "--metasrv", meta.grpc, "--auth-token-file", "/dev/null"); code == 0 {
		t.Fatalf("an empty token file was accepted:\n%s", out)
	}
	var b strings.Builder
	for i := range 400 {
		fmt.Fprintf(&b, "cpu,host=h%d v=%d %d\n", i%20, i, int64(i)*1e9)
	}
	resp, err := http.Post("http://"+dns[0].http+"/write?db=x", "text/plain", strings.NewReader(b.String()))
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("write without the token: %v %v", resp, err)
	}
	resp.Body.Close()
	req, _ := http.NewRequest("POST", "http://"+dns[0].http+"/write?db=x", strings.NewReader(b.String()))
	req.Header.Set("Authorization", "Token cluster-test-token")
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write: %v %v", resp, err)
	}
	resp.Body.Close()
	for _, d := range dns {
		if out, code := cli(t, "admin", "flush", "--server", d.grpc); code != 0 {
			t.Fatalf("flush: %s", out)
		}
	}
	out := run("cluster", "regions", "--table", "cpu", "-o", "csv")
	if strings.Count(out, "\n1/") != 4 || strings.Contains(out, "did not report") {
		t.Fatalf("regions:\n%s", out)
	}
	out = run("cluster", "status")
	if !strings.Contains(out, "dn1") || !strings.Contains(out, "dn2") || strings.Contains(out, "NOT LIVE") {
		t.Fatalf("status:\n%s", out)
	}
	// Every process's build is shown, and the mix is called out.
	dev := version.Get().Version
	if !strings.Contains(out, meta.grpc+"  leader  "+dev) || !regexp.MustCompile(`dn1 .* `+dev+` `).MatchString(out) ||
		!regexp.MustCompile(`dn2 .* `+oldVersion+` `).MatchString(out) || !strings.Contains(out, "mixed versions: 2 different builds") {
		t.Fatalf("status does not show every process's version:\n%s", out)
	}
	for _, c := range []struct {
		path, want string
	}{
		{"/health", `"version":"` + oldVersion + `"`},
		{"/metrics", `strata_build_info{goversion="` + runtime.Version() + `",revision="`},
		{"/metrics", `",version="` + oldVersion + `"} 1`},
	} {
		req, _ := http.NewRequest("GET", "http://"+dns[1].http+c.path, nil)
		req.Header.Set("Authorization", "Token cluster-test-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), c.want) {
			t.Fatalf("%s of the older datanode does not hold %s:\n%.2000s", c.path, c.want, body)
		}
	}
	if out, code := cli(t, "version"); code != 0 || !strings.HasPrefix(out, "strata "+dev+" (revision ") {
		t.Fatalf("strata version: %d %q", code, out)
	}
	// Move 1/0 to whichever datanode does not own it.
	st, _ := authed(t, meta.grpc).ClusterStatus(context.Background(), &pb.ClusterStatusRequest{})
	to := "dn1"
	for _, r := range st.Regions {
		if r.Region == "1/0" && r.Owner == "dn1" {
			to = "dn2"
		}
	}
	if out := run("cluster", "move", "1/0", to); !strings.Contains(out, "assigned to "+to) {
		t.Fatalf("move: %s", out)
	}
	if _, code := cli(t, append([]string{"cluster", "move", "1/0", "nobody"}, m...)...); code != 2 {
		t.Fatalf("move to a datanode that is not live: exit %d", code)
	}
	out, code := cli(t, "query", "cpu", "-o", "csv", "--server", dns[1].grpc)
	if code != 0 || strings.Count(out, "\n") != 401 {
		t.Fatalf("query after the move: exit %d, %d lines\n%s", code, strings.Count(out, "\n"), out)
	}
	run("cluster", "compact", "cpu", "--all")
	run("cluster", "cancel-compaction", "cpu")
	if out := run("cluster", "gc", "run", "--table", "cpu", "--dry-run"); !strings.Contains(out, "dry run") || strings.Count(out, "\n1/") != 4 {
		t.Fatalf("gc dry run:\n%s", out)
	}
	if out := run("cluster", "gc", "run", "--full", "--min-age", "0"); strings.Contains(out, "orphan ") {
		t.Fatalf("full gc found orphans:\n%s", out)
	}
	if out := run("cluster", "gc", "options", "--fast-interval", "1s", "--concurrency", "2"); !strings.Contains(out, "1s") {
		t.Fatalf("gc options: %s", out)
	}
	if _, code := cli(t, append([]string{"cluster", "gc", "options", "--concurrency", "0"}, m...)...); code != 2 {
		t.Fatalf("invalid gc options: exit %d", code)
	}
	for end := time.Now().Add(20 * time.Second); ; {
		out := run("cluster", "gc", "status", "-o", "csv")
		if strings.Count(out, ",ok,") == 4 {
			if strings.Count(out, ",default,") != 4 { // cpu's regions, the default tenant's
				t.Fatalf("gc status: the regions' tenant:\n%s", out)
			}
			break
		}
		if time.Now().After(end) {
			t.Fatalf("scheduled GC did not run on every region:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond) // another process's schedule
	}
	if out := run("cluster", "describe-table", "cpu"); !strings.Contains(out, "4 regions") || strings.Count(out, "\n1/") != 4 {
		t.Fatalf("describe-table:\n%s", out)
	}
	// Drop: every owner closes its regions, then the objects go.
	if out := run("cluster", "drop-table", "cpu"); !strings.Contains(out, "dropped table cpu") {
		t.Fatalf("drop-table: %s", out)
	}
	var left []string
	// What cannot be read (the table's directory gone) is nothing left.
	_ = filepath.WalkDir(filepath.Join(storeDir, "1"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 0 {
		t.Fatalf("objects left after the drop: %v", left)
	}
	if _, code := cli(t, append([]string{"cluster", "describe-table", "cpu"}, m...)...); code != 3 {
		t.Fatalf("describe a dropped table: exit %d", code)
	}
	if out := run("cluster", "status"); strings.Contains(out, "\n1/") {
		t.Fatalf("assignments left after the drop:\n%s", out)
	}
	// The name is free again, with a new id.
	if out := run("cluster", "create-table", "cpu", "--regions", "1"); !strings.Contains(out, "id 2") {
		t.Fatalf("re-create: %s", out)
	}
}

// externalEtcd starts Debian's etcd-server binary (the test command
// installs it where it can), or returns "" if there is none.
func externalEtcd(t *testing.T) string { return externalEtcdTLS(t, nil) }

// externalEtcdTLS is externalEtcd serving its clients over mutual TLS with
// certs' node certificate, when certs is set.
func externalEtcdTLS(t *testing.T, certs *tlsutil.Files) string {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("STRATA_REQUIRE_ETCD") != "" {
			t.Fatalf("etcd required (STRATA_REQUIRE_ETCD is set): %v", err)
		}
		return ""
	}
	client, peer := freePort(t), freePort(t)
	logs := &logBuf{}
	scheme, hc := "http", http.DefaultClient
	args := []string{"--name", "e2e", "--data-dir", t.TempDir()}
	if certs != nil {
		scheme = "https"
		args = append(args, "--cert-file", certs.Node, "--key-file", certs.NodeKey, "--trusted-ca-file", certs.CA, "--client-cert-auth")
		tc, err := (tlsutil.Config{CAFile: certs.CA, CertFile: certs.Client, KeyFile: certs.ClientKey}).ClientTLS()
		if err != nil {
			t.Fatal(err)
		}
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}
	cmd := exec.Command(bin, append(args,
		"--listen-client-urls", scheme+"://"+client, "--advertise-client-urls", scheme+"://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "e2e=http://"+peer)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- logs of etcd ---\n%s", logs.String())
		}
		_ = cmd.Process.Kill()
		<-exited
	})
	for end := time.Now().Add(30 * time.Second); ; {
		resp, err := hc.Get(scheme + "://" + client + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return scheme + "://" + client
			}
		}
		select {
		case <-exited:
			t.Fatalf("etcd exited:\n%s", logs.String())
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("etcd not healthy after 30 s:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond) // polling another process
	}
}

// TestStormOverMinIO: a metasrv on an external etcd (Debian's etcd-server
// when installed) and three datanodes over MinIO. Writers on every
// datanode; compactions of every file and cancellations at random delays
// through metasrv; MinIO killed and restarted twice, once mid-ingest and
// once mid-GC. Writes fail while MinIO is down and resume after; then fast
// and full GC, and fsck of the bucket finds nothing missing and nothing
// unowned, and every acknowledged row is readable.
func TestStormOverMinIO(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 11))
	minio := objstoretest.MinIO(t)
	store := minio.NewBucket(t)
	ep := externalEtcd(t)
	var meta *proc
	if ep == "" {
		t.Log("no etcd binary: metasrv embeds etcd (install etcd-server to run against an external one)")
		etcd := freePort(t)
		meta = start(t, "metasrv", "metasrv", "--data-dir", t.TempDir(), "--etcd-client-addr", etcd, "--grpc-addr", "127.0.0.1:0", "--store", store)
		ep = "http://" + etcd
	} else {
		t.Logf("external etcd at %s", ep)
		meta = start(t, "metasrv", "metasrv", "--etcd-endpoints", ep, "--grpc-addr", "127.0.0.1:0", "--store", store)
	}
	var dns []*proc
	for i := range 3 {
		dns = append(dns, start(t, fmt.Sprintf("dn%d", i+1), "datanode", "--id", fmt.Sprintf("dn%d", i+1), "--etcd-endpoints", ep,
			"--store", store, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--flush-bytes", "65536"))
	}
	c := admin(t, meta.grpc)
	const regions = 6
	if _, err := c.CreateTable(context.Background(), &pb.CreateTableRequest{Name: "cpu", Regions: regions}); err != nil {
		t.Fatal(err)
	}
	placed(t, c, regions, 30*time.Second, "")

	g := clustertest.StartIngest(clustertest.IngestOptions{Writers: 3, Batch: 40, Hosts: 53, Target: func(w, _ int) string { return dns[w].http }})
	var mu sync.Mutex // guards the storm's counters
	done := make(chan struct{})
	var wg sync.WaitGroup
	// The storm: compactions and cancellations at random delays.
	var stormRng sync.Mutex
	delay := func(max int) time.Duration {
		stormRng.Lock()
		defer stormRng.Unlock()
		return time.Duration(rng.IntN(max)) * time.Millisecond
	}
	var compacted, cancelled, tooLate int64
	for i, f := range []func(){
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if resp, err := c.Compact(ctx, &pb.CompactRequest{Table: "cpu", All: true}); err == nil {
				mu.Lock()
				compacted += int64(len(resp.Jobs))
				mu.Unlock()
			}
		},
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if resp, err := c.CancelCompaction(ctx, &pb.CancelCompactionRequest{Table: "cpu"}); err == nil {
				mu.Lock()
				cancelled += resp.Cancelled
				tooLate += resp.TooLate
				mu.Unlock()
			}
		},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case <-time.After(delay(100 - 70*i)): // cancels come more often
				}
				f()
			}
		}()
	}
	g.WaitMore(t, 2000, 90*time.Second)
	// MinIO down mid-ingest for a second; then ingest resumes.
	minio.Restart(t, func() { time.Sleep(time.Second) })
	g.WaitMore(t, 2000, 90*time.Second)
	// MinIO down mid-GC.
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = c.GcRun(ctx, &pb.GcRegionRequest{Table: "cpu", LingeringSeconds: -1})
	}()
	minio.Restart(t, func() { time.Sleep(500 * time.Millisecond) })
	<-gcDone
	g.WaitMore(t, 2000, 90*time.Second)
	close(done)
	wg.Wait()
	acked, failed := g.Stop()

	// Reclaim everything, then check.
	ctx := context.Background()
	for _, full := range []bool{false, true} {
		resp, err := c.GcRun(ctx, &pb.GcRegionRequest{Table: "cpu", Full: full, LingeringSeconds: -1, MinAgeSeconds: -1})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.Regions {
			if r.Error != "" {
				t.Fatalf("gc of %s (full=%v): %s", r.Region, full, r.Error)
			}
			if full && len(r.Orphans) > 0 {
				t.Fatalf("full-listing GC found orphans in %s: %v", r.Region, r.Orphans)
			}
		}
	}
	out, err := exec.Command(filepath.Join(bins, "strata"), "fsck", "--store", store).CombinedOutput()
	if err != nil {
		t.Fatalf("fsck of the bucket: %v\n%s", err, out)
	}
	have, missing := readBack(t, dns[0].grpc, acked)
	t.Logf("storm: acked=%d failed-requests=%d rows=%d missing=%d compactions=%d cancelled=%d too-late=%d", len(acked), failed, len(have), missing, compacted, cancelled, tooLate)
	if missing > 0 {
		t.Fatalf("%d acknowledged rows are missing", missing)
	}
	if failed == 0 {
		t.Fatal("no write failed while MinIO was down: the restart did not take effect")
	}
}

// Bad input through every interface of a running cluster gets a clear
// error, and nothing already written is lost.
func TestBadInputEverywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	etcd := freePort(t)
	meta := start(t, "metasrv", "metasrv", "--data-dir", t.TempDir(), "--etcd-client-addr", etcd, "--grpc-addr", "127.0.0.1:0")
	dn := start(t, "dn1", "datanode", "--id", "dn1", "--etcd-endpoints", "http://"+etcd, "--store", "file://"+t.TempDir(),
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	post := func(path, body string) (int, string) {
		resp, err := http.Post("http://"+dn.http+path, "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("/write?db=x", "cpu,host=a v=1 1\ncpu,host=b v=2 2\n"); code != 204 {
		t.Fatalf("good write: %d %s", code, body)
	}
	// Line protocol: the bad line is named; nothing of the request lands.
	for _, c := range []struct{ path, body, want string }{
		{"/write?db=x", "cpu,host=a v=1 3\ncpu,host=a v= 4\n", "line 2"},
		{"/write?db=x&precision=fortnight", "cpu v=1 1\n", "precision"},
		{"/write?db=x", "cpu,host=a v=\"text\" 5\n", "v"},
		{"/api/v2/write", "cpu v=1 1\n", "bucket"},
	} {
		code, body := post(c.path, c.body)
		if code != 400 || !strings.Contains(body, c.want) {
			t.Errorf("POST %s %q: %d %s (want 400 naming %q)", c.path, c.body, code, body, c.want)
		}
	}
	// gRPC (through the CLI, which prints the server's message).
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"query", "nope", "--server", dn.grpc}, 3, "not found"},
		{[]string{"query", "cpu", "--fields", "nope", "--server", dn.grpc}, 2, "nope"},
		{[]string{"table", "create", "__reserved", "--server", dn.grpc}, 2, "reserved"},
		{[]string{"cluster", "move", "not-a-region", "dn1", "--metasrv", meta.grpc}, 2, "table_id/region"},
		{[]string{"cluster", "move", "1/0", "nobody", "--metasrv", meta.grpc}, 2, "not live"},
		{[]string{"cluster", "move", "9/0", "dn1", "--metasrv", meta.grpc}, 3, "not placed"},
		{[]string{"cluster", "create-table", "__reserved", "--metasrv", meta.grpc}, 2, "reserved"},
		{[]string{"cluster", "create-table", "cpu", "--metasrv", meta.grpc}, 3, "exists"},
		{[]string{"cluster", "gc", "options", "--concurrency", "0", "--metasrv", meta.grpc}, 2, "positive"},
		{[]string{"cluster", "gc", "run", "--table", "cpu", "--region", "1/0", "--metasrv", meta.grpc}, 2, "not both"},
		{[]string{"cluster", "status", "--no-such-flag", "--metasrv", meta.grpc}, 2, "unknown flag"},
	} {
		out, code := cli(t, c.args...)
		if code != c.code || !strings.Contains(strings.ToLower(out), strings.ToLower(c.want)) {
			t.Errorf("strata %v: exit %d (want %d)\n%s(want it to mention %q)", c.args, code, c.code, out, c.want)
		}
	}
	// The binaries refuse bad flags and missing settings with exit 2.
	for _, c := range [][]string{{"datanode", "--store", "file:///tmp/x"}, {"metasrv", "--no-such-flag"}, {"datanode", "--lease", "soon"}} {
		cmd := exec.Command(filepath.Join(bins, c[0]), c[1:]...)
		out, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != 2 {
			t.Errorf("%v: exit %d (want 2)\n%s", c, cmd.ProcessState.ExitCode(), out)
		}
	}
	// Nothing was lost.
	out, code := cli(t, "query", "cpu", "-o", "csv", "--server", dn.grpc)
	if code != 0 || strings.Count(out, "\n") != 3 {
		t.Fatalf("after the bad input: exit %d\n%s", code, out)
	}
}
