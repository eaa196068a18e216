package peerwire

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/stratadb/strata/internal/auth"
	"github.com/stratadb/strata/internal/freelist"
)

// ErrUnsupported: the peer closed the connection at the magic, as a
// datanode older than peerwire does; the caller uses gRPC instead.
var ErrUnsupported = errors.New("peerwire: the peer does not speak peerwire")

// ClientOptions configure a Client.
type ClientOptions struct {
	TLS   *tls.Config // nil: plaintext
	Token auth.Token  // sent in the hello
	// Count, if set, is told the bytes of every frame of a call.
	Count func(direction string, method byte, n int)
	// Idle is how many idle connections are kept a peer (default 64).
	Idle int
}

// unsupportedFor is how long a peer that did not speak peerwire is not
// asked again (it may be upgraded).
const unsupportedFor = time.Minute

// Client makes calls to peers, keeping idle connections for the next ones.
type Client struct {
	o           ClientOptions
	mu          sync.Mutex
	idle        map[string][]*clientConn
	unsupported map[string]time.Time
	closed      bool
}

// NewClient makes a client.
func NewClient(o ClientOptions) *Client {
	if o.Idle <= 0 {
		o.Idle = 64
	}
	if o.TLS != nil && o.TLS.ClientSessionCache == nil {
		// A connection dialled beyond the idle ones resumes a session
		// instead of a full handshake.
		o.TLS = o.TLS.Clone()
		o.TLS.ClientSessionCache = tls.NewLRUClientSessionCache(256)
	}
	return &Client{o: o, idle: map[string][]*clientConn{}, unsupported: map[string]time.Time{}}
}

type clientConn struct {
	nc  net.Conn // closing it ends the connection, whatever wraps it
	rd  *bufio.Reader
	w   *bufio.Writer
	buf []byte
	// readBy is the read deadline set on nc: moved on only once less than
	// rearmBelow of it is left (readWithin).
	readBy time.Time
}

// rearmBelow: a read deadline is moved on, to silence from now, only once
// less than this is left of it, so a connection is given up after 10 to
// 15 s without a frame. Setting a deadline re-arms a runtime timer, and
// re-arming one that is the process's next to fire wakes another thread
// to watch it: once a call, on a node that sat idle, that was a thread
// woken for nothing (docs/performance.md, "Timers that wake a thread").
const rearmBelow = silence - aliveEvery

// readWithin makes sure at least rearmBelow is left before the read deadline.
func (cc *clientConn) readWithin() {
	now := time.Now()
	if cc.readBy.Sub(now) >= rearmBelow {
		return
	}
	cc.readBy = now.Add(silence)
	_ = cc.nc.SetReadDeadline(cc.readBy)
}

// Supported says whether addr is worth a call: false for a while after it
// closed a connection at the magic.
func (c *Client) Supported(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.unsupported[addr]
	if ok && time.Since(t) > unsupportedFor {
		delete(c.unsupported, addr)
		return true
	}
	return !ok
}

// get returns an idle connection to addr (reused true) or a new one.
func (c *Client) get(ctx context.Context, addr string) (cc *clientConn, reused bool, err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, false, status.Error(codes.Canceled, "peerwire: client closed")
	}
	if idle := c.idle[addr]; len(idle) > 0 {
		cc = idle[len(idle)-1]
		c.idle[addr] = idle[:len(idle)-1]
		c.mu.Unlock()
		return cc, true, nil
	}
	c.mu.Unlock()
	cc, err = c.dial(ctx, addr)
	return cc, false, err
}

// put keeps an idle connection for the next call, or closes it.
func (c *Client) put(addr string, cc *clientConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.idle[addr]) >= c.o.Idle {
		cc.nc.Close()
		return
	}
	c.idle[addr] = append(c.idle[addr], cc)
}

// drop closes addr's idle connections: one was found closed by the peer
// (restarted, or shut down), and so probably were the others.
func (c *Client) drop(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cc := range c.idle[addr] {
		cc.nc.Close()
	}
	delete(c.idle, addr)
}

// dial opens and readies a connection: the magic, TLS, the hello.
func (c *Client) dial(ctx context.Context, addr string) (*clientConn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, unavailable(ctx, err)
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	_ = nc.SetDeadline(time.Now().Add(handshakeTimeout))
	fail := func(err error) (*clientConn, error) {
		nc.Close()
		return nil, err
	}
	if _, err := io.WriteString(nc, Magic); err != nil {
		return fail(unavailable(ctx, err))
	}
	conn := net.Conn(nc)
	if c.o.TLS != nil {
		cfg := c.o.TLS
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			if ctx.Err() == nil && isEOF(err) {
				return fail(c.markUnsupported(addr))
			}
			return fail(unavailable(ctx, err))
		}
		conn = tc
	}
	cc := &clientConn{nc: nc, rd: bufio.NewReaderSize(conn, 32<<10), w: bufio.NewWriterSize(conn, 4<<10)}
	if _, err := cc.w.Write(appendFrame(nil, frameHello, []byte{version}, []byte(c.o.Token.Secret()))); err != nil || cc.w.Flush() != nil {
		return fail(unavailable(ctx, errors.Join(err, cc.w.Flush())))
	}
	typ, p, err := readFrame(cc.rd, &cc.buf, maxHello)
	switch {
	case err != nil && ctx.Err() != nil: // the caller gave up: says nothing of the peer
		return fail(unavailable(ctx, err))
	case isEOF(err):
		return fail(c.markUnsupported(addr))
	case err != nil:
		return fail(unavailable(ctx, err))
	case typ != frameReady:
		return fail(status.Errorf(codes.Internal, "%v: frame %d for the hello's answer", ErrProtocol, typ))
	case len(p) > 0:
		return fail(statusError(p))
	}
	_ = nc.SetDeadline(time.Time{})
	return cc, nil
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err)
}

func (c *Client) markUnsupported(addr string) error {
	c.mu.Lock()
	c.unsupported[addr] = time.Now()
	c.mu.Unlock()
	return fmt.Errorf("%w: %s", ErrUnsupported, addr)
}

// unavailable is a failed connection's error, as gRPC would give it: the
// context's if it ended, else Unavailable (worth a retry).
func unavailable(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Unavailable, "peerwire: %v", err)
}

// statusError is the error an end or ready frame's status holds.
func statusError(p []byte) error {
	var sp spb.Status
	if err := proto.Unmarshal(p, &sp); err != nil {
		return status.Errorf(codes.Internal, "%v: a status that does not decode: %v", ErrProtocol, err)
	}
	return status.ErrorProto(&sp)
}

// Stream is a call's answer.
type Stream struct {
	c      *Client
	cc     *clientConn
	ctx    context.Context
	addr   string
	method byte
	stop   func() bool // stops closing cc when ctx ends
	done   bool
	// A reused connection the peer closed while idle fails at the first
	// read: the call is sent again on a new one. Calls are reads, or a
	// forwarded write, which landing twice leaves as landing once (its
	// points written again, values and all).
	frame  []byte
	reused bool
	got    bool
	err    error // what Recv answers once done: io.EOF, or the call's error
}

// Call sends a call of method to addr. ctx bounds the call (its deadline
// goes to the server too); ending it closes the connection.
func (c *Client) Call(ctx context.Context, addr string, method byte, req proto.Message) (*Stream, error) {
	var timeout uint64
	if d, ok := ctx.Deadline(); ok {
		timeout = uint64(max(time.Until(d), 1))
	}
	// The request is marshalled into the frame: a forwarded write's batch
	// is copied once, not twice.
	frame := getFrame(4 + 2 + binary.MaxVarintLen64 + proto.Size(req))
	frame = binary.AppendUvarint(append(frame[:4], frameCall, method), timeout)
	frame, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(frame, req)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "peerwire: %v", err)
	}
	if len(frame)-4 > MaxFrame {
		putFrame(frame)
		// The peer would refuse it as a protocol error; gRPC's client
		// says this of a message over the server's limit.
		return nil, status.Errorf(codes.ResourceExhausted, "peerwire: a request of %d bytes, over the %d a frame may hold", len(frame)-4, MaxFrame)
	}
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	s := &Stream{c: c, ctx: ctx, addr: addr, method: method, frame: frame}
	if err := s.send(); err != nil {
		return nil, err
	}
	return s, nil
}

// send sends the call on an idle connection or a new one.
func (s *Stream) send() error {
	for {
		cc, reused, err := s.c.get(s.ctx, s.addr)
		if err != nil {
			return err
		}
		s.cc, s.reused, s.done = cc, reused, false
		s.stop = context.AfterFunc(s.ctx, func() { cc.nc.Close() })
		_, err = cc.w.Write(s.frame)
		if err == nil {
			err = cc.w.Flush()
		}
		if err != nil {
			s.fail()
			if reused && s.ctx.Err() == nil {
				continue // the peer had closed it while idle
			}
			return unavailable(s.ctx, err)
		}
		if s.c.o.Count != nil {
			s.c.o.Count("sent", s.method, len(s.frame))
		}
		return nil
	}
}

// Unary makes a call whose answer is one message, read into resp.
func (c *Client) Unary(ctx context.Context, addr string, method byte, req, resp proto.Message) error {
	s, err := c.Call(ctx, addr, method, req)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.Recv(resp); err != nil {
		if err == io.EOF {
			return status.Errorf(codes.Internal, "%v: method %d ended without its answer", ErrProtocol, method)
		}
		return err
	}
	switch err := s.Recv(resp.ProtoReflect().New().Interface()); err {
	case io.EOF:
		return nil
	case nil:
		return status.Errorf(codes.Internal, "%v: method %d answered more than one message", ErrProtocol, method)
	default:
		return err
	}
}

// Recv reads the next message of the answer into m; io.EOF at its end, or
// the call's error (a gRPC status error, as gRPC's client gives).
func (s *Stream) Recv(m proto.Message) error {
	if s.done {
		return s.err
	}
	err := s.recv(m)
	if err != nil && s.err == nil {
		s.err = err
	}
	return err
}

func (s *Stream) recv(m proto.Message) error {
	typ, p, err := s.read()
	for err != nil && s.reused && !s.got && isEOF(err) && s.ctx.Err() == nil {
		s.fail()
		s.c.drop(s.addr)
		if err := s.send(); err != nil {
			if errors.Is(err, ErrUnsupported) {
				// The peer closed the new connection at the magic too:
				// restarting, or older now. The caller's retry asks again
				// (over gRPC, if the peer stays Unsupported).
				err = status.Errorf(codes.Unavailable, "%v", err)
			}
			s.err = err
			return err
		}
		typ, p, err = s.read()
	}
	if err != nil {
		s.fail()
		if errors.Is(err, os.ErrDeadlineExceeded) && s.ctx.Err() == nil {
			return status.Errorf(codes.Unavailable, "peerwire: no word from %s in %v", s.addr, rearmBelow)
		}
		return unavailable(s.ctx, err)
	}
	s.got = true
	if s.c.o.Count != nil {
		s.c.o.Count("received", s.method, len(p)+5)
	}
	switch typ {
	case frameMsg:
		if err := proto.Unmarshal(p, m); err != nil {
			s.fail()
			return status.Errorf(codes.Internal, "peerwire: a message that does not decode: %v", err)
		}
		return nil
	case frameEnd:
		err := io.EOF
		if len(p) > 0 {
			err = statusError(p)
			if s.ctx.Err() != nil {
				err = status.FromContextError(s.ctx.Err()).Err() // as gRPC's client says
			}
		}
		s.done = true
		// The read deadline stays: an idle connection is not read, and
		// the next call's read moves it on if it must (readWithin).
		if s.stop() {
			s.c.put(s.addr, s.cc)
		} else {
			s.cc.nc.Close()
		}
		return err
	default:
		s.fail()
		return status.Errorf(codes.Internal, "%v: frame %d in an answer", ErrProtocol, typ)
	}
}

// read reads the answer's next frame that is not an alive one, within
// rearmBelow to silence of the last.
func (s *Stream) read() (byte, []byte, error) {
	for {
		s.cc.readWithin()
		typ, p, err := readFrame(s.cc.rd, &s.cc.buf, MaxFrame)
		if err != nil || typ != frameAlive {
			return typ, p, err
		}
		if s.c.o.Count != nil {
			s.c.o.Count("received", s.method, len(p)+5)
		}
	}
}

// Close abandons the answer if it has not ended (its connection is closed,
// which cancels the call on the peer).
func (s *Stream) Close() {
	if !s.done {
		s.fail()
		s.err = status.Error(codes.Canceled, "peerwire: the call was abandoned")
	}
	if s.frame != nil { // sent again only while the call runs
		putFrame(s.frame)
		s.frame = nil
	}
}

// frames are calls' request frames, kept for the next calls: a forwarded
// write's is its batch (80 KB of a TSBS request's share), fresh memory
// each call else.
var frames = freelist.New[[]byte](16)

// maxKeptFrame bounds a frame kept for the next calls (16 kept: at most
// 16 MiB held).
const maxKeptFrame = 1 << 20

// getFrame returns an empty frame with room for n bytes.
func getFrame(n int) []byte {
	f, _ := frames.Get()
	return slices.Grow(f[:0], n)
}

func putFrame(f []byte) {
	if cap(f) <= maxKeptFrame {
		frames.Put(f)
	}
}

func (s *Stream) fail() {
	s.done = true
	s.stop()
	s.cc.nc.Close()
}

// Close closes the idle connections; calls running go on.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, idle := range c.idle {
		for _, cc := range idle {
			cc.nc.Close()
		}
	}
	c.idle = nil
}
