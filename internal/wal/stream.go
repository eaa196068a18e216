package wal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/s2"

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
	// ErrClosed: the stream, or the region's member of it, was closed.
	ErrClosed = errors.New("wal: closed")
	// ErrLeaseExpired: the owner's lease (MemberOptions.Lease) expired;
	// the member acknowledges nothing more. It is returned wrapped with
	// fence.ErrFenced, and with ErrOutcomeUnknown when the segment had
	// landed.
	ErrLeaseExpired = errors.New("wal: the region's lease expired")
)

// A Stream is the WAL of the regions that write through it: a datanode's
// (one for every region it hosts), or a region's own when it is opened
// without one (region.Options.Stream). Every commit window it writes one
// segment holding the entries of every region that wrote, so the
// datanode's PUT rate is bounded by 1/Window whatever the regions it hosts
// and the requests they get (docs/design-decisions.md, "What an
// acknowledgement costs").
//
// Segments are written with create-if-absent at consecutive numbers under
// layout.StreamPrefix, and a region's new owner seals every stream its
// manifest names with a fence segment after the last one it replayed. The
// writer of a sealed stream finds its number taken: it rolls over to a new
// stream, and each region it still carries records the new stream in its
// manifest (Member's record callback) before any of its entries go in it.
// A region that has moved away fails that commit and stops acknowledging.
type Stream struct {
	store objstore.Bucket
	opts  StreamOptions

	reqs    chan *streamReq
	ctl     chan func()
	closing chan struct{}
	done    chan struct{}
	once    sync.Once

	// Owned by the loop goroutine.
	unknown *streamPending // a segment whose create is ambiguous
	buf     []byte
	timer   *time.Timer // the window's, reused across groups
	groupAt time.Time   // when the last group closed: no window starts before

	mu      sync.Mutex
	id      string // the stream being written
	next    uint64 // its next segment number
	members map[layout.RegionID]*Member
	ended   map[string]uint64 // sealed streams of this writer: their fences
	index   map[segmentKey][]layout.RegionID
	stats   StreamStats
}

type segmentKey struct {
	stream string
	n      uint64
}

// maxIndexed bounds the segments whose regions a stream remembers (about
// 100 bytes each); past it, GC reads the segments instead.
const maxIndexed = 1 << 20

// StreamOptions configure a Stream.
type StreamOptions struct {
	// Window is how long the first write of a group waits for others,
	// from its arrival: a write that queued while the previous segment
	// was written has waited already, and waits only what is left of its
	// window. The stream writes at most one segment per Window (0: a
	// group is whatever queued while the previous segment was written).
	Window time.Duration
	// MaxSegmentBytes caps a group's encoded size (default 16 MiB: one
	// stream carries every region's writes, and large requests need
	// several per PUT to keep up with one WAL per region).
	MaxSegmentBytes int
	// NewID names a new stream: the first one, and each after a fence. It
	// must never return a name used before.
	NewID func() string
	// OnPut, if set, hears of each data segment created: its size and
	// how long the create took (what an acknowledgement waited on).
	OnPut func(bytes int, took time.Duration)
	// Logger hears of the rare events: an ambiguous create, how it was
	// settled, and each rollover (default slog.Default()).
	Logger *slog.Logger
}

// StreamStats are a stream's cumulative counters.
type StreamStats struct {
	Segments, Entries, Bytes uint64
	// Rollovers counts the streams sealed under this writer.
	Rollovers uint64
}

// Member is one region's handle on a Stream.
type Member struct {
	s      *Stream
	region layout.RegionID
	epoch  uint64
	apply  func(stream string, segment uint64, appends [][]row.Entry)
	lease  func() time.Time
	record func(context.Context, Recording) error

	closing chan struct{}
	once    sync.Once

	// Owned by the stream's loop.
	nextSeq  uint64
	recorded string // the stream the region's manifest names for its entries
	err      error  // sticky: fenced
	detached bool
}

type streamReq struct {
	m       *Member
	entries []row.Entry
	enc     []byte  // the entries encoded and compressed (one chunk)
	encBuf  *[]byte // the pooled buffer enc is in, given back by commit
	fwd     bool    // enc is a forwarded chunk, the caller's (AppendChunk)
	raw     int     // their encoded size before compression
	size    int
	done    chan error
	at      time.Time // when it was queued: its window's start
}

type streamPending struct {
	number uint64
	data   []byte
	blocks []Block
	reqs   []*streamReq
}

// NewStream starts a stream writer.
func NewStream(store objstore.Bucket, opts StreamOptions) *Stream {
	if opts.MaxSegmentBytes <= 0 {
		opts.MaxSegmentBytes = 16 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Stream{
		store: store, opts: opts,
		reqs: make(chan *streamReq), ctl: make(chan func()),
		closing: make(chan struct{}), done: make(chan struct{}),
		id: opts.NewID(), next: 1, members: map[layout.RegionID]*Member{}, ended: map[string]uint64{},
		index: map[segmentKey][]layout.RegionID{},
	}
	go s.loop()
	return s
}

// ID is the stream being written now.
func (s *Stream) ID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// Regions returns the regions with entries in segment n of stream, if this
// writer wrote it and still remembers.
func (s *Stream) Regions(stream string, n uint64) ([]layout.RegionID, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.index[segmentKey{stream, n}]
	return r, ok
}

// Next reports the next segment number of stream if it is the one this
// writer is writing.
func (s *Stream) Next(stream string) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next, stream == s.id
}

// Forget drops segment n of stream from the index: it was deleted.
func (s *Stream) Forget(stream string, n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.index, segmentKey{stream, n})
}

// Stats returns the stream's counters.
func (s *Stream) Stats() StreamStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Recording tells a region that its entries from segment From of Stream on
// may be in that stream.
type Recording struct {
	Stream string
	From   uint64
	// NextSeq is the region's next sequence: its entries in every stream
	// recorded before are below it.
	NextSeq uint64
	// Ended holds the fence number of each stream this writer wrote
	// before, sealed by a region's new owner.
	Ended map[string]uint64
}

// ErrAttached: the region already has a member on this stream.
var ErrAttached = errors.New("wal: region already attached to the stream")

// MemberOptions describe a region joining a stream.
type MemberOptions struct {
	Region  layout.RegionID
	Epoch   uint64 // the owner's manifest epoch, written in its blocks
	NextSeq uint64 // the region's next sequence (from replay)
	// Record commits the Recording to the region's manifest. The stream
	// calls it (on its goroutine) before the region's first entry goes into
	// a stream the member has not recorded. An error wrapping fence.ErrFenced
	// fails the member for good; any other fails the writes at hand.
	Record func(context.Context, Recording) error
	// Lease, if set, is the local deadline of the owner's lease: past it
	// the member acknowledges nothing, and a segment carrying its entries
	// must land before it (the create's context ends there), so a former
	// owner's late write cannot land long after its lease.
	Lease func() time.Time
	// Apply receives each durable block's entries, with the stream and
	// segment holding them, before they are acknowledged: in one call,
	// as the appends gave them (in order, their sequences consecutive).
	Apply func(stream string, segment uint64, appends [][]row.Entry)
}

// Attach adds a region. Its writes go through the returned Member until it
// is closed.
func (s *Stream) Attach(o MemberOptions) (*Member, error) {
	m := &Member{s: s, region: o.Region, epoch: o.Epoch, apply: o.Apply, lease: o.Lease, record: o.Record,
		nextSeq: o.NextSeq, closing: make(chan struct{})}
	var err error
	if !s.do(func() {
		if _, ok := s.members[o.Region]; ok {
			err = fmt.Errorf("%w: region %s", ErrAttached, o.Region)
			return
		}
		s.members[o.Region] = m
	}) {
		return nil, ErrClosed
	}
	return m, err
}

// do runs f on the loop goroutine between groups. It reports false if the
// stream is closed.
func (s *Stream) do(f func()) bool {
	ran := make(chan struct{})
	select {
	case s.ctl <- func() { s.mu.Lock(); defer s.mu.Unlock(); f(); close(ran) }:
		<-ran
		return true
	case <-s.closing:
		return false
	}
}

// leaseErr is fence.ErrFenced once the member's lease has passed.
func (m *Member) leaseErr() error {
	if m.lease == nil {
		return nil
	}
	if d := m.lease(); !time.Now().Before(d) {
		return fmt.Errorf("%w: %w: region %s: the local deadline %s has passed", fence.ErrFenced, ErrLeaseExpired, m.region, d.Format(time.RFC3339Nano))
	}
	return nil
}

// deadline is the earliest lease deadline of a group's members (zero:
// none has a lease).
func deadline(group []*streamReq) time.Time {
	var d time.Time
	for _, r := range group {
		if r.m.lease != nil {
			if md := r.m.lease(); d.IsZero() || md.Before(d) {
				d = md
			}
		}
	}
	return d
}

// Append makes entries durable in one segment and returns once they are
// (or the write failed). It sets each entry's Seq. The entries belong to
// the stream from the call on; once Append has returned, whatever it
// returned, the stream refers to none of them (their Series and Fields
// included: a group it keeps is a copy, keep), so the caller may reuse
// them and the memory they point into. Once queued, a write is carried
// out even if ctx is cancelled: Append then waits for the outcome.
func (m *Member) Append(ctx context.Context, entries []row.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	// Encoding here, on the caller's goroutine, keeps the stream's single
	// loop to copying bytes: many writers encode in parallel.
	req := &streamReq{m: m, entries: entries, done: make(chan error, 1)}
	req.enc, req.encBuf, req.raw = encodeRequest(entries)
	return m.queue(ctx, req)
}

// AppendChunk is Append for entries whose encoding the caller has already:
// chunk, one S2 (or Snappy) block of bytes that the stream's readers turn
// back into the same entries with their Forwarded decoder. A datanode
// gives the batch another datanode forwarded as it came (internal/fwdbatch),
// so the owner of a region encodes nothing again. chunk must stay as it is
// until AppendChunk returns.
func (m *Member) AppendChunk(ctx context.Context, entries []row.Entry, chunk []byte) error {
	if len(entries) == 0 {
		return nil
	}
	raw, err := s2.DecodedLen(chunk)
	if err != nil {
		return fmt.Errorf("wal: a forwarded chunk: %w", err)
	}
	return m.queue(ctx, &streamReq{m: m, entries: entries, done: make(chan error, 1), enc: chunk, fwd: true, raw: raw})
}

// queue hands an encoded append to the stream and waits for its outcome.
func (m *Member) queue(ctx context.Context, req *streamReq) error {
	req.size = len(req.enc)
	req.at = time.Now()
	select {
	case m.s.reqs <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-m.closing:
		return ErrClosed
	case <-m.s.closing:
		return ErrClosed
	}
	return <-req.done
}

// encodeRequest encodes and compresses one append's entries (one chunk)
// and returns the encoded size before compression.
func encodeRequest(entries []row.Entry) ([]byte, *[]byte, int) {
	n := 0
	for i := range entries {
		n += encodedSize(&entries[i])
	}
	bp := getScratch(n) // sized once: grown from empty, the copies cost 7% of a write's CPU
	defer putScratch(bp)
	raw := (*bp)[:0]
	st := getCompactState()
	for i := range entries {
		raw = appendCompact(raw, &entries[i], st)
	}
	putCompactState(st)
	*bp = raw
	enc, buf := chunk(raw)
	return enc, buf, len(raw)
}

// Close detaches the member after the group in flight: its later writes
// fail with ErrClosed, and the stream carries none of its entries from
// here on.
func (m *Member) Close() {
	m.once.Do(func() {
		close(m.closing)
		m.s.do(func() {
			m.detached = true
			if m.s.members[m.region] == m {
				delete(m.s.members, m.region)
			}
		})
	})
}

// Close stops the stream after the group in flight.
func (s *Stream) Close() error {
	s.once.Do(func() { close(s.closing) })
	<-s.done
	return nil
}

func (s *Stream) loop() {
	defer close(s.done)
	for {
		var first *streamReq
		select {
		case first = <-s.reqs:
		case f := <-s.ctl:
			f()
			continue
		case <-s.closing:
			return
		}
		group := s.gather(first)
		s.groupAt = time.Now()
		s.commit(group)
	}
}

// gather forms a group commit: the first request and whatever else
// queued (no window), or arrived within the window, up to
// MaxSegmentBytes. The window is the first request's, from when it was
// queued: one that waited for the segment before has spent that much of
// it (else a request arriving during a PUT waited for that PUT, a whole
// window, then its own PUT; in a cluster a write waits for several
// nodes' commits, as slow as the slowest). Segments stay a Window apart:
// no window starts before the previous group closed. Members joining or leaving meanwhile need not wait for
// the window.
func (s *Stream) gather(first *streamReq) []*streamReq {
	group, n := []*streamReq{first}, first.size
	start := first.at
	if start.Before(s.groupAt) {
		start = s.groupAt // it missed the last group (full, or the window closed as it came)
	}
	left := s.opts.Window - time.Since(start)
	if left <= 0 {
		for n < s.opts.MaxSegmentBytes {
			select {
			case r := <-s.reqs:
				group, n = append(group, r), n+r.size
			default:
				return group
			}
		}
		return group
	}
	if s.timer == nil {
		s.timer = time.NewTimer(left)
	} else {
		s.timer.Reset(left)
	}
	defer s.timer.Stop()
	for n < s.opts.MaxSegmentBytes {
		select {
		case r := <-s.reqs:
			group, n = append(group, r), n+r.size
		case f := <-s.ctl:
			f()
		case <-s.timer.C:
			return group
		case <-s.closing:
			return group
		}
	}
	return group
}

func failStream(reqs []*streamReq, err error) {
	for _, r := range reqs {
		r.done <- err
	}
}

// Position is the stream and segment number the next group goes to: no
// later entry is in an earlier segment.
func (s *Stream) Position() (string, uint64) { return s.position() }

func (s *Stream) position() (string, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, s.next
}

// commit writes one group as the stream's next segment.
func (s *Stream) commit(group []*streamReq) {
	// Every request's chunk buffer goes back to the pool once the group
	// is done with (the segment bytes are copied, or the requests failed).
	all := group
	defer func() {
		for _, r := range all {
			if r.encBuf != nil {
				putScratch(r.encBuf)
			}
			r.enc, r.encBuf = nil, nil
		}
	}()
	group = slices.Clone(group) // admit filters in place
	ctx := context.Background()
	if s.unknown != nil {
		s.resolve(ctx)
	}
	if s.unknown != nil {
		failStream(group, fmt.Errorf("%w: an earlier segment's outcome is still unknown", ErrOutcomeUnknown))
		return
	}
	for attempt := 0; len(group) > 0; attempt++ {
		group = s.admit(ctx, group)
		if len(group) == 0 {
			return
		}
		id, number := s.position()
		blocks := groupBlocks(group)
		s.buf = encodeStream(s.buf[:0], false, blocks)
		for i := range blocks {
			blocks[i].chunks, blocks[i].fwd = nil, nil // in s.buf now; their buffers go back
		}
		key := layout.StreamKey(id, number)
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if d := deadline(group); !d.IsZero() {
			cctx, cancel = context.WithDeadline(ctx, d)
		}
		began := time.Now()
		err := s.store.CreateIfAbsent(cctx, key, s.buf)
		cancel()
		switch {
		case err == nil:
			if s.opts.OnPut != nil {
				s.opts.OnPut(len(s.buf), time.Since(began))
			}
			s.landed(id, number, blocks, group, len(s.buf), true)
			return
		case errors.Is(err, objstore.ErrPreconditionFailed) && attempt == 0:
			// Sealed by a region's new owner: nothing of this group
			// landed. Roll over and try once more; every member records
			// the new stream first, and one that moved away fails there.
			s.resetSeqs(group, blocks)
			s.rollover(number)
		case errors.Is(err, objstore.ErrPreconditionFailed):
			s.resetSeqs(group, blocks)
			failStream(group, fmt.Errorf("%w: segment %s exists in a new stream", fence.ErrFenced, key))
			return
		default:
			s.unknown = &streamPending{number: number, data: slices.Clone(s.buf), blocks: blocks, reqs: keep(group)}
			s.opts.Logger.Warn("wal stream: segment outcome unknown", "segment", key, "err", err)
			failStream(group, fmt.Errorf("%w: write segment %s: %v", ErrOutcomeUnknown, key, err))
			return
		}
	}
}

// admit drops from the group the requests that cannot go into the current
// stream, failing them: a detached or fenced member, an expired lease, a
// stream the member could not record. It assigns nothing.
func (s *Stream) admit(ctx context.Context, group []*streamReq) []*streamReq {
	id, next := s.position()
	kept := group[:0]
	tried := map[*Member]error{}
	for _, r := range group {
		m := r.m
		err, seen := tried[m]
		if !seen {
			err = s.admitMember(ctx, m, id, next)
			tried[m] = err
		}
		if err != nil {
			r.done <- err
			continue
		}
		kept = append(kept, r)
	}
	return kept
}

func (s *Stream) admitMember(ctx context.Context, m *Member, id string, next uint64) error {
	switch {
	case m.detached:
		return ErrClosed
	case m.err != nil:
		return m.err
	}
	if err := m.leaseErr(); err != nil {
		m.err = err
		return err
	}
	if m.recorded != id {
		s.mu.Lock()
		rec := Recording{Stream: id, From: next, NextSeq: m.nextSeq, Ended: maps.Clone(s.ended)}
		s.mu.Unlock()
		if err := m.record(ctx, rec); err != nil {
			if errors.Is(err, fence.ErrFenced) {
				m.err = fmt.Errorf("%w: region %s: record stream %s: %v", fence.ErrFenced, m.region, id, err)
				return m.err
			}
			return fmt.Errorf("region %s: record stream %s: %w", m.region, id, err)
		}
		m.recorded = id
	}
	return nil
}

// groupBlocks gathers a group's entries into one block per member, in
// arrival order, and assigns each member's sequences.
func groupBlocks(group []*streamReq) []Block {
	var blocks []Block
	index := map[*Member]int{}
	for _, r := range group {
		i, ok := index[r.m]
		if !ok {
			i = len(blocks)
			index[r.m] = i
			blocks = append(blocks, Block{Region: r.m.region, Epoch: r.m.epoch, FirstSeq: r.m.nextSeq})
		}
		for j := range r.entries {
			r.entries[j].Seq = r.m.nextSeq
			r.m.nextSeq++
		}
		b := &blocks[i]
		b.count += len(r.entries)
		b.chunks = append(b.chunks, r.enc)
		b.fwd = append(b.fwd, r.fwd)
		b.raw += r.raw
	}
	return blocks
}

// rollover starts a new stream after the current one was sealed at fence.
func (s *Stream) rollover(fence uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended[s.id] = fence
	old := s.id
	s.id = s.opts.NewID()
	s.next = 1
	s.stats.Rollovers++
	s.opts.Logger.Info("wal stream: sealed by a region's new owner; rolled over", "sealed", layout.StreamKey(old, fence), "stream", s.id)
}

// landed applies and acknowledges a segment that exists. A member whose
// lease expired meanwhile acknowledges nothing: its region's next owner
// replays the block, or it lies under that owner's fence.
// Resolved groups were answered already (ack false).
func (s *Stream) landed(stream string, number uint64, blocks []Block, group []*streamReq, size int, ack bool) {
	verdict := map[layout.RegionID]error{}
	members := map[layout.RegionID]*Member{}
	for _, r := range group {
		m := r.m
		if _, seen := members[m.region]; seen {
			continue
		}
		members[m.region] = m
		if lerr := m.leaseErr(); lerr != nil {
			m.err = lerr
			verdict[m.region] = errors.Join(m.err, fmt.Errorf("%w: segment %d landed after the lease expired", ErrOutcomeUnknown, number))
		}
	}
	var entries uint64
	for _, b := range blocks {
		entries += uint64(b.entries())
	}
	// A block's entries go to its member at once (a region's flush cuts
	// between segments), as the appends hold them, in arrival order: not
	// copied into one slice a block.
	appends := map[*Member][][]row.Entry{}
	var order []*Member
	for _, r := range group {
		if verdict[r.m.region] != nil {
			continue
		}
		if _, ok := appends[r.m]; !ok {
			order = append(order, r.m)
		}
		appends[r.m] = append(appends[r.m], r.entries)
	}
	for _, m := range order {
		m.apply(stream, number, appends[m])
	}
	for _, r := range group {
		if ack {
			r.done <- verdict[r.m.region]
		}
	}
	s.mu.Lock()
	if len(s.index) < maxIndexed {
		regions := make([]layout.RegionID, len(blocks))
		for i, b := range blocks {
			regions[i] = b.Region
		}
		s.index[segmentKey{stream, number}] = regions
	}
	s.next = number + 1
	s.stats.Segments++
	s.stats.Entries += entries
	s.stats.Bytes += uint64(size)
	s.mu.Unlock()
}

// keep copies the requests of a group whose outcome is unknown, their
// entries whole: their writers are answered now, and may then reuse the
// entries and the keys and strings they point into, while the stream
// holds the group until it resolves it (and may apply it then).
func keep(group []*streamReq) []*streamReq {
	out := make([]*streamReq, len(group))
	for i, r := range group {
		entries := slices.Clone(r.entries)
		for j := range entries {
			e := &entries[j]
			e.Series = strings.Clone(e.Series)
			e.Fields = slices.Clone(e.Fields)
			for k, v := range e.Fields {
				if v.Kind() == row.String {
					e.Fields[k] = row.StringValue(strings.Clone(v.Str()))
				}
			}
		}
		out[i] = &streamReq{m: r.m, entries: entries, raw: r.raw, size: r.size}
	}
	return out
}

// resolve reads back an ambiguous segment. If it landed, its entries are
// applied (their writes were reported as unknown, never as failed). If it
// is not there, it may still land late (a PUT the client gave up on after
// sending it), so its number is claimed with a void segment by a
// create-if-absent: then the original can never land, and its sequences
// are reused by the next segment.
func (s *Stream) resolve(ctx context.Context) {
	p := s.unknown
	id, _ := s.position()
	key := layout.StreamKey(id, p.number)
	void := encodeStream(nil, false, nil) // no blocks: not a fence, and nothing to replay
	got, err := readBackOrClaim(ctx, s.store, key, layout.StreamKey(id, p.number+1), void)
	switch {
	case errors.Is(err, errPassed):
		// Its regions' new owners replayed it and sealed the stream at
		// the next number.
		s.opts.Logger.Info("wal stream: ambiguous segment had landed and was collected", "segment", key)
		s.unknown = nil
		s.resetSeqs(p.reqs, p.blocks)
		s.rollover(p.number + 1)
	case err != nil:
		return // still unknown
	case string(got) == string(p.data):
		s.opts.Logger.Info("wal stream: ambiguous segment had landed", "segment", key)
		s.unknown = nil
		s.landed(id, p.number, p.blocks, p.reqs, len(p.data), false)
	case string(got) == string(void):
		s.opts.Logger.Info("wal stream: ambiguous segment claimed empty", "segment", key)
		s.unknown = nil
		s.resetSeqs(p.reqs, p.blocks)
		s.mu.Lock()
		s.next = p.number + 1
		s.mu.Unlock()
	default:
		// Sealed by a region's new owner.
		s.unknown = nil
		s.resetSeqs(p.reqs, p.blocks)
		s.rollover(p.number)
	}
}

// resetSeqs gives the sequences of a group that never landed back to its
// members.
func (s *Stream) resetSeqs(reqs []*streamReq, blocks []Block) {
	for _, r := range reqs {
		for _, b := range blocks {
			if b.Region == r.m.region && b.FirstSeq < r.m.nextSeq {
				r.m.nextSeq = b.FirstSeq
			}
		}
	}
}

// errPassed: an ambiguous create's number is free, but the stream holds
// the number after it. The create landed; a new owner replayed it, sealed
// the stream above it and collected it. Claiming the number now would
// leave an object nothing owns.
var errPassed = errors.New("wal: the segment landed and was collected; the stream is sealed above it")

// readBackOrClaim settles an ambiguous create of key: it returns what the
// key holds, having claimed it with void if it held nothing (so the lost
// create can never land later). next is the key of the number after it: if
// that exists, the key is free because the create landed and was collected
// (errPassed). A create that never landed cannot have a successor: a new
// owner seals a stream at the first free number above what it lists, so at
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
