package peerwire_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/stratadb/strata/internal/auth"
	"github.com/stratadb/strata/internal/peerwire"
	"github.com/stratadb/strata/internal/tlsutil"
)

const echo, block, fail, keep, slow byte = 1, 2, 3, 4, 5

// started is what the handlers saw: calls begun, and ended by their ctx.
type started struct {
	kept      [][]byte // keep's requests, as the handler got them
	calls     atomic.Int32
	cancelled chan error
	deadline  chan time.Time
	accepted  atomic.Int32 // connections, peerwire's and gRPC's
}

// countListener counts the connections it accepts.
type countListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// serve starts a gRPC server (health only) and a peerwire server on one
// listener: echo answers its request's string n times (n its length),
// block waits for its ctx, fail returns a status error, keep keeps its
// request's bytes (st.kept) and answers one empty string, slow answers its
// request once after 250 ms (past the time a call runs unwatched).
func serve(t *testing.T, o peerwire.ServerOptions, grpcOpts ...grpc.ServerOption) (addr string, st *started, srv *peerwire.Server) {
	t.Helper()
	st = &started{cancelled: make(chan error, 10), deadline: make(chan time.Time, 10)}
	o.Handlers = map[byte]peerwire.Handler{
		echo: func(ctx context.Context, req []byte, send func(proto.Message) error) error {
			st.calls.Add(1)
			var m wrapperspb.StringValue
			if err := proto.Unmarshal(req, &m); err != nil {
				return err
			}
			for range len(m.Value) {
				if err := send(&m); err != nil {
					return err
				}
			}
			return nil
		},
		block: func(ctx context.Context, req []byte, send func(proto.Message) error) error {
			st.calls.Add(1)
			d, _ := ctx.Deadline()
			st.deadline <- d
			<-ctx.Done()
			st.cancelled <- ctx.Err()
			return ctx.Err()
		},
		fail: func(ctx context.Context, req []byte, send func(proto.Message) error) error {
			st.calls.Add(1)
			return status.Error(codes.ResourceExhausted, "too much")
		},
		slow: func(ctx context.Context, req []byte, send func(proto.Message) error) error {
			st.calls.Add(1)
			var m wrapperspb.StringValue
			if err := proto.Unmarshal(req, &m); err != nil {
				return err
			}
			select {
			case <-time.After(250 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			return send(&m)
		},
		keep: func(ctx context.Context, req []byte, send func(proto.Message) error) error {
			st.calls.Add(1)
			st.kept = append(st.kept, req) // calls on one connection run one at a time
			return send(wrapperspb.String(""))
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv = peerwire.NewServer(o)
	g := grpc.NewServer(grpcOpts...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	gln := srv.Listener(countListener{ln, &st.accepted})
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(gln) }()
	t.Cleanup(func() { g.Stop(); srv.Close(); <-served })
	return ln.Addr().String(), st, srv
}

func recvAll(t *testing.T, s *peerwire.Stream) ([]string, error) {
	t.Helper()
	var got []string
	for {
		var m wrapperspb.StringValue
		err := s.Recv(&m)
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got = append(got, m.Value)
	}
}

func TestCallsAndGRPCShareThePort(t *testing.T) {
	addr, st, _ := serve(t, peerwire.ServerOptions{})
	var sent, received atomic.Int64
	c := peerwire.NewClient(peerwire.ClientOptions{Count: func(dir string, _ byte, n int) {
		if dir == "sent" {
			sent.Add(int64(n))
		} else {
			received.Add(int64(n))
		}
	}})
	defer c.Close()
	ctx := context.Background()
	for i := range 20 { // one connection, reused
		s, err := c.Call(ctx, addr, echo, wrapperspb.String(strings.Repeat("x", i%5+1)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := recvAll(t, s)
		if err != nil || len(got) != i%5+1 {
			t.Fatalf("call %d: %d messages, %v", i, len(got), err)
		}
		if err := s.Recv(new(wrapperspb.StringValue)); err != io.EOF {
			t.Fatalf("after the end: %v", err)
		}
	}
	if st.calls.Load() != 20 || sent.Load() == 0 || received.Load() == 0 {
		t.Fatalf("%d calls, %d bytes sent, %d received", st.calls.Load(), sent.Load(), received.Load())
	}
	// gRPC on the same port.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("gRPC beside peerwire: %v", err)
	}
}

func TestErrorsKeepTheirCode(t *testing.T) {
	addr, _, _ := serve(t, peerwire.ServerOptions{})
	c := peerwire.NewClient(peerwire.ClientOptions{})
	defer c.Close()
	for _, m := range []struct {
		method byte
		code   codes.Code
	}{{fail, codes.ResourceExhausted}, {9, codes.Unimplemented}} {
		s, err := c.Call(context.Background(), addr, m.method, wrapperspb.String("a"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := recvAll(t, s); status.Code(err) != m.code {
			t.Fatalf("method %d: %v, want %s", m.method, err, m.code)
		}
		if err := s.Recv(new(wrapperspb.StringValue)); status.Code(err) != m.code {
			t.Fatalf("method %d, Recv again: %v, want %s", m.method, err, m.code)
		}
	}
	// The connection is still good after an error.
	s, err := c.Call(context.Background(), addr, echo, wrapperspb.String("ab"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := recvAll(t, s); err != nil || len(got) != 2 {
		t.Fatalf("%v %v", got, err)
	}
}

// TestCancelAndDeadlineReachTheHandler, plain and over TLS: a call
// cancelled by its caller is cancelled on the server (the client closes
// the connection; the server's watcher sees it end), and a deadline
// travels to the server and ends the call on both sides.
func TestCancelAndDeadlineReachTheHandler(t *testing.T) {
	for _, withTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "tls"}[withTLS], func(t *testing.T) {
			var so peerwire.ServerOptions
			var co peerwire.ClientOptions
			var gopts []grpc.ServerOption
			if withTLS {
				stls, ctls := tlsConfigs(t)
				so.TLS, co.TLS = stls, ctls
				gopts = append(gopts, grpc.Creds(credentials.NewTLS(stls)))
			}
			cancelAndDeadline(t, so, co, gopts...)
		})
	}
}

func cancelAndDeadline(t *testing.T, so peerwire.ServerOptions, co peerwire.ClientOptions, gopts ...grpc.ServerOption) {
	addr, st, _ := serve(t, so, gopts...)
	c := peerwire.NewClient(co)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	s, err := c.Call(ctx, addr, block, wrapperspb.String(""))
	if err != nil {
		t.Fatal(err)
	}
	var m wrapperspb.StringValue
	if d := time.Until(<-st.deadline); d < 59*time.Minute || d > time.Hour {
		t.Fatalf("server's deadline in %v, want about an hour", d)
	}
	cancel()
	select {
	case err := <-st.cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handler ended by %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler was not cancelled within 30 s of its caller")
	}
	if err := s.Recv(&m); status.Code(err) != codes.Canceled {
		t.Fatalf("Recv after cancel: %v", err)
	}
	// A deadline that passes ends the call on both sides.
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	s, err = c.Call(ctx, addr, block, wrapperspb.String(""))
	if err != nil {
		t.Fatal(err)
	}
	<-st.deadline
	if _, err := recvAll(t, s); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("past its deadline: %v", err)
	}
	// Its own deadline, or the connection the client closed at its one.
	if err := <-st.cancelled; !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		t.Fatalf("handler ended by %v", err)
	}
}

func TestTokenIsChecked(t *testing.T) {
	addr, st, _ := serve(t, peerwire.ServerOptions{Token: auth.New("right")})
	for _, tok := range []string{"", "wrong"} {
		c := peerwire.NewClient(peerwire.ClientOptions{Token: auth.New(tok)})
		if _, err := c.Call(context.Background(), addr, echo, wrapperspb.String("a")); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("token %q: %v", tok, err)
		}
		c.Close()
	}
	c := peerwire.NewClient(peerwire.ClientOptions{Token: auth.New("right")})
	defer c.Close()
	s, err := c.Call(context.Background(), addr, echo, wrapperspb.String("a"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := recvAll(t, s); err != nil || len(got) != 1 || st.calls.Load() != 1 {
		t.Fatalf("%v %v, %d calls", got, err, st.calls.Load())
	}
}

func tlsConfigs(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	f, err := tlsutil.Generate(t.TempDir(), []string{"127.0.0.1", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := tlsutil.Config{CertFile: f.Node, KeyFile: f.NodeKey, CAFile: f.CA}
	if server, err = cfg.ServerTLS(); err != nil {
		t.Fatal(err)
	}
	if client, err = cfg.ClientTLS(); err != nil {
		t.Fatal(err)
	}
	return server, client
}

func TestTLS(t *testing.T) {
	stls, ctls := tlsConfigs(t)
	addr, _, _ := serve(t, peerwire.ServerOptions{TLS: stls}, grpc.Creds(credentials.NewTLS(stls)))
	c := peerwire.NewClient(peerwire.ClientOptions{TLS: ctls})
	defer c.Close()
	s, err := c.Call(context.Background(), addr, echo, wrapperspb.String("abc"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := recvAll(t, s); err != nil || len(got) != 3 {
		t.Fatalf("%v %v", got, err)
	}
	// A plaintext client is not served.
	plain := peerwire.NewClient(peerwire.ClientOptions{})
	defer plain.Close()
	if _, err := plain.Call(context.Background(), addr, echo, wrapperspb.String("a")); err == nil {
		t.Fatal("a plaintext call to a TLS server succeeded")
	}
	// gRPC over TLS on the same port.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(ctls)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("gRPC over TLS beside peerwire: %v", err)
	}
}

// A peer without peerwire (a gRPC server alone, as an older datanode is)
// closes the connection at the magic: ErrUnsupported, remembered, at once.
func TestOlderPeerIsUnsupported(t *testing.T) {
	for _, withTLS := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var opts []grpc.ServerOption
		var ctls *tls.Config
		if withTLS {
			var stls *tls.Config
			stls, ctls = tlsConfigs(t)
			opts = append(opts, grpc.Creds(credentials.NewTLS(stls)))
		}
		g := grpc.NewServer(opts...)
		go func() { _ = g.Serve(ln) }()
		c := peerwire.NewClient(peerwire.ClientOptions{TLS: ctls})
		addr := ln.Addr().String()
		began := time.Now()
		_, err = c.Call(context.Background(), addr, echo, wrapperspb.String("a"))
		if !errors.Is(err, peerwire.ErrUnsupported) {
			t.Fatalf("tls %v: %v, want ErrUnsupported", withTLS, err)
		}
		if took := time.Since(began); took > 5*time.Second {
			t.Fatalf("tls %v: ErrUnsupported after %v", withTLS, took)
		}
		if c.Supported(addr) {
			t.Fatalf("tls %v: still Supported", withTLS)
		}
		c.Close()
		g.Stop()
	}
}

// A connection the server closed while idle (it restarted) is not a
// failed call: the call goes again on a new connection.
func TestIdleConnectionClosedByTheServer(t *testing.T) {
	addr, st, srv := serve(t, peerwire.ServerOptions{})
	c := peerwire.NewClient(peerwire.ClientOptions{})
	defer c.Close()
	call := func() {
		t.Helper()
		s, err := c.Call(context.Background(), addr, echo, wrapperspb.String("ab"))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := recvAll(t, s); err != nil || len(got) != 2 {
			t.Fatalf("%v %v", got, err)
		}
	}
	call()
	// Shutdown closes idle connections; a new server on the same port
	// takes the next call.
	srv.Shutdown(context.Background())
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv2 := peerwire.NewServer(peerwire.ServerOptions{Handlers: map[byte]peerwire.Handler{echo: func(ctx context.Context, req []byte, send func(proto.Message) error) error {
		st.calls.Add(1)
		var m wrapperspb.StringValue
		_ = proto.Unmarshal(req, &m)
		for range len(m.Value) {
			if err := send(&m); err != nil {
				return err
			}
		}
		return nil
	}}})
	gln := srv2.Listener(ln)
	defer srv2.Close()
	go func() { // gRPC's side, unused: accept until closed
		for {
			c, err := gln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	call()
	if st.calls.Load() != 2 {
		t.Fatalf("%d calls", st.calls.Load())
	}
}

// Shutdown lets a call running end; Close stops every goroutine.
func TestShutdownWaitsForCalls(t *testing.T) {
	base := runtime.NumGoroutine()
	addr, st, srv := serve(t, peerwire.ServerOptions{})
	c := peerwire.NewClient(peerwire.ClientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.Call(ctx, addr, block, wrapperspb.String(""))
	if err != nil {
		t.Fatal(err)
	}
	<-st.deadline
	shut, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Shutdown(shut); close(done) }()
	select {
	case <-done:
		t.Fatal("Shutdown returned with a call running")
	case <-time.After(100 * time.Millisecond): // it must still be waiting
	}
	stop() // its deadline: the call is cancelled
	<-done
	if err := <-st.cancelled; err == nil {
		t.Fatal("the handler was not cancelled")
	}
	if _, err := recvAll(t, s); err == nil {
		t.Fatal("the call ended well after Close")
	}
	c.Close()
	srv.Close()
	for deadline := time.Now().Add(30 * time.Second); runtime.NumGoroutine() > base+2; {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond) // goroutines end without a signal to wait on
	}
}

// Before the token is checked a client cannot make the server take a
// large frame: a hello longer than a few KiB closes the connection.
func TestALargeHelloIsRefused(t *testing.T) {
	addr, st, _ := serve(t, peerwire.ServerOptions{Token: auth.New("right")})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Magic, then a hello frame header claiming 32 MiB.
	if _, err := c.Write(append([]byte(peerwire.Magic), 0x02, 0, 0, 0, 1)); err != nil {
		t.Fatal(err)
	}
	// At once, not at the handshake's deadline (10 s).
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 16)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v: want the connection closed", n, err)
	}
	if st.calls.Load() != 0 {
		t.Fatal("a call ran")
	}
}

// A call cancelled while its connection's hello waits for the answer says
// nothing of the peer: it is not marked unsupported.
func TestCancelledDialLeavesThePeerSupported(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan net.Conn, 1)
	go func() { // reads the magic and the hello (no token: 6 bytes), then never answers
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if _, err := io.ReadFull(c, make([]byte, len(peerwire.Magic)+6)); err == nil {
			got <- c
		}
	}()
	c := peerwire.NewClient(peerwire.ClientOptions{})
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, ln.Addr().String(), echo, wrapperspb.String("a"))
		errc <- err
	}()
	conn := <-got
	defer conn.Close()
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled || errors.Is(err, peerwire.ErrUnsupported) {
		t.Fatalf("%v, want Canceled", err)
	}
	if !c.Supported(ln.Addr().String()) {
		t.Fatal("the peer was marked unsupported for the caller's cancel")
	}
}

// Close does not wait for a connection that has not sent its first bytes.
func TestCloseWithAConnectionBeingSorted(t *testing.T) {
	addr, _, srv := serve(t, peerwire.ServerOptions{})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("STRATA")); err != nil { // part of the magic, then silence
		t.Fatal(err)
	}
	began := time.Now()
	srv.Close()
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("Close took %v (the sort's deadline is 10 s)", took)
	}
}

// A handler that works longer than silence without sending keeps its call
// (alive frames), and the answer then comes whole.
func TestAQuietCallStaysAlive(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 17 s")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := peerwire.NewServer(peerwire.ServerOptions{Handlers: map[byte]peerwire.Handler{echo: func(ctx context.Context, req []byte, send func(proto.Message) error) error {
		select {
		case <-time.After(17 * time.Second): // past the client's 15 s of silence
		case <-ctx.Done():
			return ctx.Err()
		}
		return send(wrapperspb.String("late"))
	}}})
	gln := srv.Listener(ln)
	defer srv.Close()
	defer gln.Close()
	c := peerwire.NewClient(peerwire.ClientOptions{})
	defer c.Close()
	s, err := c.Call(context.Background(), ln.Addr().String(), echo, wrapperspb.String("a"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := recvAll(t, s); err != nil || len(got) != 1 || got[0] != "late" {
		t.Fatalf("%v %v", got, err)
	}
}

// Unary takes an answer of exactly one message: none, or two, is a
// protocol error; a status error keeps its code.
func TestUnary(t *testing.T) {
	addr, st, _ := serve(t, peerwire.ServerOptions{})
	c := peerwire.NewClient(peerwire.ClientOptions{})
	defer c.Close()
	ctx := context.Background()
	for range 2 { // the second on the connection the first left idle
		var got wrapperspb.StringValue
		if err := c.Unary(ctx, addr, echo, wrapperspb.String("a"), &got); err != nil || got.Value != "a" {
			t.Fatalf("one message: %q, %v", got.Value, err)
		}
	}
	for _, s := range []string{"", "ab"} {
		var got wrapperspb.StringValue
		err := c.Unary(ctx, addr, echo, wrapperspb.String(s), &got)
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), peerwire.ErrProtocol.Error()) {
			t.Errorf("%d messages: %v, want a protocol error", len(s), err)
		}
	}
	var got wrapperspb.StringValue
	if err := c.Unary(ctx, addr, fail, wrapperspb.String("a"), &got); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a failed call: %v, want ResourceExhausted", err)
	}
	// A request over a frame's limit is refused before it is sent, as
	// gRPC's client refuses a message over the server's.
	if err := c.Unary(ctx, addr, echo, wrapperspb.String(strings.Repeat("x", peerwire.MaxFrame)), &got); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a request over MaxFrame: %v, want ResourceExhausted", err)
	}
	if n := st.calls.Load(); n != 5 {
		t.Errorf("the server saw %d calls, want 5", n)
	}
}

// A handler's request is its own: the next call on the connection is read
// elsewhere, so a handler may keep it (a forwarded write's batch).
func TestHandlerOwnsItsRequest(t *testing.T) {
	addr, st, _ := serve(t, peerwire.ServerOptions{})
	c := peerwire.NewClient(peerwire.ClientOptions{})
	defer c.Close()
	want := []string{strings.Repeat("a", 100), strings.Repeat("b", 50), strings.Repeat("c", 200)}
	for _, v := range want { // one connection, reused
		if err := c.Unary(context.Background(), addr, keep, wrapperspb.String(v), new(wrapperspb.StringValue)); err != nil {
			t.Fatal(err)
		}
	}
	if len(st.kept) != len(want) {
		t.Fatalf("%d requests kept, want %d", len(st.kept), len(want))
	}
	for i, req := range st.kept {
		var m wrapperspb.StringValue
		if err := proto.Unmarshal(req, &m); err != nil || m.Value != want[i] {
			t.Errorf("request %d as kept: %.20q..., %v; want %.20q...", i, m.Value, err, want[i])
		}
	}
}

// A call that runs long enough to be watched for its connection's end
// leaves the connection as it found it: the next calls on it, plain or
// over TLS, and quick or slow, are answered.
func TestWatchedCallsLeaveTheConnection(t *testing.T) {
	stls, ctls := tlsConfigs(t)
	for _, withTLS := range []bool{false, true} {
		var so peerwire.ServerOptions
		var co peerwire.ClientOptions
		var opts []grpc.ServerOption
		if withTLS {
			so.TLS, co.TLS = stls, ctls
			opts = append(opts, grpc.Creds(credentials.NewTLS(stls)))
		}
		addr, st, _ := serve(t, so, opts...)
		c := peerwire.NewClient(co)
		for i, m := range []byte{slow, echo, slow, slow, echo} {
			want := fmt.Sprintf("call %d", i)
			s, err := c.Call(context.Background(), addr, m, wrapperspb.String(want))
			if err != nil {
				t.Fatalf("tls %v, call %d: %v", withTLS, i, err)
			}
			got, err := recvAll(t, s)
			if err != nil || len(got) == 0 || got[0] != want {
				t.Fatalf("tls %v, call %d: %q %v", withTLS, i, got, err)
			}
		}
		if n := st.accepted.Load(); n != 1 {
			t.Errorf("tls %v: %d connections for five calls one after another, want 1", withTLS, n)
		}
		c.Close()
	}
}
