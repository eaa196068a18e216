package peerwire

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// grpcUserTimeout is gRPC's server's TCP_USER_TIMEOUT by default (its
// keepalive Timeout, 20 s): how long sent data may stay unacknowledged
// before the connection is given up.
const grpcUserTimeout = 20 * time.Second

// setUserTimeout sets c's TCP_USER_TIMEOUT, if c is a TCP connection.
func setUserTimeout(c net.Conn, d time.Duration) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
	})
}
