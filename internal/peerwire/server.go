package peerwire

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/stratadb/strata/internal/auth"
)

// Handler answers a call: req is the request's bytes (the handler's own),
// send sends one message of the answer. The error it returns is the
// call's status (a gRPC status error keeps its code).
type Handler func(ctx context.Context, req []byte, send func(proto.Message) error) error

// ServerOptions configure a Server.
type ServerOptions struct {
	TLS      *tls.Config // nil: plaintext
	Token    auth.Token  // checked in the hello, when enabled
	Handlers map[byte]Handler
	// Count, if set, is told the bytes of every frame of a call (the
	// request sent or received, the answer's messages and end).
	Count  func(direction string, method byte, n int)
	Logger *slog.Logger
}

// handshakeTimeout bounds the magic, TLS and hello of a new connection.
const handshakeTimeout = 10 * time.Second

// Server serves peerwire connections found on a listener it shares with
// gRPC (Listener).
type Server struct {
	o      ServerOptions
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	cmu     sync.Mutex
	calls   map[*call]struct{} // running (sweep.go)
	begun   int                // calls begun since the last sweep
	ticking bool               // a sweep is to come
	sweepT  *time.Timer

	mu       sync.Mutex
	conns    map[*serverConn]struct{}
	gone     chan struct{} // closed, and replaced, when a connection ends
	lns      []*splitListener
	draining bool // Shutdown: each connection closes once idle
	closed   bool
	wg       sync.WaitGroup // every goroutine of the server
}

// NewServer makes a server; Listener starts it.
func NewServer(o ServerOptions) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{o: o, ctx: ctx, cancel: cancel, calls: map[*call]struct{}{}, conns: map[*serverConn]struct{}{}, gone: make(chan struct{})}
}

// Listener accepts connections on ln: those that open with Magic the
// server serves, every other it hands on through the listener it returns
// (for the gRPC server). Closing that listener, or the server, closes ln.
func (s *Server) Listener(ln net.Listener) net.Listener {
	l := &splitListener{ln: ln, conns: make(chan accepted), done: make(chan struct{})}
	s.mu.Lock()
	s.lns = append(s.lns, l)
	s.mu.Unlock()
	s.wg.Add(1)
	go s.accept(l)
	return l
}

type accepted struct {
	c   net.Conn
	err error
}

// splitListener is what a gRPC server accepts from: the connections that
// are not peerwire's.
type splitListener struct {
	ln    net.Listener
	conns chan accepted
	done  chan struct{}
	once  sync.Once
}

func (l *splitListener) Accept() (net.Conn, error) {
	select {
	case a := <-l.conns:
		return a.c, a.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *splitListener) Close() error {
	err := net.ErrClosed
	l.once.Do(func() { close(l.done); err = l.ln.Close() })
	return err
}

func (l *splitListener) Addr() net.Addr { return l.ln.Addr() }

// accept takes ln's connections and sorts each by its first bytes, each in
// a goroutine of its own: a client slow to send them holds up no other.
func (s *Server) accept(l *splitListener) {
	defer s.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			var temp interface{ Temporary() bool }
			if errors.As(err, &temp) && temp.Temporary() {
				// Out of file descriptors and the like: gRPC's Serve
				// backs off and accepts again.
				select {
				case l.conns <- accepted{err: err}:
					continue
				case <-l.done:
					return
				}
			}
			select {
			case l.conns <- accepted{err: err}:
			case <-l.done:
			}
			return
		}
		s.wg.Add(1)
		go s.sort(l, c)
	}
}

// sort reads a connection's first bytes: Magic makes it peerwire's, any
// other goes to gRPC with them put back.
func (s *Server) sort(l *splitListener, c net.Conn) {
	defer s.wg.Done()
	var head [len(Magic)]byte
	_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	stop := context.AfterFunc(s.ctx, func() { c.Close() }) // Close does not wait out the deadline
	n, err := io.ReadFull(c, head[:])
	stop()
	_ = c.SetReadDeadline(time.Time{})
	if err == nil && string(head[:]) == Magic {
		s.serve(c)
		return
	}
	// gRPC sets a user timeout on the TCP connections it accepts, but only
	// where it sees a *net.TCPConn, which the wrapper hides: set here.
	setUserTimeout(c, grpcUserTimeout)
	select {
	case l.conns <- accepted{c: &prefixConn{Conn: c, head: head[:n]}}:
	case <-l.done:
		c.Close()
	}
}

// prefixConn is a connection whose first bytes were read already.
type prefixConn struct {
	net.Conn
	head []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// serverConn is one peerwire connection being served.
type serverConn struct {
	nc   net.Conn
	busy bool // a call is running; s.mu
}

// serve runs a connection: the handshake, then calls one at a time, each
// read and run on this goroutine. A call that runs past watchAfter is
// watched (sweep.go): the connection's end (the client cancelled) cancels
// it.
func (s *Server) serve(nc net.Conn) {
	sc := &serverConn{nc: nc}
	s.mu.Lock()
	if s.closed || s.draining {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.conns[sc] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, sc)
		close(s.gone)
		s.gone = make(chan struct{})
		s.mu.Unlock()
		nc.Close()
	}()

	_ = nc.SetDeadline(time.Now().Add(handshakeTimeout))
	c := nc
	if s.o.TLS != nil {
		tc := tls.Server(nc, s.o.TLS)
		if err := tc.HandshakeContext(s.ctx); err != nil {
			s.o.Logger.Debug("peerwire: TLS handshake", "from", nc.RemoteAddr().String(), "err", err)
			return
		}
		c = tc
	}
	rd := bufio.NewReaderSize(c, 16<<10)
	w := bufio.NewWriterSize(c, 32<<10)
	var buf []byte
	typ, p, err := readFrame(rd, &buf, maxHello)
	if err != nil || typ != frameHello {
		return
	}
	if err := s.hello(p); err != nil {
		_, _ = w.Write(appendFrame(nil, frameReady, statusBytes(err)))
		_ = w.Flush()
		return
	}
	if _, err := w.Write(appendFrame(nil, frameReady)); err != nil || w.Flush() != nil {
		return
	}
	_ = nc.SetDeadline(time.Time{})

	for {
		// Each call is read into a buffer of its own, which the handler
		// gets: a forwarded write's frame can be megabytes, which a
		// buffer kept for the connection would hold for as long as the
		// connection lives.
		var buf []byte
		typ, p, err := readFrame(rd, &buf, MaxFrame)
		if err != nil || typ != frameCall || len(p) < 2 {
			return
		}
		if !s.begin(sc) {
			return
		}
		err = s.call(nc, rd, w, p)
		if !s.end(sc) || err != nil {
			return
		}
	}
}

// hello checks a hello's version and token.
func (s *Server) hello(p []byte) error {
	if len(p) < 1 || p[0] != version {
		return status.Errorf(codes.Unimplemented, "peerwire: protocol version %v, this datanode speaks %d", p[:min(len(p), 1)], version)
	}
	if s.o.Token.Enabled() && !s.o.Token.Match(string(p[1:])) {
		return status.Error(codes.Unauthenticated, auth.ErrUnauthenticated.Error())
	}
	return nil
}

// begin marks sc busy with a call, unless the server is draining.
func (s *Server) begin(sc *serverConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc.busy = !s.draining && !s.closed
	return sc.busy
}

// end marks sc idle, and says whether it stays open.
func (s *Server) end(sc *serverConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc.busy = false
	return !s.draining && !s.closed
}

// call runs one call, p its frame's payload (read from rd, nc's), and
// writes its answer to w; an error is the connection's (it is then
// closed).
func (s *Server) call(nc net.Conn, rd *bufio.Reader, w *bufio.Writer, p []byte) error {
	method := p[0]
	timeout, n := binary.Uvarint(p[1:])
	if n <= 0 {
		return ErrProtocol
	}
	req := p[1+n:]
	if s.o.Count != nil {
		s.o.Count("received", method, len(p)+5)
	}
	// The answer's writes (its messages, the alive frames, its end) under
	// mu: the alive frames come from a timer, which a call that runs long
	// enough to be watched starts (the sweep).
	var mu sync.Mutex
	var werr error // the connection's: the answer could not be written
	var frame []byte
	ended := false
	var alive *time.Timer
	var arm func()
	arm = func() {
		alive = time.AfterFunc(aliveEvery, func() {
			mu.Lock()
			defer mu.Unlock()
			if ended || werr != nil {
				return
			}
			if _, werr = w.Write(aliveFrame); werr == nil {
				werr = w.Flush()
			}
			arm()
		})
	}
	c := s.beginCall(nc, rd, timeout, func() {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			arm()
		}
	})
	send := func(m proto.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if werr != nil {
			return werr
		}
		var err error
		frame, err = proto.MarshalOptions{}.MarshalAppend(append(frame[:0], 0, 0, 0, 0, frameMsg), m)
		if err != nil {
			return status.Errorf(codes.Internal, "peerwire: %v", err)
		}
		binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
		if _, werr = w.Write(frame); werr != nil {
			return status.Error(codes.Canceled, "peerwire: the connection ended")
		}
		if s.o.Count != nil {
			s.o.Count("sent", method, len(frame))
		}
		return nil
	}
	var err error
	if h := s.o.Handlers[method]; h == nil {
		err = status.Errorf(codes.Unimplemented, "peerwire: no method %d", method)
	} else {
		err = h(c.ctx, req, send)
	}
	gone := s.endCall(c)
	mu.Lock()
	defer mu.Unlock()
	ended = true
	if alive != nil {
		alive.Stop()
	}
	if werr != nil {
		return werr
	}
	if gone {
		return io.ErrUnexpectedEOF // the client ended the connection
	}
	end := appendFrame(frame[:0], frameEnd, statusBytes(err))
	if s.o.Count != nil {
		s.o.Count("sent", method, len(end))
	}
	if _, err := w.Write(end); err != nil {
		return err
	}
	return w.Flush()
}

// aliveFrame says a call is still running.
var aliveFrame = appendFrame(nil, frameAlive)

// statusBytes is err's gRPC status, marshalled; nothing for nil.
func statusBytes(err error) []byte {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		st = status.FromContextError(err)
	}
	b, merr := proto.Marshal(st.Proto())
	if merr != nil {
		b, _ = proto.Marshal(status.New(codes.Internal, err.Error()).Proto())
	}
	return b
}

// Shutdown lets the calls running end, up to ctx, and closes every
// connection: idle ones at once, busy ones when their call has ended.
// Close then stops what is left.
func (s *Server) Shutdown(ctx context.Context) {
	s.mu.Lock()
	s.draining = true
	for sc := range s.conns {
		if !sc.busy {
			sc.nc.Close()
		}
	}
	s.mu.Unlock()
	for {
		s.mu.Lock()
		n, gone := len(s.conns), s.gone
		s.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-gone:
		case <-ctx.Done():
			s.Close()
			return
		}
	}
	s.Close()
}

// Close cancels every call, closes every connection and the listeners
// from Listener, and waits for the server's goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for _, l := range s.lns {
		_ = l.Close()
	}
	for sc := range s.conns {
		sc.nc.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.stopSweeps()
	s.wg.Wait()
}
