package clustertest

import (
	"bytes"
	"net"
	"sync"
	"testing"
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
