package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/tenant"
	"github.com/stratadb/strata/internal/wire"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// Routing: the regions other datanodes host are reached over gRPC, each
// request waiting for an owner and retried while the region moves.

// owner waits until region id has a live owner and returns its address,
// or "" if the owner is this node and the region is open here.
func (a *Agent) owner(ctx context.Context, id layout.RegionID) (string, error) {
	for {
		a.mu.Lock()
		as, ok := a.owners[id]
		n, live := a.nodes[as.Owner]
		changed := a.changed
		a.mu.Unlock()
		if ok && live {
			if as.Owner != a.opts.Node.ID {
				return n.GRPCAddr, nil
			}
			if slices.Contains(a.eng.Hosted(), id) {
				return "", nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w: region %s has no live owner yet: %v", datanode.ErrNotHosted, id, ctx.Err())
		case <-changed:
		case <-time.After(time.Second):
		}
	}
}

// Peer is a client of the datanode at gRPC address addr, on the
// connection this datanode's forwarded requests take (the cluster's
// transport and auth).
func (a *Agent) Peer(addr string) (pb.DatanodeClient, error) { return a.conn(addr) }

func (a *Agent) conn(addr string) (pb.DatanodeClient, error) {
	c, err := a.dial(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewDatanodeClient(c), nil
}

// dial returns the connection to addr, made once.
func (a *Agent) dial(addr string) (*grpc.ClientConn, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.conns[addr]
	if c == nil {
		// The transport in DialOptions, if any, comes last and wins.
		opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithKeepaliveParams(Keepalive)}, a.opts.DialOptions...)
		var err error
		if c, err = grpc.NewClient(addr, opts...); err != nil {
			return nil, err
		}
		a.conns[addr] = c
	}
	return c, nil
}

// Meta is a client of the metasrv leader's admin API, found in the
// election in etcd, on the connection the datanode's peer calls take (the
// cluster's transport and auth): the web UI's cluster and tables pages
// (internal/ui) ask it.
func (a *Agent) Meta(ctx context.Context) (pb.MetaAdminClient, error) {
	resp, err := a.opts.Client.Get(ctx, cluster.ElectionPrefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if len(resp.Kvs) == 0 {
		return nil, status.Error(codes.Unavailable, "no metasrv leader elected yet")
	}
	c, err := a.dial(string(resp.Kvs[0].Value))
	if err != nil {
		return nil, err
	}
	return pb.NewMetaAdminClient(c), nil
}

// Keepalive pings another datanode on a connection that has had no
// traffic for Time while a call is open, and gives the connection up if
// the ping has no answer within Timeout (which takes the peer process
// itself): a stream from a datanode cut off from this one fails, rather
// than waiting as long as TCP does, while the peer keeps its lease. A
// datanode's server must allow pings this often (KeepalivePolicy).
var Keepalive = keepalive.ClientParameters{Time: 15 * time.Second, Timeout: 10 * time.Second}

// KeepalivePolicy is the datanode gRPC server's: it permits Keepalive's
// pings (the default policy answers pings more often than every 5 min
// with GOAWAY too_many_pings).
var KeepalivePolicy = keepalive.EnforcementPolicy{MinTime: 5 * time.Second}

// routeTimeout bounds how long a forwarded request waits for a region to
// get an owner (failover takes up to a lease).
const routeTimeout = 30 * time.Second

func retryable(err error) bool {
	return status.Code(err) == codes.Unavailable || errors.Is(err, datanode.ErrNotHosted)
}

// gaveUp is the error a forward ends with: err, unless err is routing's
// own timeout (ctx, of parent) running out while the owner kept answering
// last (a region closed or fenced there): then that answer, which keeps
// its class (unavailable) where the deadline would say timeout.
func gaveUp(parent, ctx context.Context, err, last error) error {
	deadline := status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded)
	if last != nil && deadline && ctx.Err() != nil && parent.Err() == nil {
		return fmt.Errorf("%w (retried for %v)", last, routeTimeout)
	}
	return err
}

// Write forwards a region's batch to its owner, waiting for an owner and
// retrying while the region moves. Another datanode checks the batch for
// safety (it takes it from the network) without parsing it again
// (forwardWrite); this one does not.
func (a *Agent) Write(ctx context.Context, table string, id layout.RegionID, b region.Batch) (region.WriteResult, error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, routeTimeout)
	defer cancel()
	var last error    // the owner's last answer worth a retry
	var fb *forwarded // b encoded, once
	defer func() { fb.release() }()
	for {
		addr, err := a.owner(ctx, id)
		if err != nil {
			return region.WriteResult{}, err
		}
		if addr == "" {
			res, err := a.eng.WriteHosted(ctx, id, b)
			if err == nil || !errors.Is(err, datanode.ErrNotHosted) {
				return res, err
			}
			continue
		}
		c, err := a.conn(addr)
		if err != nil {
			return region.WriteResult{}, err
		}
		var resp *pb.WriteResponse
		moved, err := a.watched(ctx, id, addr, func(ctx context.Context) (err error) {
			resp, err = a.forwardWrite(ctx, c, addr, table, id, b, &fb)
			return err
		})
		if err == nil {
			return region.WriteResult{Written: int(resp.Written), Expired: int(resp.Expired)}, nil
		}
		if moved && ctx.Err() == nil {
			// A former owner acknowledges nothing once its lease is over
			// (its WAL is fenced), and writing a point again is harmless.
			a.log.Info("forward: the region's owner changed; retrying", "region", id.String(), "from", addr, "err", err)
			a.fwdRetries.WithLabelValues("moved").Inc()
			continue
		}
		if !retryable(err) || ctx.Err() != nil {
			return region.WriteResult{}, fmt.Errorf("region %s on %s: %w", id, addr, gaveUp(parent, ctx, err, last))
		}
		a.fwdRetries.WithLabelValues("unavailable").Inc()
		last = err
		a.waitChange(ctx)
	}
}

// Delete writes a tombstone for one series of region id on its owner.
func (a *Agent) Delete(ctx context.Context, table string, id layout.RegionID, tags []row.Tag, start, end int64) error {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, routeTimeout)
	defer cancel()
	var last error // the owner's last answer worth a retry
	for {
		addr, err := a.owner(ctx, id)
		if err != nil {
			return err
		}
		if addr == "" {
			err := a.eng.DeleteHosted(ctx, id, tags, start, end)
			if err == nil || !errors.Is(err, datanode.ErrNotHosted) {
				return err
			}
			continue
		}
		c, err := a.conn(addr)
		if err != nil {
			return err
		}
		// The owner routes the series to the region by its key, as this
		// node did; it qualifies the table's name with the call's tenant.
		moved, err := a.watched(ctx, id, addr, func(ctx context.Context) error {
			ctx, base := tenant.Call(ctx, table)
			_, err := c.Delete(ctx, &pb.DeleteRequest{Table: base, Tags: wire.FromTags(tags), Start: start, End: end})
			return err
		})
		if err == nil {
			return nil
		}
		if moved && ctx.Err() == nil {
			a.fwdRetries.WithLabelValues("moved").Inc()
			continue // a tombstone written twice is one
		}
		if !retryable(err) || ctx.Err() != nil {
			return fmt.Errorf("region %s on %s: %w", id, addr, gaveUp(parent, ctx, err, last))
		}
		a.fwdRetries.WithLabelValues("unavailable").Inc()
		last = err
		a.waitChange(ctx)
	}
}

// watched runs call, a request to region id's owner at addr, cancelling
// it if the agent sees the owner change away from addr (moved, or its
// lease ended: a frozen or cut-off owner would otherwise hold the request
// until routing's deadline). moved reports whether that happened.
func (a *Agent) watched(ctx context.Context, id layout.RegionID, addr string, call func(context.Context) error) (moved bool, err error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m, unwatch := a.watchOwner(id, addr, cancel)
	defer unwatch()
	err = call(cctx)
	return m.Load(), err
}

func (a *Agent) waitChange(ctx context.Context) {
	a.mu.Lock()
	ch := a.changed
	a.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-ch:
	case <-time.After(500 * time.Millisecond):
	}
}
