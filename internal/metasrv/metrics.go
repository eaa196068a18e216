package metasrv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/gcsched"
	"github.com/stratadb/strata/internal/ui"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// Metrics are a metasrv replica's metrics (docs/cluster.md, "Metrics").
// One Metrics serves every leadership term of the replica.
type Metrics struct {
	// Leader is 1 while this replica leads, else 0.
	Leader prometheus.Gauge
	// ElectionsWon counts the terms this replica began; ElectionsLost the
	// terms that ended while it kept running (its election session
	// expired: etcd out of reach, or the process paused past the TTL).
	ElectionsWon, ElectionsLost prometheus.Counter
	// Moves counts region assignments by reason: placed (a region with no
	// assignment yet), failover (off a datanode whose lease ended) and
	// admin (MoveRegion).
	Moves *prometheus.CounterVec
	// LeaseExpiries counts datanode registrations whose lease expired,
	// seen by the leader; a datanode that shuts down cleanly marks itself
	// leaving first and is not counted.
	LeaseExpiries prometheus.Counter
	// GC is the GC scheduler's.
	GC *gcsched.Metrics
}

// NewMetrics creates a replica's metrics, registered with reg unless it is
// nil. The build (strata_build_info) and the etcd client's latency
// (cluster.EtcdMetrics) are registered by the process, as on a datanode.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_metasrv_leader",
			Help: "1 while this metasrv replica is the leader, else 0."}),
		ElectionsWon: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_metasrv_elections_won_total",
			Help: "Leadership terms this metasrv replica began."}),
		ElectionsLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_metasrv_elections_lost_total",
			Help: "Leadership terms that ended while this replica kept running: its election session expired."}),
		Moves: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_metasrv_placement_moves_total",
			Help: "Region assignments the leader wrote, by reason (placed: a new region; failover: off a datanode whose lease ended; admin: MoveRegion)."}, []string{"reason"}),
		LeaseExpiries: prometheus.NewCounter(prometheus.CounterOpts{Name: "strata_metasrv_datanode_lease_expiries_total",
			Help: "Datanode leases the leader saw expire (a clean shutdown, which marks the datanode leaving, is not counted)."}),
		GC: gcsched.NewMetrics(reg),
	}
	if reg != nil {
		reg.MustRegister(m.Leader, m.ElectionsWon, m.ElectionsLost, m.Moves, m.LeaseExpiries)
	}
	return m
}

// Move reasons.
const (
	movePlaced   = "placed"
	moveFailover = "failover"
	moveAdmin    = "admin"
)

// watchLeases counts the datanode leases that expire during a term: a
// registration deleted whose last value was not marked leaving.
func (s *Server) watchLeases(ctx context.Context) {
	for ctx.Err() == nil {
		wc := s.opts.Client.Watch(clientv3.WithRequireLeader(ctx), cluster.DatanodesPrefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithFilterPut())
		for resp := range wc {
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypeDelete || ev.PrevKv == nil || ev.PrevKv.Lease == 0 {
					continue
				}
				var n cluster.NodeInfo
				if json.Unmarshal(ev.PrevKv.Value, &n) != nil || n.Leaving {
					continue
				}
				s.metrics.LeaseExpiries.Inc()
				s.log.Warn("datanode lease expired", "datanode", n.ID)
			}
		}
	}
}

// Handler serves the replica's HTTP endpoints: /metrics from g, /health
// (200 with the replica's role and build, JSON), and the web UI's cluster
// and tables pages at / (internal/ui, docs/ui.md), which ask this
// replica's admin API (a follower forwards to the leader).
func (s *Server) Handler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	ui.Register(mux, ui.Options{Metasrv: true, Admin: func(context.Context) (pb.MetaAdminClient, error) {
		c, err := s.conn(s.opts.Addr)
		if err != nil {
			return nil, err
		}
		return pb.NewMetaAdminClient(c), nil
	}})
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		role := "follower"
		if s.Leading() {
			role = "leader"
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"status":"ok","role":%q,"version":%q,"revision":%q}`+"\n", role, s.opts.Build.Version, strings.TrimSpace(s.opts.Build.Revision))
	})
	return mux
}
