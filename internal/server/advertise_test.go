package server

import (
	"net"
	"testing"
)

func TestAdvertiseHTTP(t *testing.T) {
	for _, c := range []struct {
		grpc  string
		bound net.Addr
		want  string
	}{
		{"datanode1:8087", &net.TCPAddr{IP: net.IPv6unspecified, Port: 8086}, "datanode1:8086"},
		{"10.0.0.5:8087", &net.TCPAddr{IP: net.IPv4zero, Port: 9000}, "10.0.0.5:9000"},
		{"datanode1:8087", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8086}, "127.0.0.1:8086"}, // bound to one address: that one
		{"[::1]:8087", &net.TCPAddr{IP: net.IPv6unspecified, Port: 8086}, "[::1]:8086"},
	} {
		if got := advertiseHTTP(c.grpc, c.bound); got != c.want {
			t.Errorf("advertiseHTTP(%q, %v) = %q, want %q", c.grpc, c.bound, got, c.want)
		}
	}
}
