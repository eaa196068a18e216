package clustertest

import (
	"bytes"
	"net"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// FreeAddr returns a loopback address with a port free a moment ago, for a
// process that cannot be told to pick its own.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// LogBuf collects a process's output for the test to print if it fails;
// safe for the writers of several pipes at once.
type LogBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *LogBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// Run starts the program at path, stopped (SIGTERM, then SIGKILL after
// 30 s) at the test's end; its output (the last 8,000 bytes) is printed if
// the test failed. name says which process in the messages.
func Run(t testing.TB, name, path string, args ...string) {
	t.Helper()
	cmd := exec.Command(path, args...)
	logs := &LogBuf{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			out := logs.String()
			if len(out) > 8000 {
				out = "…" + out[len(out)-8000:]
			}
			t.Logf("%s output:\n%s", name, out)
		}
	})
}
