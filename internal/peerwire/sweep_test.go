package peerwire

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A call's context behaves as the context package's own to what derives
// from it: the deadline is reported, a derived context ends with the
// call's error (a deadline's included) and without a goroutine of its own,
// context.Cause and AfterFunc follow it.
func TestCallContextAsAParent(t *testing.T) {
	c := &callContext{done: make(chan struct{}), deadline: time.Now().Add(time.Hour)}
	if d, ok := c.Deadline(); !ok || d != c.deadline {
		t.Fatalf("Deadline %v %v", d, ok)
	}
	// A derived deadline later than the call's arms no timer of its own:
	// the derived context takes the call's.
	later, cancelLater := context.WithTimeout(c, 2*time.Hour)
	defer cancelLater()
	if d, _ := later.Deadline(); d != c.deadline {
		t.Errorf("a derived context's deadline %v, want the call's %v", d, c.deadline)
	}
	child, cancelChild := context.WithCancel(c)
	defer cancelChild()
	ran := make(chan struct{})
	context.AfterFunc(c, func() { close(ran) })
	stopped := context.AfterFunc(c, func() { t.Error("a stopped AfterFunc ran") })
	if !stopped() {
		t.Fatal("stop before the end: false, want true")
	}
	// A child cancelled before the call ends leaves the call's list: its
	// stop ran.
	gone, cancelGone := context.WithCancel(c)
	cancelGone()
	if !errors.Is(gone.Err(), context.Canceled) || c.Err() != nil {
		t.Fatalf("a child cancelled on its own: %v; the call: %v", gone.Err(), c.Err())
	}

	c.cancel(context.DeadlineExceeded)
	c.cancel(context.Canceled) // the first error stays
	<-child.Done()
	<-later.Done()
	<-ran
	for name, ctx := range map[string]context.Context{"call": c, "child": child, "later": later} {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			t.Errorf("%s: Err %v, Cause %v; want the deadline's", name, ctx.Err(), context.Cause(ctx))
		}
	}
	// After the end, an AfterFunc runs at once and cannot be stopped.
	late := make(chan struct{})
	stop := c.AfterFunc(func() { close(late) })
	<-late
	if stop() {
		t.Error("stop after the end: true, want false")
	}
}

// A server's sweep stops once calls stop coming, and a call that runs past
// its deadline is cancelled by it though no timer of its own was armed; a
// handler's context is done once its call has ended.
func TestSweepCancelsAtTheDeadlineAndStops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	handed := make(chan context.Context, 2)
	srv := NewServer(ServerOptions{Handlers: map[byte]Handler{1: func(ctx context.Context, req []byte, send func(proto.Message) error) error {
		handed <- ctx
		if len(req) > 0 { // wait for the deadline
			<-ctx.Done()
			return ctx.Err()
		}
		return send(wrapperspb.String("quick"))
	}}})
	gln := srv.Listener(ln)
	defer gln.Close()
	cl := NewClient(ClientOptions{})
	defer cl.Close()

	var got wrapperspb.StringValue
	if err := cl.Unary(context.Background(), ln.Addr().String(), 1, &wrapperspb.StringValue{}, &got); err != nil || got.Value != "quick" {
		t.Fatalf("a quick call: %q %v", got.Value, err)
	}
	if ctx := <-handed; !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("a handler's context after its call: %v, want Canceled", ctx.Err())
	}
	// A server-side deadline only: the client's own is an hour.
	srvCtx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	began := time.Now()
	s, err := cl.Call(srvCtx, ln.Addr().String(), 1, wrapperspb.String("wait"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := <-handed
	if d, ok := ctx.Deadline(); !ok || d.Before(began.Add(59*time.Minute)) {
		t.Fatalf("the handler's deadline %v %v, want about an hour on", d, ok)
	}
	// Bring the deadline near, as a short timeout would have set it.
	srv.cmu.Lock()
	for c := range srv.calls {
		c.ctx.deadline = time.Now().Add(30 * time.Millisecond)
	}
	srv.cmu.Unlock()
	select {
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("ended by %v, want DeadlineExceeded", ctx.Err())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sweep did not cancel a call past its deadline within 30 s")
	}
	var m wrapperspb.StringValue
	for s.Recv(&m) == nil {
	}
	// No call left: the sweep stops (within a sweep or two; polled, as
	// nothing signals it).
	deadline := time.Now().Add(30 * time.Second)
	for {
		srv.cmu.Lock()
		ticking, n := srv.ticking, len(srv.calls)
		srv.cmu.Unlock()
		if !ticking && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still sweeping 30 s after the last call (%d calls)", n)
		}
		time.Sleep(sweepEvery)
	}
	srv.Close()
}
