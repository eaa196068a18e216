package wal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/row"
)

// Sentinel errors.
var (
	// ErrOutcomeUnknown: the store failed in a way that leaves it unknown
	// whether the segment landed. The write may become visible (it is
	// applied exactly once, atomically, if it did land); retrying a write of
	// the same rows is safe.
	ErrOutcomeUnknown = errors.New("wal: write outcome unknown")
	// ErrClosed: the writer was closed.
	ErrClosed = errors.New("wal: closed")
	// ErrGap: a segment above the flushed segment is missing.
	ErrGap = errors.New("wal: gap in segments")
	// ErrLeaseExpired: the owner's lease (Options.Lease) expired; the
	// writer acknowledges nothing more. It is returned wrapped with
	// fence.ErrFenced, and with ErrOutcomeUnknown when the segment had landed.
	ErrLeaseExpired = errors.New("wal: the region's lease expired")
)

// Options configure group commit.
type Options struct {
	// Window is how long the first write of a group waits for others
	// (default 0: a group is whatever queued while the previous segment was
	// being written, which gives the lowest latency).
	Window time.Duration
	// MaxSegmentBytes caps a group's encoded size (default 4 MiB). A single
	// write larger than it gets a segment of its own.
	MaxSegmentBytes int
	// Lease, if set, reports whether the owner may still acknowledge
	// (nil) or not (an error, typically its lease's local deadline has
	// passed). It is asked before each segment's create and again after
	// the create returns: a segment that lands after the lease is never
	// acknowledged, since a new owner may already be serving the region.
	Lease func() error
	// OnPut, if set, hears of each data segment created: its size and how
	// long the create took (what an acknowledgement waited on).
	OnPut func(bytes int, took time.Duration)
}

func (o *Options) defaults() {
	if o.MaxSegmentBytes <= 0 {
		o.MaxSegmentBytes = 4 << 20
	}
}

// ApplyFunc receives each durable segment's entries, in segment order, before
// their writes are acknowledged. It runs on the writer's goroutine.
type ApplyFunc func(segment uint64, entries []row.Entry)

// Stats are a writer's cumulative counters.
type Stats struct {
	Segments, Entries, Bytes uint64
}

// Writer group-commits appends into consecutive segments.
type Writer struct {
	store  objstore.Bucket
	region layout.RegionID
	epoch  uint64
	opts   Options
	apply  ApplyFunc

	reqs    chan *request
	closing chan struct{}
	done    chan struct{}
	once    sync.Once

	// Owned by the loop goroutine.
	next    uint64 // next segment number
	nextSeq uint64
	err     error    // sticky: fence.ErrFenced
	unknown *pending // a segment whose create is ambiguous
	buf     []byte

	mu    sync.Mutex
	stats Stats
}

type request struct {
	entries []row.Entry
	size    int
	done    chan error
}

type pending struct {
	number  uint64
	data    []byte
	entries []row.Entry
	reqs    []*request
}

// NewWriter starts a writer whose first segment is next and first sequence
// nextSeq (both from Recover).
func NewWriter(store objstore.Bucket, region layout.RegionID, epoch, next, nextSeq uint64, opts Options, apply ApplyFunc) *Writer {
	opts.defaults()
	w := &Writer{
		store: store, region: region, epoch: epoch, opts: opts, apply: apply,
		reqs: make(chan *request), closing: make(chan struct{}), done: make(chan struct{}),
		next: next, nextSeq: nextSeq,
	}
	go w.loop()
	return w
}

// Append makes entries durable in one segment and returns once they are (or
// the write failed). It sets each entry's Seq. The entries belong to the
// writer from the call on; once Append has returned nil, it keeps none of
// them (or their Fields), so the caller may reuse them. Once queued, a write is carried out even if ctx
// is cancelled: Append then waits for the outcome.
func (w *Writer) Append(ctx context.Context, entries []row.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	req := &request{entries: entries, done: make(chan error, 1)}
	for i := range entries {
		req.size += encodedSize(&entries[i])
	}
	select {
	case w.reqs <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.closing:
		return ErrClosed
	}
	return <-req.done
}

// Stats returns the writer's counters.
func (w *Writer) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Close stops the writer after the group in flight. Writes not yet taken
// into a group fail with ErrClosed.
func (w *Writer) Close() error {
	w.once.Do(func() { close(w.closing) })
	<-w.done
	return nil
}

func (w *Writer) loop() {
	defer close(w.done)
	var timer *time.Timer
	for {
		var first *request
		select {
		case first = <-w.reqs:
		case <-w.closing:
			return
		}
		g := gatherer[*request]{reqs: w.reqs, closing: w.closing, window: w.opts.Window, max: w.opts.MaxSegmentBytes, timer: &timer}
		w.commit(g.gather(first, func(r *request) int { return r.size }))
	}
}

// gatherer forms a group commit: the first request and whatever else
// queued (no window), or arrived within the window, up to max bytes. ctl,
// if set, runs between arrivals (a stream's members joining or leaving
// need not wait for the window).
type gatherer[R any] struct {
	reqs    <-chan R
	ctl     <-chan func()
	closing <-chan struct{}
	window  time.Duration
	max     int
	timer   **time.Timer // reused across groups
}

func (g gatherer[R]) gather(first R, size func(R) int) []R {
	group, n := []R{first}, size(first)
	if g.window <= 0 {
		for n < g.max {
			select {
			case r := <-g.reqs:
				group, n = append(group, r), n+size(r)
			default:
				return group
			}
		}
		return group
	}
	if *g.timer == nil {
		*g.timer = time.NewTimer(g.window)
	} else {
		(*g.timer).Reset(g.window)
	}
	defer (*g.timer).Stop()
	for n < g.max {
		select {
		case r := <-g.reqs:
			group, n = append(group, r), n+size(r)
		case f := <-g.ctl:
			f()
		case <-(*g.timer).C:
			return group
		case <-g.closing:
			return group
		}
	}
	return group
}

func fail(reqs []*request, err error) {
	for _, r := range reqs {
		r.done <- err
	}
}

// commit writes one group as the next segment.
func (w *Writer) commit(group []*request) {
	ctx := context.Background()
	if w.err == nil && w.unknown != nil {
		w.resolve(ctx)
	}
	if w.err != nil {
		fail(group, w.err)
		return
	}
	if w.unknown != nil {
		fail(group, fmt.Errorf("%w: an earlier segment's outcome is still unknown", ErrOutcomeUnknown))
		return
	}
	if err := w.leaseErr(); err != nil {
		w.err = err
		fail(group, err)
		return
	}
	n := 0
	for _, r := range group {
		n += len(r.entries)
	}
	entries := make([]row.Entry, 0, n)
	first := w.nextSeq
	for _, r := range group {
		for i := range r.entries {
			r.entries[i].Seq = w.nextSeq
			w.nextSeq++
		}
		entries = append(entries, r.entries...)
	}
	w.buf = encode(w.buf[:0], false, w.epoch, first, entries)
	key := w.region.WALKey(w.next)
	began := time.Now()
	err := w.store.CreateIfAbsent(ctx, key, w.buf)
	switch {
	case err == nil:
		if w.opts.OnPut != nil {
			w.opts.OnPut(len(w.buf), time.Since(began))
		}
		if lerr := w.leaseErr(); lerr != nil {
			// Landed, but too late to acknowledge: the next owner may
			// replay it (or it lies under a fence and is never read).
			w.err = lerr
			fail(group, errors.Join(lerr, fmt.Errorf("%w: segment %s landed after the lease expired", ErrOutcomeUnknown, key)))
			return
		}
		w.landed(w.next, entries, len(w.buf))
		fail(group, nil)
	case errors.Is(err, objstore.ErrPreconditionFailed):
		w.err = fmt.Errorf("%w: segment %s exists", fence.ErrFenced, key)
		fail(group, w.err)
	default:
		w.unknown = &pending{number: w.next, data: slices.Clone(w.buf), entries: entries, reqs: group}
		fail(group, fmt.Errorf("%w: write segment %s: %v", ErrOutcomeUnknown, key, err))
	}
}

// leaseErr is the lease's verdict, as a sticky fencing error.
func (w *Writer) leaseErr() error {
	if w.opts.Lease == nil {
		return nil
	}
	if err := w.opts.Lease(); err != nil {
		return fmt.Errorf("%w: %w: %v", fence.ErrFenced, ErrLeaseExpired, err)
	}
	return nil
}

func (w *Writer) landed(number uint64, entries []row.Entry, size int) {
	w.apply(number, entries)
	w.next = number + 1
	w.mu.Lock()
	w.stats.Segments++
	w.stats.Entries += uint64(len(entries))
	w.stats.Bytes += uint64(size)
	w.mu.Unlock()
}

// resolve reads back an ambiguous segment. If it landed, its entries are
// applied (their writes were reported as unknown, never as failed). If it is
// not there, it may still land late (a PUT the client gave up on after
// sending it), so its number is claimed with an empty segment by a
// create-if-absent: then the original can never land, and its sequences are
// reused by the next segment.
func (w *Writer) resolve(ctx context.Context) {
	p := w.unknown
	key := w.region.WALKey(p.number)
	void := encode(nil, false, w.epoch, p.entries[0].Seq, nil)
	got, err := readBackOrClaim(ctx, w.store, key, w.region.WALKey(p.number+1), void)
	switch {
	case errors.Is(err, errPassed):
		w.unknown = nil
		w.err = fmt.Errorf("%w: segment %s: %w", fence.ErrFenced, key, err)
	case err != nil:
		return // still unknown
	case string(got) == string(p.data):
		w.unknown = nil
		w.landed(p.number, p.entries, len(p.data))
	case string(got) == string(void):
		w.unknown = nil
		w.next = p.number + 1
		w.nextSeq = p.entries[0].Seq
	default:
		w.unknown = nil
		w.err = fmt.Errorf("%w: segment %s was written by another writer", fence.ErrFenced, key)
	}
}

// errPassed: an ambiguous create's number is free, but the log holds the
// number after it. The create landed; a new owner replayed it, sealed the
// log above it and collected it. Claiming the number now would leave an
// object nothing owns.
var errPassed = errors.New("wal: the segment landed and was collected; the log is sealed above it")

// readBackOrClaim settles an ambiguous create of key: it returns what the
// key holds, having claimed it with void if it held nothing (so the lost
// create can never land later). next is the key of the number after it: if
// that exists, the key is free because the create landed and was collected
// (errPassed). A create that never landed cannot have a successor: a new
// owner seals a log at the first free number above what it lists, so at
// key itself. Any other error leaves the outcome unknown.
func readBackOrClaim(ctx context.Context, store objstore.Bucket, key, next string, void []byte) ([]byte, error) {
	got, err := store.Get(ctx, key)
	if !errors.Is(err, objstore.ErrNotFound) {
		return got, err
	}
	switch _, err := store.Attributes(ctx, next); {
	case err == nil:
		return nil, errPassed
	case !errors.Is(err, objstore.ErrNotFound):
		return nil, err
	}
	switch err := store.CreateIfAbsent(ctx, key, void); {
	case err == nil:
		return void, nil
	case errors.Is(err, objstore.ErrPreconditionFailed):
		return store.Get(ctx, key) // it landed meanwhile, or another writer's
	default:
		return nil, err
	}
}

// Recover replays every segment above flushedSegment in order, passing each
// to replay, then writes a fence segment at the next number. It returns the
// first segment number and sequence for a Writer (the fence is next-1). A
// segment that another (stale) writer creates while Recover runs is
// replayed too: the fence goes above it. A segment of a newer epoch than
// epoch means a newer owner has fenced this one: fence.ErrFenced, and Recover
// writes nothing more.
func Recover(ctx context.Context, store objstore.Bucket, region layout.RegionID, epoch, flushedSegment, flushedSeq uint64, replay func(*Segment) error) (next, nextSeq uint64, err error) {
	objs, err := objstore.ListAll(ctx, store, region.WALPrefix(), 1000)
	if err != nil {
		return 0, 0, fmt.Errorf("wal: list %s: %w", region.WALPrefix(), err)
	}
	var numbers []uint64
	for _, o := range objs {
		if n, ok := region.ParseWALKey(o.Key); ok && n > flushedSegment {
			numbers = append(numbers, n)
		}
	}
	slices.Sort(numbers)
	next, nextSeq = flushedSegment+1, flushedSeq+1
	read := func(n uint64) error {
		data, err := store.Get(ctx, region.WALKey(n))
		if err != nil {
			return fmt.Errorf("wal: read segment %s: %w", region.WALKey(n), err)
		}
		seg, err := Decode(n, data)
		if err != nil {
			return fmt.Errorf("region %s: %w", region, err)
		}
		if seg.Epoch > epoch {
			return fmt.Errorf("%w: segment %s was written by epoch %d, this owner's is %d", fence.ErrFenced, region.WALKey(n), seg.Epoch, epoch)
		}
		if seg.FirstSeq < nextSeq && len(seg.Entries) > 0 {
			return fmt.Errorf("%w %d of region %s: sequence %d is behind %d", ErrCorrupt, n, region, seg.FirstSeq, nextSeq)
		}
		nextSeq = max(nextSeq, seg.FirstSeq+uint64(len(seg.Entries)))
		return replay(seg)
	}
	for _, n := range numbers {
		if n != next {
			return 0, 0, fmt.Errorf("%w: region %s: segment %d missing, %d exists", ErrGap, region, next, n)
		}
		if err := read(n); err != nil {
			return 0, 0, err
		}
		next++
	}
	for {
		fence := encode(nil, true, epoch, nextSeq, nil)
		err := store.CreateIfAbsent(ctx, region.WALKey(next), fence)
		switch {
		case err == nil:
			return next + 1, nextSeq, nil
		case errors.Is(err, objstore.ErrPreconditionFailed):
			// A stale owner appended after our listing; replay it too.
			if err := read(next); err != nil {
				return 0, 0, err
			}
			next++
		default:
			return 0, 0, fmt.Errorf("wal: write fence segment %s: %w", region.WALKey(next), err)
		}
	}
}
