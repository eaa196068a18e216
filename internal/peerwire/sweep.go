package peerwire

import (
	"bufio"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A call arms no timer of its own. Go's runtime, on arming a timer earlier
// than any other of the running processor's, wakes another thread to watch
// it; on an owner that sat idle between calls, a call's timers (its
// deadline, the watch of its connection, its alive frames) each were the
// process's next, and woke a thread that then went back to sleep: two
// thread runs and about a fifth of an owner's CPU a call
// (docs/performance.md, "A call without timers"). Instead the server
// sweeps the calls running every sweepEvery, with one timer of its own
// that stays armed while calls come: a call past its deadline is
// cancelled (at most a sweep late), and one found running by a sweep at
// least watchAfter after it began has its connection watched for its end
// (which cancels it) and from then sends alive frames.

// sweepEvery is how often the running calls are swept. A call's deadline
// is kept to within it, and a call is watched from between watchAfter and
// watchAfter+sweepEvery after it began. The sweep's own timer costs thread
// wakes too: swept every 10 ms, calls 1 ms apart ran 4.5 times a call
// against 3.4 at 100 ms, as without any timer.
const sweepEvery = 100 * time.Millisecond

// watchAfter is how long a call runs before its connection is watched for
// its end. Most calls are done well before: reading on another goroutine
// from the start cost a goroutine's hand-off a call, about a tenth of an
// owner's CPU for a small scan (docs/performance.md, "Calls read where
// they run").
const watchAfter = sweepEvery

// call is a call running, as the sweep sees it.
type call struct {
	ctx   *callContext
	began time.Time
	nc    net.Conn
	rd    *bufio.Reader // nc's
	alive func()        // starts the call's alive frames

	watched   bool          // a watch was started; Server.cmu
	watchDone chan struct{} // closed when the watch has ended
	kicked    atomic.Bool   // the call ended: the watch's read was stopped on purpose
	gone      bool          // the watch saw the connection end (before watchDone closes)
}

// beginCall registers a call (its deadline in timeout ns from now, 0: none)
// with the sweep.
func (s *Server) beginCall(nc net.Conn, rd *bufio.Reader, timeout uint64, alive func()) *call {
	c := &call{ctx: &callContext{done: make(chan struct{})}, began: time.Now(), nc: nc, rd: rd, alive: alive}
	if timeout > 0 {
		c.ctx.deadline = c.began.Add(time.Duration(timeout))
	}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.ctx.Err() != nil { // Close ran: it cancelled the calls it found
		c.ctx.cancel(context.Canceled)
		return c
	}
	s.calls[c] = struct{}{}
	s.begun++
	if !s.ticking {
		s.ticking = true
		s.wg.Add(1) // the sweep to come
		if s.sweepT == nil {
			s.sweepT = time.AfterFunc(sweepEvery, s.sweep)
		} else {
			s.sweepT.Reset(sweepEvery)
		}
	}
	return c
}

// endCall takes c off the sweep, stops its watch if one was started (before
// the connection is read again), and says whether the connection ended.
// It cancels c's context: the call is over.
func (s *Server) endCall(c *call) (gone bool) {
	s.cmu.Lock()
	delete(s.calls, c)
	watched := c.watched
	s.cmu.Unlock()
	c.ctx.cancel(context.Canceled)
	if !watched {
		return false
	}
	// A client sends nothing while its call runs: the watch's read waits
	// until the connection ends or this deadline in the past stops it.
	c.kicked.Store(true)
	_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	<-c.watchDone
	_ = c.nc.SetReadDeadline(time.Time{})
	return c.gone
}

// sweep cancels the calls past their deadline and starts watching those
// that have run watchAfter; it sweeps again after sweepEvery while calls
// run or began since the last sweep.
func (s *Server) sweep() {
	defer s.wg.Done()
	now := time.Now()
	var expired, watch []*call
	s.cmu.Lock()
	for c := range s.calls {
		if !c.ctx.deadline.IsZero() && !now.Before(c.ctx.deadline) {
			expired = append(expired, c)
		}
		if !c.watched && now.Sub(c.began) >= watchAfter {
			c.watched, c.watchDone = true, make(chan struct{})
			watch = append(watch, c)
		}
	}
	if s.ctx.Err() == nil && (len(s.calls) > 0 || s.begun > 0) {
		s.wg.Add(1)
		s.sweepT.Reset(sweepEvery)
	} else {
		s.ticking = false
	}
	s.begun = 0
	s.cmu.Unlock()
	for _, c := range expired {
		c.ctx.cancel(context.DeadlineExceeded)
	}
	for _, c := range watch {
		go c.watch()
		c.alive()
	}
}

// watch peeks at the call's connection, which says nothing while the call
// runs: an error other than endCall's deadline is the client gone, which
// cancels the call. A byte read would be the next call's, which Peek
// leaves in rd.
func (c *call) watch() {
	defer close(c.watchDone)
	if _, err := c.rd.Peek(1); err != nil && !c.kicked.Load() {
		c.gone = true
		c.ctx.cancel(context.Canceled)
	}
}

// stopSweeps ends the sweeping and cancels every call running (Close).
func (s *Server) stopSweeps() {
	s.cmu.Lock()
	if s.sweepT != nil && s.sweepT.Stop() {
		s.wg.Done() // the sweep that will not come
	}
	s.ticking = false
	calls := make([]*call, 0, len(s.calls))
	for c := range s.calls {
		calls = append(calls, c)
	}
	s.cmu.Unlock()
	for _, c := range calls {
		c.ctx.cancel(context.Canceled)
	}
}

// callContext is a call's context: done when the call ends, its deadline
// passes (the sweep), its client goes (the watch) or the server closes. It
// holds no values and arms no timer. A context derived from it needs no
// goroutine to follow it: the context package finds its AfterFunc.
type callContext struct {
	deadline time.Time
	done     chan struct{}

	mu    sync.Mutex
	err   error
	after []*afterFunc
}

func (c *callContext) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }
func (c *callContext) Done() <-chan struct{}       { return c.done }
func (c *callContext) Value(any) any               { return nil }

func (c *callContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// cancel ends c with err, unless it has ended, and starts its AfterFuncs.
func (c *callContext) cancel(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	after := c.after
	c.after = nil
	close(c.done)
	c.mu.Unlock()
	for _, a := range after {
		a.start()
	}
}

// AfterFunc runs f in a goroutine of its own once c is done, as
// context.AfterFunc does; stop says whether it kept f from running.
func (c *callContext) AfterFunc(f func()) (stop func() bool) {
	a := &afterFunc{f: f}
	c.mu.Lock()
	done := c.err != nil
	if !done {
		c.after = append(c.after, a)
	}
	c.mu.Unlock()
	if done {
		a.start()
	}
	return a.stop
}

// afterFunc is one AfterFunc of a callContext: pending, then started or
// stopped.
type afterFunc struct {
	f     func()
	state atomic.Int32 // 0 pending, 1 started, 2 stopped
}

func (a *afterFunc) start() {
	if a.state.CompareAndSwap(0, 1) {
		go a.f()
	}
}

func (a *afterFunc) stop() bool { return a.state.CompareAndSwap(0, 2) }
