package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/peerwire"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/wire"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// Scans of regions other datanodes host: a stream from the region's
// owner, watched for the owner changing under it.

// errHere ends an ownerStream whose region turned out to be hosted here:
// its here function has run, and succeeded.
var errHere = errors.New("agent: region hosted here")

// ownerStream reads a scan of region id from the region's owner. The
// stream is cancelled the moment the agent sees the region's owner change
// away from the datanode being read: moved, or its lease ended (an owner
// that is frozen, dead or cut off would otherwise never answer, or not
// before TCP gives up). While nothing has been delivered to the caller
// (delivered, which the caller sets), the scan starts again on the new
// owner, waiting for one within routeTimeout and the caller's ctx as Write
// does; the wait starts when the last stream stopped giving messages.
// Once something has been delivered a retry would deliver it twice: the
// scan fails with scan.ErrInterrupted, naming the region and the
// owner it was reading.
type ownerStream[T any] struct {
	a    *Agent
	ctx  context.Context // the caller's
	id   layout.RegionID
	open func(ctx context.Context, c pb.DatanodeClient, addr string) (recver[T], error)
	// here scans the region hosted here, should its owner be this node.
	here func() error

	delivered atomic.Bool // set by the caller, maybe from here's goroutines
	until     time.Time   // routing's deadline; zero while messages come
	last      error       // the owner's last answer worth a retry
	addr      string      // the owner being read
	stream    recver[T]
	cancel    context.CancelFunc
	unwatch   func()
	moved     *atomic.Bool
	end       error // io.EOF or the error that ended the scan: Recv's answer from then on
}

// recver is a stream of messages from an owner: gRPC's, or peerwire's.
type recver[T any] interface{ Recv() (*T, error) }

func newOwnerStream[T any](a *Agent, ctx context.Context, id layout.RegionID, here func() error,
	open func(ctx context.Context, c pb.DatanodeClient, addr string) (recver[T], error)) *ownerStream[T] {
	return &ownerStream[T]{a: a, ctx: ctx, id: id, here: here, open: open}
}

// routing is the context a wait for an owner runs under.
func (s *ownerStream[T]) routing() (context.Context, context.CancelFunc) {
	if s.until.IsZero() {
		s.until = time.Now().Add(routeTimeout)
	}
	return context.WithDeadline(s.ctx, s.until)
}

// connect opens the stream on the region's owner, or runs here and
// returns errHere if that is this node.
func (s *ownerStream[T]) connect() error {
	rctx, cancel := s.routing()
	defer cancel()
	for {
		addr, err := s.a.owner(rctx, s.id)
		if err != nil {
			if s.last != nil {
				return fmt.Errorf("scan region %s: %w", s.id, gaveUp(s.ctx, rctx, err, s.last))
			}
			return fmt.Errorf("scan region %s: %w", s.id, err)
		}
		if addr == "" {
			err := s.here()
			if err == nil {
				return errHere
			}
			if !errors.Is(err, datanode.ErrNotHosted) || s.delivered.Load() {
				return err
			}
			s.last = err
			s.a.waitChange(rctx)
			continue
		}
		c, err := s.a.conn(addr)
		if err != nil {
			return fmt.Errorf("scan region %s on %s: %w", s.id, addr, err)
		}
		sctx, scancel := context.WithCancel(s.ctx)
		moved, unwatch := s.a.watchOwner(s.id, addr, scancel)
		s.a.remoteScans.Inc()
		stream, err := s.open(sctx, c, addr)
		if err == nil {
			s.addr, s.stream, s.cancel, s.moved, s.unwatch = addr, stream, scancel, moved, unwatch
			return nil
		}
		unwatch()
		scancel()
		s.a.remoteScans.Dec()
		if err := s.retry(rctx, addr, moved.Load(), err); err != nil {
			return err
		}
	}
}

// retry decides, after the stream from addr ended with err, whether to
// open it again (nil, once the wait is over) or to fail.
func (s *ownerStream[T]) retry(rctx context.Context, addr string, moved bool, err error) error {
	switch {
	case s.ctx.Err() != nil:
		return fmt.Errorf("scan region %s on %s: %w", s.id, addr, s.ctx.Err())
	case !moved && !retryable(err):
		return fmt.Errorf("scan region %s on %s: %w", s.id, addr, err)
	case s.delivered.Load():
		why := "its owner moved"
		if !moved {
			why = err.Error()
		}
		return fmt.Errorf("%w: region %s, read from %s: %s", scan.ErrInterrupted, s.id, addr, why)
	case rctx.Err() != nil:
		return fmt.Errorf("scan region %s on %s: %w", s.id, addr, gaveUp(s.ctx, rctx, err, s.last))
	}
	s.a.scanRetries.Inc()
	s.a.log.Info("remote scan: retrying", "region", s.id.String(), "from", addr, "moved", moved, "err", err)
	if !moved {
		s.last = err
		s.a.waitChange(rctx) // the owner is there but cannot answer yet
	}
	return nil
}

// Recv returns the stream's next message, io.EOF at its end, or errHere
// once the scan has run here instead; once it has ended, that again (a
// stream closed at its end is not one to open again).
func (s *ownerStream[T]) Recv() (*T, error) {
	if s.end != nil {
		return nil, s.end
	}
	m, err := s.recv()
	if err != nil {
		s.end = err
	}
	return m, err
}

func (s *ownerStream[T]) recv() (*T, error) {
	for {
		if s.stream == nil {
			if err := s.connect(); err != nil {
				return nil, err
			}
		}
		m, err := s.stream.Recv()
		if err == nil {
			s.until = time.Time{}
			return m, nil
		}
		moved := s.moved.Load()
		s.close()
		if err == io.EOF {
			return nil, io.EOF
		}
		rctx, cancel := s.routing()
		err = s.retry(rctx, s.addr, moved, err)
		cancel()
		if err != nil {
			return nil, err
		}
	}
}

// close ends the stream, if one is open.
func (s *ownerStream[T]) close() {
	if s.stream != nil {
		s.unwatch()
		s.cancel()
		s.stream = nil
		s.a.remoteScans.Dec()
	}
}

// ownerWatch is a remote scan's view of its region's owner: cancel runs,
// and moved is set, once the agent sees the owner change away from addr.
type ownerWatch struct {
	id     layout.RegionID
	addr   string
	cancel context.CancelFunc
	moved  atomic.Bool
}

// checkLocked cancels w if its owner is no longer addr; a.mu held.
func (a *Agent) checkLocked(w *ownerWatch) {
	n, live := a.nodes[a.owners[w.id].Owner]
	if !live || n.GRPCAddr != w.addr {
		w.moved.Store(true)
		w.cancel()
		delete(a.watches, w)
	}
}

// changedLocked tells whoever waits on a.changed, and every remote scan
// whose owner moved, that owners or nodes changed; a.mu held.
func (a *Agent) changedLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
	for w := range a.watches {
		a.checkLocked(w)
	}
}

// watchOwner calls cancel, and sets the flag it returns, when the agent
// sees region id's owner change away from addr: moved, or its lease ended.
// It stops watching when stop is called. The agent checks at each change
// of owners or nodes: no goroutine a scan (a point query's remote scans
// are short, and a goroutine each woken at their end cost them more than
// the check).
func (a *Agent) watchOwner(id layout.RegionID, addr string, cancel context.CancelFunc) (moved *atomic.Bool, stop func()) {
	w := &ownerWatch{id: id, addr: addr, cancel: cancel}
	a.mu.Lock()
	a.watches[w] = struct{}{}
	a.checkLocked(w)
	a.mu.Unlock()
	return &w.moved, func() {
		a.mu.Lock()
		delete(a.watches, w)
		a.mu.Unlock()
	}
}

// Scan scans a region on its owner (see ownerStream).
func (a *Agent) Scan(ctx context.Context, table string, id layout.RegionID, req scan.Request) (row.Iterator, error) {
	it := &remoteIter{width: len(req.Fields)}
	preq := &pb.ScanRequest{Table: table, Region: id.String(), Start: req.Start, End: req.End, Tags: wire.FromTags(req.Tags), In: wire.FromTagIns(req.In),
		Fields: req.Fields, BatchRows: int32(req.BatchRows), SeriesOnly: req.SeriesOnly}
	it.s = newOwnerStream(a, ctx, id, func() error {
		sc, err := a.eng.ScanRegion(ctx, table, id, req)
		if err != nil {
			return err
		}
		it.here = sc.Iterator()
		return nil
	}, func(ctx context.Context, c pb.DatanodeClient, _ string) (recver[pb.ScanResponse], error) {
		return c.Scan(ctx, preq)
	})
	if err := it.s.connect(); err != nil && !errors.Is(err, errHere) {
		return nil, err
	}
	if it.here != nil {
		return it.here, nil
	}
	return it, nil
}

// remoteIter turns a streamed scan into entries.
type remoteIter struct {
	s     *ownerStream[pb.ScanResponse]
	here  row.Iterator // the scan, once it ran here instead
	width int
	resp  *pb.ScanResponse
	keys  []string // series keys of resp
	pos   int
	cur   row.Entry
	err   error
}

func (it *remoteIter) Next() bool {
	if it.here != nil {
		return it.here.Next()
	}
	for it.resp == nil || it.pos >= len(it.resp.Rows) {
		resp, err := it.s.Recv()
		if err == io.EOF {
			return false
		}
		if errors.Is(err, errHere) {
			return it.here.Next()
		}
		if err != nil {
			it.err = err
			return false
		}
		it.resp, it.pos = resp, 0
		it.keys = it.keys[:0]
		for _, s := range resp.Series {
			k, err := row.EncodeSeries(nil, wire.ToTags(s.Tags))
			if err != nil {
				it.err = err
				return false
			}
			it.keys = append(it.keys, string(k))
		}
	}
	r := it.resp.Rows[it.pos]
	it.pos++
	fields := make([]row.Value, it.width)
	for i, v := range r.Values {
		if i < it.width {
			fields[i] = wire.ToValue(v)
		}
	}
	it.cur = row.Entry{Series: it.keys[r.Series], TS: r.Ts, Fields: fields}
	it.s.delivered.Store(true)
	return true
}

func (it *remoteIter) Entry() *row.Entry {
	if it.here != nil {
		return it.here.Entry()
	}
	return &it.cur
}

func (it *remoteIter) Err() error {
	if it.here != nil {
		return it.here.Err()
	}
	return it.err
}

func (it *remoteIter) Close() error {
	it.s.close()
	if it.here != nil {
		return it.here.Close()
	}
	return nil
}

// peerColumns is a column scan's answer over peerwire.
type peerColumns struct{ s *peerwire.Stream }

func (p peerColumns) Recv() (*pb.ScanColumnsResponse, error) {
	m := new(pb.ScanColumnsResponse)
	if err := p.s.Recv(m); err != nil {
		return nil, err
	}
	return m, nil
}

// ScanColumns reads one numeric field of a region on its owner (see
// ownerStream), column by column, or its series' rollups (req.Rollup:
// Rolled columns, unless the owner does not know rollups), or those
// aggregated by group (req.Aggregate: Aggregated columns, unless the owner
// does not know aggregates).
func (a *Agent) ScanColumns(ctx context.Context, table string, id layout.RegionID, req scan.Request, emit func(*scan.Column) error) error {
	var s *ownerStream[pb.ScanColumnsResponse]
	deliver := func(c *scan.Column) error {
		s.delivered.Store(true)
		return emit(c)
	}
	preq := &pb.ScanRequest{Table: table, Region: id.String(), Start: req.Start, End: req.End, Tags: wire.FromTags(req.Tags), In: wire.FromTagIns(req.In), Fields: req.Fields,
		Rollup: wire.FromRollup(req.Rollup), Aggregate: wire.FromAggregate(req.Aggregate)}
	s = newOwnerStream(a, ctx, id, func() error {
		return a.eng.ScanRegionColumns(ctx, table, id, req, deliver)
	}, func(ctx context.Context, c pb.DatanodeClient, addr string) (recver[pb.ScanColumnsResponse], error) {
		if p := a.opts.Peer; p != nil && p.Supported(addr) {
			st, err := p.Call(ctx, addr, peerwire.ScanColumns, preq)
			if err == nil {
				a.columnScans.WithLabelValues("peerwire").Inc()
				return peerColumns{st}, nil
			}
			if !errors.Is(err, peerwire.ErrUnsupported) {
				return nil, err
			}
		}
		a.columnScans.WithLabelValues("grpc").Inc()
		return c.ScanColumns(ctx, preq)
	})
	defer s.close()
	var col scan.Column
	for {
		m, err := s.Recv()
		if err == io.EOF || errors.Is(err, errHere) {
			return nil
		}
		if err != nil {
			return err
		}
		kind, ok := row.ParseKind(m.Type)
		if !ok && len(m.Columns) > 0 {
			return fmt.Errorf("scan region %s on %s: columns of unknown type %q", id, s.addr, m.Type)
		}
		// Rolled and aggregated only if the owner says so: one older than
		// rollups sends samples, which the caller rolls up, one older
		// than aggregates series, which the caller aggregates.
		col.Kind, col.Rolled, col.Aggregated = kind, m.Rolled, m.Aggregated
		for _, c := range m.Columns {
			if err := wire.ToColumn(c, &col); err != nil {
				return fmt.Errorf("scan region %s on %s: %w", id, s.addr, err)
			}
			if err := deliver(&col); err != nil {
				return err
			}
		}
	}
}
