package agent

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/fwdbatch"
	"github.com/stratadb/strata/internal/layout"
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

// forwarder remembers the owners older than ForwardWrite.
type forwarder struct {
	mu     sync.Mutex
	legacy map[string]time.Time // address: until when to use Write
}

func (f *forwarder) isLegacy(addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	until, ok := f.legacy[addr]
	if ok && time.Now().After(until) {
		delete(f.legacy, addr)
		return false
	}
	return ok
}

func (f *forwarder) setLegacy(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.legacy == nil {
		f.legacy = map[string]time.Time{}
	}
	f.legacy[addr] = time.Now().Add(legacyRetry)
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
		if v := a.forwardVersion(addr); e.version != v {
			e.raw = e.enc.Append(e.raw[:0], b, v)
			e.size = uint64(len(e.raw))
			e.data = fwdbatch.Compress(forwardCodec, e.comp, e.raw)
			if forwardCodec != fwdbatch.None {
				e.comp = e.data
			}
			e.version = v
		}
		resp, err := c.ForwardWrite(ctx, &pb.ForwardWriteRequest{Table: table, Region: id.String(), Compression: uint32(forwardCodec), Size: e.size, Batch: e.data})
		if status.Code(err) != codes.Unimplemented {
			return resp, err
		}
		a.log.Info("the owner lacks ForwardWrite (an older version): forwarding its writes as points", "owner", addr, "region", id.String())
		a.fwd.setLegacy(addr)
	}
	return c.Write(ctx, &pb.WriteRequest{Table: table, Region: id.String(), Points: wire.FromPoints(b.Points)})
}

// forwardVersion is the encoding to forward to the datanode at addr: the
// newest both read (version 1 to a build that announces none).
func (a *Agent) forwardVersion(addr string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range a.nodes {
		if n.GRPCAddr == addr {
			return max(fwdbatch.V1, min(n.Forward, fwdbatch.Latest))
		}
	}
	return fwdbatch.V1
}
