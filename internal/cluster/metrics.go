package cluster

import (
	"context"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// EtcdMetrics time a process's etcd client's requests.
type EtcdMetrics struct {
	duration *prometheus.HistogramVec
}

// NewEtcdMetrics creates the etcd client's metrics, registered with reg
// unless it is nil. Pass its DialOptions to ConnectTLS.
func NewEtcdMetrics(reg prometheus.Registerer) *EtcdMetrics {
	m := &EtcdMetrics{duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "strata_etcd_request_duration_seconds",
		Help:    "Latency of this process's unary etcd requests (failed ones included), by op: the etcd RPC (Range, Put, Txn, LeaseGrant, …).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"op"})}
	if reg != nil {
		reg.MustRegister(m.duration)
	}
	return m
}

// DialOptions time every unary request of a client dialled with them.
// Streams (watches, lease keep-alives) last as long as they are open and
// are not timed.
func (m *EtcdMetrics) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		began := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		m.duration.WithLabelValues(path.Base(method)).Observe(time.Since(began).Seconds())
		return err
	})}
}
