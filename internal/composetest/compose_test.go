package composetest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stratadb/strata/internal/auth"
	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/fsck"
	"github.com/stratadb/strata/internal/layout"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// lease is the datanodes' lease in docker-compose.yml (the default).
const lease = 10 * time.Second

var datanodes = []string{"datanode1", "datanode2", "datanode3"}

// stack is the compose project the README's quickstart started.
type stack struct {
	t       *testing.T
	dir     string   // the copy of the checkout it runs in
	env     []string // COMPOSE_PROJECT_NAME and the dependency images
	compose []string // "docker compose" or "docker-compose"
	token   auth.Token
	secret  string
	cli     string // strata, built for the host
	dotenv  map[string]string

	mu  sync.Mutex
	ips map[string]string // service -> container IP
}

func requireDocker(t *testing.T) {
	if err := exec.Command("docker", "info").Run(); err != nil {
		if os.Getenv("STRATA_REQUIRE_DOCKER") == "1" {
			t.Fatalf("STRATA_REQUIRE_DOCKER=1 but no Docker daemon answers: %v", err)
		}
		t.Skipf("no Docker daemon: %v", err)
	}
}

// TestCompose brings the compose cluster up with the README's quickstart,
// then, with writes flowing through every datanode, partitions one, pauses
// one with writes queued at its port, kills the metasrv leader and a
// datanode mid-compaction, restarts MinIO, and restarts every datanode in
// turn. At the end every acknowledged row reads back, full GC runs with no
// minimum age, and fsck (from outside the containers) finds nothing
// missing and nothing unowned.
func TestCompose(t *testing.T) {
	requireDocker(t)
	if testing.Short() {
		t.Skip("builds images and runs a cluster in containers")
	}
	s := newStack(t)
	began := time.Now()
	out := s.quickstart()
	if !strings.Contains(out, "12.5") || !strings.Contains(out, "leader metasrv") {
		t.Fatalf("the quickstart's status and query did not show the cluster and the row:\n%s", out)
	}
	upAt := s.upStamp()
	s.run(s.dir, append(s.compose, "config", "-q")...)
	healthy := s.waitHealthy(append([]string{"metasrv1", "metasrv2"}, datanodes...)...)
	t.Logf("healthy cluster %.1fs after `up` (quickstart with image builds: %.0fs)", healthy.Sub(upAt).Seconds(), time.Since(began).Seconds())

	g := clustertest.StartIngest(clustertest.IngestOptions{Writers: 3, Batch: 50, Hosts: 97, Token: s.secret,
		Target: func(w, failures int) string { return s.ip(datanodes[(w+failures)%len(datanodes)]) + ":8086" }})
	var queued sync.Map // rows the paused datanode acknowledged
	g.WaitMore(t, 1000, 2*time.Minute)
	counts := map[string]int{}

	// Partition: a datanode cut off from etcd and MinIO past its lease.
	victim := s.ownerOfARegion()
	ctr, network := s.container(victim), s.network(victim)
	s.docker("network", "disconnect", network, ctr)
	cut := time.Now()
	s.placed("dn" + victim[len("datanode"):])
	t.Logf("partition: %s's regions moved in %.1fs", victim, time.Since(cut).Seconds())
	for time.Since(cut) < lease+5*time.Second {
		g.WaitMore(t, 200, 2*time.Minute)
	}
	s.docker("network", "connect", "--alias", victim, network, ctr)
	s.rejoined(victim)
	counts["partitions"]++
	g.WaitMore(t, 500, 2*time.Minute)

	// Pause: writes queued at a frozen datanode's port while its regions
	// move and the new owners write, flush and collect garbage.
	victim = s.ownerOfARegion()
	s.docker("pause", s.container(victim))
	paused := time.Now()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("q%d/%d", i, int64(i+1)*1e9)
			if s.write(s.ip(victim), fmt.Sprintf("cpu,host=q%d v=%d %d", i, i, int64(i+1)*1e9)) {
				queued.Store(key, true)
			}
		}()
	}
	s.placed("dn" + victim[len("datanode"):])
	t.Logf("pause: %s's regions moved in %.1fs", victim, time.Since(paused).Seconds())
	g.WaitMore(t, 500, 2*time.Minute)
	s.flush(victim)
	s.gc(false)
	s.gc(true)
	s.docker("unpause", s.container(victim))
	wg.Wait()
	n := 0
	queued.Range(func(_, _ any) bool { n++; return true })
	t.Logf("pause: %d of 20 writes queued at the paused datanode acknowledged after it woke", n)
	s.rejoined(victim)
	counts["pauses"]++
	g.WaitMore(t, 500, 2*time.Minute)

	// Kill the metasrv leader; the other replica takes over.
	leader := s.leader("")
	s.docker("kill", s.container(leader))
	killed := time.Now()
	next := s.leader(leader)
	t.Logf("kill: metasrv leader %s -> %s in %.1fs", leader, next, time.Since(killed).Seconds())
	s.docker("start", s.container(leader))
	s.waitHealthy(leader)
	counts["kills"]++
	g.WaitMore(t, 500, 2*time.Minute)

	// Kill a datanode mid-compaction.
	if s.killMidCompaction(g) {
		counts["kills"]++
	}

	// Restart MinIO mid-ingest.
	s.docker("restart", s.container("minio"))
	s.refreshIPs()
	counts["minio_restarts"]++
	g.WaitMore(t, 1000, 3*time.Minute)

	// Rolling restart of every datanode, one at a time.
	total0, failed0 := g.Requests()
	rollStart := time.Now()
	for _, dn := range datanodes {
		s.docker("restart", "-t", "60", s.container(dn))
		s.refreshIPs()
		s.rejoined(dn)
		s.placed("")
		counts["rolling"]++
	}
	rollEnd := time.Now()
	total1, failed1 := g.Requests()
	g.WaitMore(t, 500, 2*time.Minute)
	share := float64(failed1-failed0) / float64(max(1, total1-total0))
	t.Logf("rolling restart: %.1fs, %d of %d write requests failed (%.1f%%), longest gap with no acknowledged write %.1fs",
		rollEnd.Sub(rollStart).Seconds(), failed1-failed0, total1-total0, 100*share, g.LongestGap(rollStart, rollEnd).Seconds())

	acked, _ := g.Stop()
	queued.Range(func(k, _ any) bool { acked[k.(string)] = true; return true })
	for _, dn := range datanodes {
		s.flush(dn)
	}
	s.gc(true)
	rep := s.fsck()
	lost := s.readBack(acked)
	line := fmt.Sprintf("compose chaos: partitions=%d pauses=%d kills=%d minio_restarts=%d rolling=%d acked=%d lost=%d missing=%d unowned=%d",
		counts["partitions"], counts["pauses"], counts["kills"], counts["minio_restarts"], counts["rolling"], len(acked), lost, rep.Missing(), rep.OrphanCount())
	fmt.Println(line)
	if lost != 0 || rep.Missing() != 0 || rep.OrphanCount() != 0 || counts["kills"] < 2 {
		t.Fatal(line)
	}
}

func newStack(t *testing.T) *stack {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "strata")
	copyCheckout(t, root, dir)
	s := &stack{t: t, dir: dir, ips: map[string]string{}, cli: filepath.Join(t.TempDir(), "strata")}
	s.env = append(os.Environ(), "COMPOSE_PROJECT_NAME=stratacompose"+strconv.Itoa(os.Getpid()),
		"STRATA_MINIO_IMAGE=strata-deps/minio:local", "STRATA_ETCD_IMAGE=strata-deps/etcd:local")
	if exec.Command("docker", "compose", "version").Run() == nil {
		s.compose = []string{"docker", "compose"}
	} else {
		s.compose = []string{"docker-compose"}
	}
	s.run(dir, "scripts/images.sh", "--deps")
	s.run(root, "go", "build", "-o", s.cli, "./cmd/strata")
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := s.exec(dir, append(s.compose, "logs", "--no-color", "--tail", "80")...)
			t.Logf("compose logs:\n%s", out)
		}
		_, _ = s.exec(dir, append(s.compose, "down", "-v", "-t", "5")...)
	})
	return s
}

// copyCheckout copies the files git knows (tracked and untracked, not
// ignored) of root to dir: the quickstart's cp writes .env into it.
func copyCheckout(t *testing.T, root, dir string) {
	out, err := exec.Command("git", "-C", root, "ls-files", "-co", "--exclude-standard", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src, dst := filepath.Join(root, f), filepath.Join(dir, f)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or not a file
		}
		data, err := os.ReadFile(src)
		if err == nil {
			err = os.MkdirAll(filepath.Dir(dst), 0o755)
		}
		if err == nil {
			err = os.WriteFile(dst, data, fi.Mode().Perm())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// quickstart runs the README's compose quickstart as written, with bash,
// in the copy; `docker compose` becomes docker-compose where the plugin is
// missing. It returns the output.
func (s *stack) quickstart() string {
	readme, err := os.ReadFile(filepath.Join(s.dir, "README.md"))
	if err != nil {
		s.t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "<!-- compose-quickstart -->\n")
	block, _, ok2 := strings.Cut(block, "<!-- /compose-quickstart -->")
	if !ok || !ok2 {
		s.t.Fatal("README.md has no compose-quickstart block")
	}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "    "))
	}
	script := `set -euo pipefail
# Record when "compose up" runs; use docker-compose where "docker compose" is missing.
docker() {
  if [ "$1" = compose ]; then
    shift
    [ "${1:-}" = up ] && date +%s.%N > .up-stamp
    ` + strings.Join(s.compose, " ") + ` "$@"
  else
    command docker "$@"
  fi
}
` + strings.Join(lines, "\n")
	return s.run(s.dir, "bash", "-c", script)
}

func (s *stack) upStamp() time.Time {
	data, err := os.ReadFile(filepath.Join(s.dir, ".up-stamp"))
	if err != nil {
		s.t.Fatal(err)
	}
	sec, err := strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
	if err != nil {
		s.t.Fatal(err)
	}
	s.dotenv = map[string]string{}
	env, _ := os.ReadFile(filepath.Join(s.dir, ".env"))
	for _, l := range strings.Split(string(env), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(k, "#") {
			s.dotenv[k] = v
		}
	}
	s.secret = s.dotenv["STRATA_AUTH_TOKEN"]
	s.token = auth.New(s.secret)
	return time.Unix(0, int64(sec*1e9))
}

func (s *stack) exec(dir string, argv ...string) (string, error) {
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir, c.Env = dir, s.env
	out, err := c.CombinedOutput()
	return string(out), err
}

func (s *stack) run(dir string, argv ...string) string {
	s.t.Helper()
	out, err := s.exec(dir, argv...)
	if err != nil {
		s.t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return out
}

func (s *stack) docker(args ...string) string {
	s.t.Helper()
	return s.run(s.dir, append([]string{"docker"}, args...)...)
}

// container is a service's container id.
func (s *stack) container(service string) string {
	s.t.Helper()
	id := strings.TrimSpace(s.run(s.dir, append(s.compose, "ps", "-q", service)...))
	if id == "" {
		s.t.Fatalf("service %s has no container", service)
	}
	return id
}

func (s *stack) network(service string) string {
	return strings.TrimSpace(s.docker("inspect", "-f", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}", s.container(service)))
}

// ip is a service's container address (cached; refreshIPs rereads).
func (s *stack) ip(service string) string {
	s.mu.Lock()
	ip := s.ips[service]
	s.mu.Unlock()
	if ip != "" {
		return ip
	}
	out, err := exec.Command("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", s.container(service)).Output()
	if ip = strings.TrimSpace(string(out)); err != nil || ip == "" {
		return "127.0.0.1:1" // not on the network now: requests fail
	}
	s.mu.Lock()
	s.ips[service] = ip
	s.mu.Unlock()
	return ip
}

func (s *stack) refreshIPs() {
	s.mu.Lock()
	s.ips = map[string]string{}
	s.mu.Unlock()
}

// waitHealthy waits until every service's container is healthy and
// returns when it saw them so.
func (s *stack) waitHealthy(services ...string) time.Time {
	s.t.Helper()
	end := time.Now().Add(3 * time.Minute)
	for _, svc := range services {
		for {
			st, _ := exec.Command("docker", "inspect", "-f", "{{.State.Health.Status}}", s.container(svc)).Output()
			if strings.TrimSpace(string(st)) == "healthy" {
				break
			}
			if time.Now().After(end) {
				s.t.Fatalf("%s not healthy after 3 minutes: %s", svc, st)
			}
			time.Sleep(200 * time.Millisecond) // Docker's health state; no event to wait on here
		}
	}
	s.refreshIPs()
	return time.Now()
}

// admin calls f on a live metasrv replica (followers forward to the
// leader), trying each until one answers or the deadline passes.
func (s *stack) admin(deadline time.Duration, f func(context.Context, pb.MetaAdminClient) error) {
	s.t.Helper()
	end := time.Now().Add(deadline)
	var err error
	for time.Now().Before(end) {
		for _, m := range []string{"metasrv1", "metasrv2"} {
			if err = s.call(s.ip(m)+":8088", func(ctx context.Context, c *grpc.ClientConn) error { return f(ctx, pb.NewMetaAdminClient(c)) }); err == nil {
				return
			}
		}
		s.refreshIPs()
		time.Sleep(500 * time.Millisecond) // a replica restarting or an election
	}
	s.t.Fatalf("metasrv: %v", err)
}

func (s *stack) call(addr string, f func(context.Context, *grpc.ClientConn) error) error {
	conn, err := grpc.NewClient(addr, append(s.token.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return f(ctx, conn)
}

func (s *stack) status() *pb.ClusterStatusResponse {
	var st *pb.ClusterStatusResponse
	s.admin(time.Minute, func(ctx context.Context, c pb.MetaAdminClient) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		st, err = c.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		return err
	})
	return st
}

// ownerOfARegion is the service of the datanode owning the most regions.
func (s *stack) ownerOfARegion() string {
	n := map[string]int{}
	best := ""
	for _, r := range s.status().Regions {
		if n[r.Owner]++; r.OwnerLive && (best == "" || n[r.Owner] > n[best]) {
			best = r.Owner
		}
	}
	if best == "" {
		s.t.Fatal("no region has a live owner")
	}
	return "datanode" + strings.TrimPrefix(best, "dn")
}

// placed waits until every region has a live owner other than notOn.
func (s *stack) placed(notOn string) {
	s.t.Helper()
	end := time.Now().Add(2 * time.Minute)
	for {
		st := s.status()
		ok := len(st.Regions) > 0
		for _, r := range st.Regions {
			ok = ok && r.OwnerLive && r.Owner != notOn
		}
		if ok {
			return
		}
		if time.Now().After(end) {
			s.t.Fatalf("regions not placed off %q within 2 minutes: %v", notOn, st.Regions)
		}
		time.Sleep(200 * time.Millisecond) // metasrv's view; polled
	}
}

// rejoined waits until a datanode is healthy and registered again.
func (s *stack) rejoined(service string) {
	s.t.Helper()
	s.waitHealthy(service)
	id := "dn" + strings.TrimPrefix(service, "datanode")
	end := time.Now().Add(2 * time.Minute)
	for {
		for _, d := range s.status().Datanodes {
			if d.Id == id {
				return
			}
		}
		if time.Now().After(end) {
			s.t.Fatalf("%s did not register again within 2 minutes", id)
		}
		time.Sleep(200 * time.Millisecond) // metasrv's view; polled
	}
}

// leader waits for a metasrv leader other than not and returns its service.
func (s *stack) leader(not string) string {
	s.t.Helper()
	end := time.Now().Add(2 * time.Minute)
	for {
		if l := strings.TrimSuffix(s.status().Leader, ":8088"); l != "" && l != not {
			return l
		}
		if time.Now().After(end) {
			s.t.Fatalf("no metasrv leader but %q within 2 minutes", not)
		}
		time.Sleep(200 * time.Millisecond) // the election; polled
	}
}

// write sends one line-protocol request to a datanode and says whether it
// was acknowledged.
func (s *stack) write(ip, body string) bool {
	req, _ := http.NewRequest("POST", "http://"+ip+":8086/write?db=x", strings.NewReader(body))
	req.Header.Set("Authorization", "Token "+s.secret)
	resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusNoContent
}

// flush flushes every datanode but skip.
func (s *stack) flush(skip string) {
	for _, dn := range datanodes {
		if dn == skip && skip != "" {
			continue
		}
		err := s.call(s.ip(dn)+":8087", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := pb.NewDatanodeClient(c).Flush(ctx, &pb.FlushRequest{})
			return err
		})
		if err != nil && dn != skip {
			s.t.Fatalf("flush %s: %v", dn, err)
		}
	}
}

// gc runs fast GC with no lingering, or full GC with no minimum age, on
// every region through metasrv.
func (s *stack) gc(full bool) {
	s.admin(2*time.Minute, func(ctx context.Context, c pb.MetaAdminClient) error {
		_, err := c.GcRun(ctx, &pb.GcRegionRequest{Table: "cpu", Full: full, LingeringSeconds: -1, MinAgeSeconds: -1})
		return err
	})
}

// running is how many compactions a datanode runs now, from its metrics.
func (s *stack) running(service string) int {
	req, _ := http.NewRequest("GET", "http://"+s.ip(service)+":8086/metrics", nil)
	req.Header.Set("Authorization", "Token "+s.secret)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	n := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "strata_compactions_total{") {
			continue
		}
		f := strings.Fields(l)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		if strings.Contains(l, `event="started"`) {
			n += int(v)
		} else {
			n -= int(v)
		}
	}
	return n
}

// killMidCompaction starts a compaction of every file of the table and
// kills a datanode while its metrics say a compaction runs there; it says
// whether it caught one in five tries.
func (s *stack) killMidCompaction(g *clustertest.Ingest) bool {
	s.t.Helper()
	for try := range 5 {
		for range 3 { // several files per region
			g.WaitMore(s.t, 300, 2*time.Minute)
			s.flush("")
		}
		victim := s.ownerOfARegion()
		done := make(chan struct{})
		go func() {
			defer close(done)
			// The victim is killed under it: it may fail.
			_ = s.call(s.ip("metasrv1")+":8088", func(ctx context.Context, c *grpc.ClientConn) error {
				_, err := pb.NewMetaAdminClient(c).Compact(ctx, &pb.CompactRequest{Table: "cpu", All: true})
				return err
			})
		}()
		caught := false
		for !caught {
			select {
			case <-done:
			default:
				caught = s.running(victim) > 0
				continue
			}
			break
		}
		if caught {
			s.docker("kill", s.container(victim))
			s.t.Logf("kill: %s mid-compaction (try %d)", victim, try+1)
			<-done
			s.docker("start", s.container(victim))
			s.refreshIPs()
			s.rejoined(victim)
			s.placed("")
			return true
		}
	}
	s.t.Log("kill mid-compaction: no compaction was caught running in 5 tries")
	return false
}

// fsck checks the compose MinIO's bucket from outside the containers.
func (s *stack) fsck() *fsck.Report {
	s.t.Helper()
	url := "s3://strata?endpoint=http://" + s.ip("minio") + ":9000&use_path_style=true&region=us-east-1"
	c := exec.Command(s.cli, "fsck", "--store", url, "-o", "json")
	c.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s.dotenv["MINIO_ROOT_USER"], "AWS_SECRET_ACCESS_KEY="+s.dotenv["MINIO_ROOT_PASSWORD"])
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.Output()
	var rep fsck.Report
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		s.t.Fatalf("fsck: %v %v\n%s%s", err, jerr, out, stderr.String())
	}
	s.t.Logf("fsck: %d regions, %d objects listed, %d missing, %d unowned (exit: %v)", len(rep.Regions), rep.Listed, rep.Missing(), rep.OrphanCount(), err)
	for _, o := range rep.Orphans {
		s.t.Logf("fsck: unowned %s %s (%d bytes, age %s) %s", o.Kind, o.Key, o.Size, o.Age, o.Note)
		if stream, _, ok := layout.ParseStreamKey(o.Key); ok {
			s.streamLogs(stream)
		}
	}
	for _, g := range rep.Regions {
		for _, o := range g.Orphans {
			s.t.Logf("fsck: region %s: unowned %s %s (%d bytes, age %s)", g.ID, o.Kind, o.Key, o.Size, o.Age)
		}
	}
	return &rep
}

// streamLogs logs what every datanode said about a WAL stream, to explain
// an unowned segment of it.
func (s *stack) streamLogs(stream string) {
	for _, dn := range datanodes {
		out, _ := exec.Command("docker", "logs", s.container(dn)).CombinedOutput()
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, stream) {
				s.t.Logf("%s: %s", dn, line)
			}
		}
	}
}

// readBack queries table cpu through datanode1 from outside and returns
// how many acknowledged rows ("host/ts") are missing.
func (s *stack) readBack(acked map[string]bool) int {
	s.t.Helper()
	c := exec.Command(s.cli, "query", "cpu", "-o", "csv", "--server", s.ip("datanode1")+":8087", "--timeout", "5m")
	c.Env = append(os.Environ(), "STRATA_AUTH_TOKEN="+s.secret)
	out, err := c.Output()
	if err != nil {
		s.t.Fatalf("query: %v\n%s", err, out)
	}
	rows := strings.Split(strings.TrimSpace(string(out)), "\n")
	header := strings.Split(rows[0], ",")
	hostCol := -1
	for i, h := range header {
		if h == "host" {
			hostCol = i
		}
	}
	if hostCol < 0 {
		s.t.Fatalf("query: no host column in %q", rows[0])
	}
	have := map[string]bool{}
	for _, l := range rows[1:] {
		f := strings.Split(l, ",")
		ts, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			s.t.Fatalf("row %q: %v", l, err)
		}
		have[fmt.Sprintf("%s/%d", f[hostCol], ts.UnixNano())] = true
	}
	lost := 0
	for k := range acked {
		if !have[k] {
			lost++
		}
	}
	s.t.Logf("read back %d rows; %d of %d acknowledged rows missing", len(have), lost, len(acked))
	return lost
}
