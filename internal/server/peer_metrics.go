package server

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/stats"

	"github.com/stratadb/strata/internal/peerwire"
)

// peerBytes is a gRPC stats handler on the connections a datanode dials to
// other datanodes (forwarded writes, remote scans, label and series
// look-ups): it counts the bytes of the messages it sends and receives, by
// method, in strata_peer_grpc_bytes_total. A message counts as the gRPC
// frame it travels in (its payload as sent, compressed if it was, plus the
// 5-byte message header); HTTP/2 framing, headers and trailers are not
// counted, nor TLS. The calls made over peerwire are counted the same
// way, under the gRPC method's name: a frame is also its payload and a
// 5-byte header.
type peerBytes struct {
	bytes *prometheus.CounterVec
	// pw holds the peerwire methods' counters (peerwireCounter to
	// prometheus.Counter), each found once: a call counts each frame, and
	// WithLabelValues hashes its labels every time. Made at first use, so
	// that a node that calls no peer shows no series.
	pw sync.Map
}

type peerwireCounter struct {
	direction string
	method    byte
}

type peerMethodKey struct{}

func newPeerBytes(reg prometheus.Registerer) *peerBytes {
	h := &peerBytes{bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_peer_grpc_bytes_total",
		Help: "Bytes of gRPC messages this datanode sent to and received from other datanodes, by direction and method (the gRPC frames: payload and 5-byte header; not HTTP/2 framing, headers or TLS)."},
		[]string{"direction", "method"})}
	reg.MustRegister(h.bytes)
	return h
}

// peerwireMethods name peerwire's methods as gRPC's.
var peerwireMethods = map[byte]string{
	peerwire.ScanColumns:  "/strata.v1.Datanode/ScanColumns",
	peerwire.ForwardWrite: "/strata.v1.Datanode/ForwardWrite",
}

// peerwire counts a peerwire frame (peerwire.ClientOptions.Count).
func (h *peerBytes) peerwire(direction string, method byte, n int) {
	k := peerwireCounter{direction, method}
	c, ok := h.pw.Load(k)
	if !ok {
		c, _ = h.pw.LoadOrStore(k, h.bytes.WithLabelValues(direction, peerwireMethods[method]))
	}
	c.(prometheus.Counter).Add(float64(n))
}

func (h *peerBytes) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, peerMethodKey{}, info.FullMethodName)
}

func (h *peerBytes) HandleRPC(ctx context.Context, s stats.RPCStats) {
	method, _ := ctx.Value(peerMethodKey{}).(string)
	switch p := s.(type) {
	case *stats.OutPayload:
		h.bytes.WithLabelValues("sent", method).Add(float64(p.WireLength))
	case *stats.InPayload:
		h.bytes.WithLabelValues("received", method).Add(float64(p.WireLength))
	}
}

func (h *peerBytes) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (h *peerBytes) HandleConn(context.Context, stats.ConnStats) {}
