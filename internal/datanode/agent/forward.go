package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/fwdbatch"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/peerwire"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/wire"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// Forwarded writes: a region's share of a write goes to its owner as the
// engine holds it (internal/fwdbatch: series keys encoded, fields in
// columns), compressed, through ForwardWrite; the owner checks it and
// writes it without parsing it again. An owner older than ForwardWrite
// answers Unimplemented: the share goes through Write then, as points, and
// the owner is asked again with ForwardWrite a minute later (it may have
// been upgraded meanwhile: a rolling upgrade).

// forwardCodec compresses forwarded batches (measured in
// BenchmarkForwardWrite: see docs/performance.md).
var forwardCodec = fwdbatch.Snappy

// legacyRetry is how long an owner that answered ForwardWrite with
// Unimplemented gets Write before it is asked with ForwardWrite again.
const legacyRetry = time.Minute

// forwarder remembers the owners older than ForwardWrite, and those that
// refused a version 2 batch.
type forwarder struct {
	mu     sync.Mutex
	legacy map[string]time.Time // address: until when to use Write
	v1     map[string]time.Time // address: until when to send version 1
	grpc   map[string]time.Time // address: until when to use gRPC's ForwardWrite, not peerwire's
}

func (f *forwarder) isLegacy(addr string) bool { return f.is(&f.legacy, addr) }

func (f *forwarder) setLegacy(addr string) { f.set(&f.legacy, addr) }

// is reports whether addr is in *m, until its time.
func (f *forwarder) is(m *map[string]time.Time, addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	until, ok := (*m)[addr]
	if ok && time.Now().After(until) {
		delete(*m, addr)
		return false
	}
	return ok
}

// set puts addr in *m for legacyRetry.
func (f *forwarder) set(m *map[string]time.Time, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *m == nil {
		*m = map[string]time.Time{}
	}
	(*m)[addr] = time.Now().Add(legacyRetry)
}

// forwarded is a batch encoded for ForwardWrite once, for every attempt
// (a write retried while its region moves is encoded once, again only for
// an owner that reads another version).
type forwarded struct {
	enc     fwdbatch.Encoder
	raw     []byte // the encoding, kept for the next batch
	comp    []byte // compressed, kept for the next batch
	data    []byte // raw compressed (raw itself if not)
	size    uint64
	version int // of data; 0: none yet
}

var forwardBufs = freelist.New[*forwarded](16)

// release gives the buffers back (no request refers to them any more:
// gRPC has marshalled each before its call returned).
func (fb *forwarded) release() {
	if fb == nil || cap(fb.raw) > 16<<20 || cap(fb.comp) > 16<<20 {
		return
	}
	fb.raw, fb.data, fb.version = fb.raw[:0], nil, 0
	forwardBufs.Put(fb)
}

// forwardWrite sends b, all of region id, to its owner at addr: through
// ForwardWrite, encoding it into *fb the first time, or through Write to
// an owner that lacks ForwardWrite.
func (a *Agent) forwardWrite(ctx context.Context, c pb.DatanodeClient, addr, table string, id layout.RegionID, b region.Batch, fb **forwarded) (*pb.WriteResponse, error) {
	if !a.fwd.isLegacy(addr) {
		if *fb == nil {
			e, ok := forwardBufs.Get()
			if !ok {
				e = &forwarded{}
			}
			*fb = e
		}
		e := *fb
		send := func(v int) (*pb.WriteResponse, error) {
			e.encode(b, v)
			req := &pb.ForwardWriteRequest{Table: table, Region: id.String(), Compression: uint32(forwardCodec), Size: e.size, Batch: e.data}
			if resp, sent, err := a.forwardPeer(ctx, addr, req); sent {
				return resp, err
			}
			a.forwards.WithLabelValues("grpc").Inc()
			return c.ForwardWrite(ctx, req)
		}
		v := a.forwardVersion(addr)
		resp, err := send(v)
		if v > fwdbatch.V1 && status.Code(err) == codes.InvalidArgument {
			// An owner that announced version 2 may have been replaced by
			// an older build at its address (a rollback) before this node
			// heard: it refuses the batch as malformed. Version 1 once
			// more, and for a while after: a batch refused for what it
			// holds is refused again, at the cost of an encoding.
			if resp, err = send(fwdbatch.V1); err == nil {
				a.log.Info("the owner refused a version 2 batch and took version 1 (an older version): forwarding version 1 to it", "owner", addr, "region", id.String())
				a.fwd.set(&a.fwd.v1, addr)
			}
		}
		if status.Code(err) != codes.Unimplemented {
			return resp, err
		}
		a.log.Info("the owner lacks ForwardWrite (an older version): forwarding its writes as points", "owner", addr, "region", id.String())
		a.fwd.setLegacy(addr)
	}
	a.forwards.WithLabelValues("points").Inc()
	return c.Write(ctx, &pb.WriteRequest{Table: table, Region: id.String(), Points: wire.FromPoints(b.Points)})
}

func newForwards() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_forwarded_writes_total",
		Help: "Shares of writes sent to the owners of regions hosted elsewhere, attempts included, by transport: peerwire, grpc (an owner that takes no forwarded writes over peerwire), or points (an owner older than forwarded batches: Write)."}, []string{"transport"})
}

// forwardPeer sends req over peerwire, unless the owner at addr does not
// speak it, or does not know ForwardWrite there (a build before it, asked
// again after legacyRetry): sent false, and the caller uses gRPC.
func (a *Agent) forwardPeer(ctx context.Context, addr string, req *pb.ForwardWriteRequest) (resp *pb.WriteResponse, sent bool, err error) {
	p := a.opts.Peer
	if p == nil || !p.Supported(addr) || a.fwd.is(&a.fwd.grpc, addr) {
		return nil, false, nil
	}
	resp = new(pb.WriteResponse)
	err = p.Unary(ctx, addr, peerwire.ForwardWrite, req, resp)
	switch {
	case errors.Is(err, peerwire.ErrUnsupported):
		return nil, false, nil
	case status.Code(err) == codes.Unimplemented:
		// Only peerwire answers Unimplemented here (ForwardWrite's
		// handler never does): a build that reads column scans over
		// peerwire but not forwarded writes.
		a.log.Info("the owner takes no forwarded writes over peerwire (an older version): forwarding them over gRPC", "owner", addr)
		a.fwd.set(&a.fwd.grpc, addr)
		return nil, false, nil
	case err != nil:
		return nil, true, err
	}
	a.forwards.WithLabelValues("peerwire").Inc()
	return resp, true, nil
}

// encode makes e's data the encoding of b in version v, unless it is.
func (e *forwarded) encode(b region.Batch, v int) {
	if e.version == v {
		return
	}
	e.raw = e.enc.Append(e.raw[:0], b, v)
	e.size = uint64(len(e.raw))
	e.data = fwdbatch.Compress(forwardCodec, e.comp, e.raw)
	if forwardCodec != fwdbatch.None {
		e.comp = e.data
	}
	e.version = v
}

// forwardVersion is the encoding to forward to the datanode at addr: the
// newest both read (version 1 to a build that announces none, or to an
// address that refused version 2 lately).
func (a *Agent) forwardVersion(addr string) int {
	if a.fwd.is(&a.fwd.v1, addr) {
		return fwdbatch.V1
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range a.nodes {
		if n.GRPCAddr == addr {
			return max(fwdbatch.V1, min(n.Forward, fwdbatch.Latest))
		}
	}
	return fwdbatch.V1
}
