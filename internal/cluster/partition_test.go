package cluster_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// cutProxy forwards TCP connections to a datanode's gRPC port until cut:
// from then on it forwards nothing, either way, and closes nothing (a
// network that drops the packets), for connections open and new.
type cutProxy struct {
	ln     net.Listener
	target atomic.Value // string
	cut    chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

// newCutProxy starts a proxy; the caller closes it.
func newCutProxy(t *testing.T) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, cut: make(chan struct{}), done: make(chan struct{})}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.track(c)
			p.wg.Go(func() { p.serve(c) })
		}
	})
	return p
}

// close closes the proxy and every connection it holds.
func (p *cutProxy) close() {
	close(p.done)
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *cutProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		c.Close()
	default:
		p.conns = append(p.conns, c)
	}
}

func (p *cutProxy) serve(c net.Conn) {
	up, err := net.Dial("tcp", p.target.Load().(string))
	if err != nil {
		c.Close()
		return
	}
	p.track(up)
	p.wg.Go(func() { p.pipe(up, c) })
	p.pipe(c, up)
}

// pipe copies src to dst until either fails, holding what it reads once
// the proxy is cut.
func (p *cutProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.cut:
			<-p.done // dropped
			return
		default:
		}
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A column scan whose stream reaches the region's owner through a network
// that stops carrying packets, while the owner keeps its lease (no new
// owner to wait for), ends with an error naming the region, once the
// connection's keepalive ping goes unanswered and routing gives up, and
// not when the caller's deadline ends it.
func TestScanThroughACutNetworkFails(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for keepalive and routing timeouts")
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cli := clustertest.Etcd(t)
	servertest.Metasrv(t, cli, 1)
	store := "file://" + t.TempDir()
	var dns []*server.Server
	proxies := map[*server.Server]*cutProxy{}
	for _, id := range []string{"dn1", "dn2"} {
		// Every other datanode reaches this one through its proxy.
		p := newCutProxy(t)
		s, err := server.Start(context.Background(), server.Config{NodeID: id, Etcd: cli.Endpoints(), Store: store, DataDir: t.TempDir(), DefaultRegions: 1,
			HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", AdvertiseGRPC: p.ln.Addr().String(), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		p.target.Store(s.GRPCAddr())
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		t.Cleanup(p.close) // first: the servers would wait on the calls it holds
		dns = append(dns, s)
		proxies[s] = p
	}
	ctx := context.Background()
	if _, err := dns[0].Engine().CreateTable(ctx, catalog.TableSpec{Name: "m", Regions: 1}); err != nil {
		t.Fatal(err)
	}
	owner, other, id := ownerOf(t, dns, "m")
	if _, err := owner.Engine().Write(ctx, "m", []row.Point{{Tags: []row.Tag{{Name: "host", Value: "a"}}, TS: 1, Fields: []row.Field{{Name: "v", Value: row.FloatValue(1)}}}}, datanode.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	req := scan.Request{Start: region.AllTime, End: region.AllTimeEnd, Fields: []string{"v"}}
	n := 0
	if err := other.Engine().ScanColumns(ctx, "m", req, func(c *scan.Column) error { n += len(c.TS); return nil }); err != nil || n != 1 {
		t.Fatalf("before the cut: %d points, %v", n, err)
	}
	close(proxies[owner].cut)
	qctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	err := other.Engine().ScanColumns(qctx, "m", req, func(c *scan.Column) error { return nil })
	t.Logf("scan through the cut network: %v after %v", err, time.Since(start).Round(time.Second))
	if err == nil || qctx.Err() != nil {
		t.Fatalf("scan through a cut network: %v (caller's deadline: %v)", err, qctx.Err())
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("region %s", id)) {
		t.Fatalf("the error does not name region %s: %v", id, err)
	}
}
