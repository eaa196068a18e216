//go:build !linux

package peerwire

import (
	"net"
	"time"
)

const grpcUserTimeout = 20 * time.Second

// setUserTimeout: gRPC sets TCP_USER_TIMEOUT on Linux only.
func setUserTimeout(net.Conn, time.Duration) {}
