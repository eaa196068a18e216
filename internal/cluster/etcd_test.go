package cluster

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/tlsutil"
)

// TestEtcdPicksPortsAgainWhenTaken: a port StartEtcd picked that another
// process took before etcd bound it is picked again, and etcd starts; a
// client address it was given that is taken fails the start at once,
// naming it.
func TestEtcdPicksPortsAgainWhenTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	real, calls := freeAddr, 0
	t.Cleanup(func() { freeAddr = real })
	freeAddr = func() (string, error) {
		calls++
		if calls <= 2 { // the first attempt's client and peer ports
			return taken.Addr().String(), nil
		}
		return real()
	}
	e, err := StartEtcd(t.TempDir(), "", tlsutil.Config{}, quiet)
	if err != nil {
		t.Fatalf("a taken port picked was not picked again: %v", err)
	}
	e.Close()
	if calls < 4 {
		t.Fatalf("ports picked %d times, want a second attempt", calls)
	}

	freeAddr = real
	_, err = StartEtcd(t.TempDir(), taken.Addr().String(), tlsutil.Config{}, quiet)
	if err == nil || !strings.Contains(err.Error(), taken.Addr().String()) {
		t.Fatalf("a taken client address given: %v", err)
	}
}
