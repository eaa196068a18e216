package peerwire_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stratadb/strata/internal/peerwire"
)

// A call to a peerwire server in another process (this test binary run
// again): what a datanode's remote scan pays for the hop itself, to the
// machine's scheduler and, on a virtual machine, to its hypervisor. Back
// to back, both processes stay on their CPUs. After an idle gap (a point
// query's remote scan goes to a peer that had nothing to do, after the
// querying node's own parsing and planning) the peer is woken from idle to
// read the call and the caller to read the answer; on a KVM guest each
// wake of an idle virtual CPU is an interrupt through the hypervisor.
//
//	go test ./internal/peerwire -run XXX -bench CrossProcess
//
// reports each gap's round trips, p50 and p90 in µs (ns/op counts the gap
// too), and per call each process's CPU time and the times one of its
// threads was put on a CPU (the caller's include the benchmark's loop and
// its sleeps). docs/performance.md has this machine's figures.

// serveEnv makes the test binary a server for BenchmarkCrossProcess.
const serveEnv = "STRATA_PEERWIRE_BENCH_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) != "" {
		os.Exit(serveForBench())
	}
	os.Exit(m.Run())
}

// serveForBench serves echo (one answer a call) on a loopback port it
// prints, until its stdin closes.
func serveForBench() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := peerwire.NewServer(peerwire.ServerOptions{Handlers: map[byte]peerwire.Handler{
		echo: func(_ context.Context, req []byte, send func(proto.Message) error) error {
			var m wrapperspb.StringValue
			if err := proto.Unmarshal(req, &m); err != nil {
				return err
			}
			return send(&m)
		},
	}})
	other := srv.Listener(ln)
	go func() { // nothing but peerwire is expected: any other connection is closed
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	fmt.Println(ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	srv.Close()
	return 0
}

func BenchmarkCrossProcess(b *testing.B) {
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), serveEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.WaitDelay = 10 * time.Second // a server that does not stop is killed
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := stdin.Close(); err != nil { // the server's signal to stop
			b.Errorf("server's stdin: %v", err)
		}
		if err := cmd.Wait(); err != nil {
			b.Errorf("server: %v", err)
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("server's address: %v", err)
	}
	addr := strings.TrimSpace(line)
	c := peerwire.NewClient(peerwire.ClientOptions{})
	defer c.Close()
	req := wrapperspb.String("x")
	call := func(b *testing.B) {
		// A query's calls carry its deadline, as a datanode's do.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := c.Call(ctx, addr, echo, req)
		if err != nil {
			b.Fatal(err)
		}
		var m wrapperspb.StringValue
		if err := st.Recv(&m); err != nil || m.Value != "x" {
			b.Fatalf("answer %q, %v", m.Value, err)
		}
		if err := st.Recv(&m); err != io.EOF {
			b.Fatalf("end: %v", err)
		}
	}
	call(b) // the connection, dialled once
	for _, gap := range []time.Duration{0, 100 * time.Microsecond, time.Millisecond} {
		b.Run("gap="+gap.String(), func(b *testing.B) {
			rtt := make([]time.Duration, 0, b.N)
			c0, s0 := schedOf(os.Getpid()), schedOf(cmd.Process.Pid)
			for range b.N {
				if gap > 0 {
					time.Sleep(gap)
				}
				t0 := time.Now()
				call(b)
				rtt = append(rtt, time.Since(t0))
			}
			c1, s1 := schedOf(os.Getpid()), schedOf(cmd.Process.Pid)
			slices.Sort(rtt)
			b.ReportMetric(float64(rtt[len(rtt)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(rtt[len(rtt)*9/10].Nanoseconds())/1e3, "p90-µs")
			if c0.ok && s0.ok && c1.ok && s1.ok {
				n := float64(b.N)
				b.ReportMetric(float64(c1.ns-c0.ns)/1e3/n, "caller-cpu-µs")
				b.ReportMetric(float64(s1.ns-s0.ns)/1e3/n, "server-cpu-µs")
				b.ReportMetric(float64(c1.runs-c0.runs)/n, "caller-runs")
				b.ReportMetric(float64(s1.runs-s0.runs)/n, "server-runs")
			}
		})
	}
}

// sched is what Linux's scheduler counted of a process's threads
// (/proc/PID/task/*/schedstat): the CPU time they ran, in ns (where
// /proc/PID/stat counts 10-ms ticks), and how many times one was put on a
// CPU, a wake-up or a preemption's return each. The caller's count includes
// the benchmark's own loop and its sleeps.
type sched struct {
	ns, runs int64
	ok       bool
}

// schedOf reads process pid's sched; ok is false where it cannot be read.
func schedOf(pid int) sched {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return sched{}
	}
	var sum sched
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // a thread that ended meanwhile
		}
		var ns, wait, runs int64
		if _, err := fmt.Sscan(string(b), &ns, &wait, &runs); err != nil {
			return sched{}
		}
		sum.ns += ns
		sum.runs += runs
	}
	sum.ok = true
	return sum
}
