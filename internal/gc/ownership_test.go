package gc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/fsck"
	"github.com/stratadb/strata/internal/gc"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/testseed"
	"github.com/stratadb/strata/internal/wal"
)

// gate is the former owner's view of the store: its call number pauseAt
// (counted from 1 over every request) stops before reaching the store
// until resume is closed, and then goes ahead, however late: a paused,
// partitioned or slow process whose request lands after everything the new
// owner did meanwhile.
type gate struct {
	objstore.Bucket
	mu      sync.Mutex
	calls   int
	pauseAt int
	paused  chan struct{} // closed when call pauseAt arrives
	resume  chan struct{}
	stack   string
}

func newGate(b objstore.Bucket, pauseAt int) *gate {
	return &gate{Bucket: b, pauseAt: pauseAt, paused: make(chan struct{}), resume: make(chan struct{})}
}

func (g *gate) call() {
	g.mu.Lock()
	g.calls++
	stop := g.calls == g.pauseAt
	g.mu.Unlock()
	if stop {
		g.stack = string(debug.Stack())
		close(g.paused)
		<-g.resume
	}
}

func (g *gate) Calls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

func (g *gate) Get(ctx context.Context, k string) ([]byte, error) {
	g.call()
	return g.Bucket.Get(ctx, k)
}
func (g *gate) GetRange(ctx context.Context, k string, off, n int64) ([]byte, error) {
	g.call()
	return g.Bucket.GetRange(ctx, k, off, n)
}
func (g *gate) ReadRange(ctx context.Context, k string, off int64, buf []byte) (int, error) {
	g.call()
	return g.Bucket.ReadRange(ctx, k, off, buf)
}
func (g *gate) Put(ctx context.Context, k string, d []byte) error {
	g.call()
	return g.Bucket.Put(ctx, k, d)
}
func (g *gate) CreateIfAbsent(ctx context.Context, k string, d []byte) error {
	g.call()
	return g.Bucket.CreateIfAbsent(ctx, k, d)
}
func (g *gate) Delete(ctx context.Context, k string) error {
	g.call()
	return g.Bucket.Delete(ctx, k)
}
func (g *gate) List(ctx context.Context, p string, tok []byte, n int) (objstore.Page, error) {
	g.call()
	return g.Bucket.List(ctx, p, tok, n)
}
func (g *gate) Attributes(ctx context.Context, k string) (objstore.Attrs, error) {
	g.call()
	return g.Bucket.Attributes(ctx, k)
}

var (
	orid = layout.RegionID{Table: 11, Region: 0}
	nrid = layout.RegionID{Table: 11, Region: 1} // A's neighbour on its node's stream
)

// scanValues reads a region's rows as key(host, ts) -> v.
func scanValues(t *testing.T, r *region.Region) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	sc, err := r.Scan(context.Background(), scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	for sc.Next() {
		for _, e := range sc.Batch() {
			got[key(row.SeriesTag(e.Series, "host"), e.TS)] = e.Fields[0].Float()
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// ledger records what each owner's writes returned: acked rows must read
// back with their value; rows of failed writes may or may not.
type ledger struct {
	mu        sync.Mutex
	acked     map[string]float64
	maybe     map[string]float64
	nextTS    int64
	lateAcked int // acknowledged after the writer's lease had passed
}

func (l *ledger) write(ctx context.Context, r *region.Region, rng *rand.Rand, rows int, leaseGone func() bool) error {
	l.mu.Lock()
	pts := make([]row.Point, rows)
	vals := map[string]float64{}
	for i := range pts {
		host := fmt.Sprintf("h%d", rng.IntN(4))
		l.nextTS++
		v := rng.Float64()
		vals[key(host, l.nextTS)] = v
		pts[i] = row.Point{Tags: []row.Tag{{Name: "host", Value: host}}, TS: l.nextTS, Fields: []row.Field{{Name: "v", Value: row.FloatValue(v)}}}
	}
	l.mu.Unlock()
	_, err := r.Write(ctx, pts)
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, v := range vals {
		if err == nil {
			l.acked[k] = v
		} else {
			l.maybe[k] = v
		}
	}
	if err == nil && leaseGone() {
		l.lateAcked++
	}
	return err
}

// campaignCounts are the campaign's verdicts, summed over its cases.
type campaignCounts struct{ runs, streamRuns, lost, liveDeleted, unowned, bricked, lateAcked int }

// ownershipCase is one interleaving: the former owner A runs its queued
// work and is paused at its call pauseAt; meanwhile the new owner B opens,
// writes, flushes, compacts and runs fast GC with no lingering and full GC
// with no minimum age; then A resumes and finishes its queued work. With
// leased, A's lease passes the moment B opens (metasrv moves a region only
// after its owner's lease expired); without, A never learns (a planned
// move, or a clock that lies), and only the store's fences stop it. It
// returns A's call count (0 once pauseAt is past A's last call).
//
// With streams, each owner is a datanode writing a shared WAL stream
// (wal.Stream) through its own view of the store, and a neighbour region
// shares the former owner's stream, so the new owner's seal rolls the
// stream over under a region that stays. Without, each owner writes a
// stream of its own, which its open starts.
func ownershipCase(t *testing.T, seed uint64, pauseAt int, leased, streams bool, c *campaignCounts) int {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, uint64(pauseAt)))
	inner := objstoretest.Mem(t)
	quiet := quietLogger()
	base := region.Options{Logger: quiet, FlushBytes: 1 << 30, CheckpointDistance: 2 + rng.IntN(3), RowGroupRows: 16}
	// node gives an owner its datanode's stream over store (none without
	// streams: the region starts its own).
	var nodes int
	node := func(o region.Options, store objstore.Bucket) region.Options {
		if streams {
			nodes++
			name := fmt.Sprintf("dn%d", nodes)
			var n int
			o.Stream = wal.NewStream(store, wal.StreamOptions{NewID: func() string { n++; return fmt.Sprintf("%s/%d", name, n) }})
			t.Cleanup(func() { _ = o.Stream.Close() })
		}
		return o
	}
	led := &ledger{acked: map[string]float64{}, maybe: map[string]float64{}}
	never := func() bool { return false }

	// A first owner leaves files and a WAL behind.
	o := node(base, inner)
	o.Create = true
	s, err := region.Open(ctx, inner, orid, o)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 + rng.IntN(2) {
		if err := led.write(ctx, s, rng, 5, never); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := led.write(ctx, s, rng, 5, never); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx, region.CloseOptions{}); err != nil {
		t.Fatal(err)
	}

	// A: the owner that will be overtaken.
	g := newGate(inner, pauseAt)
	var leaseMu sync.Mutex
	leaseEnd := time.Now().Add(time.Hour)
	aLease := func() time.Time { leaseMu.Lock(); defer leaseMu.Unlock(); return leaseEnd }
	aGone := func() bool { return leased && !time.Now().Before(aLease()) }
	ao := node(base, g)
	if leased {
		ao.Lease = aLease
	}
	var neighbour *region.Region
	if streams {
		no := ao
		no.Lease, no.Create = nil, true
		if neighbour, err = region.Open(ctx, inner, nrid, no); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = neighbour.Close(ctx, region.CloseOptions{}) }()
	}
	nled := &ledger{acked: map[string]float64{}, maybe: map[string]float64{}}
	aRng := rand.New(rand.NewPCG(seed, uint64(pauseAt)+1<<32))
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		a, err := region.Open(ctx, g, orid, ao)
		if err != nil {
			return // fenced while opening
		}
		defer func() { _ = a.Close(ctx, region.CloseOptions{}) }()
		sched := compact.NewScheduler(compact.SchedulerOptions{Logger: quiet})
		defer func() { _ = sched.Close() }()
		// A's steps fail once it is overtaken, and may fail before: what
		// counts is the outcome (the ledger records each write as acknowledged
		// or not, and C checks the store).
		steps := []func(){
			func() {
				if neighbour != nil {
					_ = nled.write(ctx, neighbour, aRng, 2, never)
				}
				_ = led.write(ctx, a, aRng, 3, aGone)
			},
			func() { _ = led.write(ctx, a, aRng, 3, aGone) },
			func() { _ = a.Flush(ctx) },
			func() { _ = led.write(ctx, a, aRng, 3, aGone) },
			func() { _, _ = sched.Compact(ctx, a, true) },
			func() { _, _ = gc.Fast(ctx, a, gc.Options{Lingering: -1, JobRunning: sched.JobRunning}) },
			func() { _ = led.write(ctx, a, aRng, 3, aGone) },
			func() { _ = a.Flush(ctx) },
			func() { _, _ = gc.Full(ctx, a, gc.FullOptions{MinAge: -1}) },
			func() { _ = led.write(ctx, a, aRng, 3, aGone) },
		}
		aRng.Shuffle(len(steps)-2, func(i, j int) { steps[i+2], steps[j+2] = steps[j+2], steps[i+2] })
		for _, step := range steps {
			step()
		}
	}()
	select {
	case <-g.paused:
	case <-aDone:
		return 0 // pauseAt is past A's last call
	}

	// B: the new owner, while A is paused.
	if leased {
		leaseMu.Lock()
		leaseEnd = time.Now()
		leaseMu.Unlock()
	}
	bo := node(base, inner)
	b, err := region.Open(ctx, inner, orid, bo)
	if err != nil {
		objs, _ := objstore.ListAll(ctx, inner, orid.Prefix(), 1000)
		var ks []string
		for _, o := range objs {
			ks = append(ks, o.Key)
		}
		close(g.resume)
		<-aDone
		t.Fatalf("seed %d pause %d: the new owner cannot open: %v (store: %v) paused at %s", seed, pauseAt, err, ks, g.stack)
	}
	bsched := compact.NewScheduler(compact.SchedulerOptions{Logger: quiet})
	for range 1 + rng.IntN(3) {
		if err := led.write(ctx, b, rng, 4, never); err != nil {
			t.Fatalf("seed %d pause %d: the new owner's write: %v", seed, pauseAt, err)
		}
		if err := b.Flush(ctx); err != nil {
			t.Fatalf("seed %d pause %d: the new owner's flush: %v", seed, pauseAt, err)
		}
	}
	if rng.IntN(2) == 0 {
		if _, err := bsched.Compact(ctx, b, true); err != nil {
			t.Fatalf("seed %d pause %d: the new owner's compaction: %v", seed, pauseAt, err)
		}
	}
	if _, err := gc.Fast(ctx, b, gc.Options{Lingering: -1, JobRunning: bsched.JobRunning}); err != nil {
		t.Fatalf("seed %d pause %d: the new owner's fast GC: %v", seed, pauseAt, err)
	}
	if _, err := gc.Full(ctx, b, gc.FullOptions{MinAge: -1}); err != nil {
		t.Fatalf("seed %d pause %d: the new owner's full GC: %v", seed, pauseAt, err)
	}

	// A wakes and does what it had queued.
	close(g.resume)
	<-aDone
	calls := g.Calls()
	if neighbour != nil {
		// The neighbour stays on A's node and goes on writing.
		if err := nled.write(ctx, neighbour, rng, 2, never); err != nil {
			t.Errorf("seed %d pause %d: the neighbour's write after A woke: %v", seed, pauseAt, err)
		}
	}

	// B goes on: it still writes and flushes.
	if err := led.write(ctx, b, rng, 4, never); err != nil && !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("seed %d pause %d: the new owner's write after A woke: %v", seed, pauseAt, err)
	}
	if err := b.Flush(ctx); err != nil && !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("seed %d pause %d: the new owner's flush after A woke: %v", seed, pauseAt, err)
	}
	if err := bsched.Close(); err != nil {
		t.Fatalf("seed %d pause %d: the new owner's compactions: %v", seed, pauseAt, err)
	}
	if err := b.Close(ctx, region.CloseOptions{}); err != nil {
		t.Fatalf("seed %d pause %d: the new owner's close: %v", seed, pauseAt, err)
	}

	// C: an owner opening after everything, on a clock past every upload
	// window, checks the outcome and reclaims what may be reclaimed.
	later := func() time.Time { return time.Now().Add(manifest.UploadWindow + manifest.MaxClockSkew + time.Minute) }
	co := node(base, inner)
	co.Now = later
	c.runs++
	if streams {
		c.streamRuns++
	}
	cr, err := region.Open(ctx, inner, orid, co)
	if err != nil {
		c.bricked++
		t.Errorf("seed %d pause %d leased=%v: the region does not reopen: %v", seed, pauseAt, leased, err)
		return calls
	}
	defer func() { _ = cr.Close(ctx, region.CloseOptions{}) }()
	for id := range cr.Manifest().Files {
		if _, err := inner.Attributes(ctx, orid.SSTKey(id)); err != nil {
			c.liveDeleted++
			t.Errorf("seed %d pause %d leased=%v: live file %s: %v", seed, pauseAt, leased, id, err)
		}
	}
	got := map[string]float64{}
	sc, err := cr.Scan(ctx, scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
	if err == nil {
		for sc.Next() {
			for _, e := range sc.Batch() {
				got[key(row.SeriesTag(e.Series, "host"), e.TS)] = e.Fields[0].Float()
			}
		}
		err = sc.Err()
		sc.Close()
	}
	if err != nil {
		c.lost++
		t.Errorf("seed %d pause %d leased=%v: scan: %v", seed, pauseAt, leased, err)
	}
	for k, v := range led.acked {
		if g, ok := got[k]; !ok || g != v {
			c.lost++
			t.Errorf("seed %d pause %d leased=%v: acknowledged %s=%v reads back as %v (present %v)", seed, pauseAt, leased, k, v, g, ok)
		}
	}
	for k, v := range got {
		if _, ok := led.acked[k]; !ok && led.maybe[k] != v {
			t.Errorf("seed %d pause %d leased=%v: %s=%v was never written", seed, pauseAt, leased, k, v)
		}
	}
	c.lateAcked += led.lateAcked
	if led.lateAcked > 0 {
		t.Errorf("seed %d pause %d: %d writes acknowledged after the lease had passed", seed, pauseAt, led.lateAcked)
	}
	if _, err := gc.Fast(ctx, cr, gc.Options{Lingering: -1}); err != nil {
		t.Errorf("seed %d pause %d leased=%v: fast GC: %v", seed, pauseAt, leased, err)
	}
	// An independent full listing, classified against the final state.
	listed, err := objstore.ListAll(ctx, inner, orid.Prefix(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	st := cr.Manifest()
	for _, o := range gc.ClassifyAll(orid, st, listed, time.Now()) {
		if o.Owner == gc.OwnerNone {
			c.unowned++
			t.Errorf("seed %d pause %d leased=%v: unowned %s", seed, pauseAt, leased, o.Key)
		}
	}
	if streams {
		// The neighbour's every acknowledged row is there too, read by a
		// next owner.
		if err := neighbour.Close(ctx, region.CloseOptions{}); err != nil {
			t.Fatalf("seed %d pause %d: the neighbour's close: %v", seed, pauseAt, err)
		}
		nr, err := region.Open(ctx, inner, nrid, node(base, inner))
		if err != nil {
			t.Fatalf("seed %d pause %d: the neighbour does not reopen: %v", seed, pauseAt, err)
		}
		defer func() { _ = nr.Close(ctx, region.CloseOptions{}) }()
		ngot := scanValues(t, nr)
		for k, v := range nled.acked {
			if g, ok := ngot[k]; !ok || g != v {
				c.lost++
				t.Errorf("seed %d pause %d leased=%v: the neighbour's acknowledged %s=%v reads back as %v (present %v)", seed, pauseAt, leased, k, v, g, ok)
			}
		}
	}
	// fsck finds every WAL stream segment owned: the node's, or each
	// owner's own.
	rep, err := fsck.Check(ctx, inner, fsck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range rep.Orphans {
		c.unowned++
		t.Errorf("seed %d pause %d leased=%v: unowned %s", seed, pauseAt, leased, o.Key)
	}
	if err := led.write(ctx, cr, rng, 2, never); err != nil {
		t.Errorf("seed %d pause %d leased=%v: the final owner cannot write: %v", seed, pauseAt, leased, err)
	}
	return calls
}

// TestOwnershipCampaign interleaves two owners of one region at every call
// index of the former one (see ownershipCase), over seeded workloads, with
// and without a lease, until at least 1,000 cases have run. After each: every
// acknowledged row reads back, the region reopens, no live file is
// missing, and after GC nothing is unowned. STRATA_SEED replays a run.
func TestOwnershipCampaign(t *testing.T) {
	s0 := testseed.Seed(t)
	const want = 1000
	var c campaignCounts
	for round := uint64(0); c.runs < want && round < 200; round++ {
		seed := s0 + round
		leased, streams := round%2 == 1, round%4 >= 2
		for pause := 1; ; pause++ {
			if ownershipCase(t, seed, pause, leased, streams, &c) == 0 {
				break
			}
			if t.Failed() && c.runs > 50 {
				break // enough to diagnose
			}
		}
		if t.Failed() {
			break
		}
	}
	fmt.Printf("ownership campaign: runs=%d (shared WAL stream: %d) lost=%d live_deleted=%d unowned=%d bricked=%d\n", c.runs, c.streamRuns, c.lost, c.liveDeleted, c.unowned, c.bricked)
	if c.runs < want && !t.Failed() {
		t.Fatalf("only %d cases ran", c.runs)
	}
	if c.lateAcked > 0 {
		t.Fatalf("%d writes were acknowledged after their lease", c.lateAcked)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fenceGate pauses the first WAL create made through it (a recovering
// owner's seal of the stream it replays) until resume is closed.
type fenceGate struct {
	objstore.Bucket
	once   sync.Once
	paused chan struct{}
	resume chan struct{}
}

func (g *fenceGate) CreateIfAbsent(ctx context.Context, key string, data []byte) error {
	if strings.HasPrefix(key, layout.StreamsPrefix) {
		g.once.Do(func() { close(g.paused); <-g.resume })
	}
	return g.Bucket.CreateIfAbsent(ctx, key, data)
}

// unownedStreamSegments lists the stream segments in s that the region of
// state st does not answer for: not referenced, released or a recorded
// fence, and not the newest segment of w, its live stream (never deleted
// before it is sealed).
func unownedStreamSegments(t *testing.T, s objstore.Bucket, st *manifest.State, w *wal.Stream) []string {
	t.Helper()
	var out []string
	for _, key := range streamKeys(t, s) {
		stream, n, _ := layout.ParseStreamKey(key)
		next, live := w.Next(stream)
		released := slices.ContainsFunc(st.StreamGarbage, func(g manifest.StreamRef) bool { return g.Needs(stream, n) })
		fence := slices.Contains(st.StreamFences, manifest.StreamRef{Stream: stream, End: n})
		if !st.NeedsStream(stream, n) && !released && !fence && (!live || n != next-1) {
			out = append(out, key)
		}
	}
	return out
}

// Three owners: owner 2 is overtaken while it replays. Owner 1 appends
// after owner 2 listed its WAL stream, owner 3 replays, seals, flushes and
// collects that segment, and owner 2's late fence then lands in the number
// GC freed. The overtaken owner finds itself fenced and deletes the fence
// it landed below owner 3's seal: nothing is left unowned.
func TestOvertakenRecoveryLeavesNoUnownedFence(t *testing.T) {
	ctx := context.Background()
	s := objstoretest.Mem(t)
	quiet := quietLogger()
	led := &ledger{acked: map[string]float64{}, maybe: map[string]float64{}}
	rng := rand.New(rand.NewPCG(1, 2))
	never := func() bool { return false }
	one, err := region.Open(ctx, s, orid, region.Options{Create: true, Logger: quiet, FlushBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = one.Close(ctx, region.CloseOptions{}) }()
	if err := led.write(ctx, one, rng, 2, never); err != nil {
		t.Fatal(err)
	}
	g := &fenceGate{Bucket: s, paused: make(chan struct{}), resume: make(chan struct{})}
	var twoErr error
	twoDone := make(chan struct{})
	go func() {
		defer close(twoDone)
		var two *region.Region
		two, twoErr = region.Open(ctx, g, orid, region.Options{Logger: quiet, FlushBytes: 1 << 30})
		if twoErr == nil {
			_ = two.Close(ctx, region.CloseOptions{})
		}
	}()
	<-g.paused                                                 // owner 2 listed the WAL and is about to write its fence
	if err := led.write(ctx, one, rng, 2, never); err != nil { // lands at owner 2's fence number
		t.Fatal(err)
	}
	three, err := region.Open(ctx, s, orid, region.Options{Logger: quiet, FlushBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = three.Close(ctx, region.CloseOptions{}) }()
	if err := led.write(ctx, three, rng, 2, never); err != nil {
		t.Fatal(err)
	}
	if err := three.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := gc.Fast(ctx, three, gc.Options{Lingering: -1}); err != nil {
		t.Fatal(err)
	}
	close(g.resume)
	<-twoDone
	if !errors.Is(twoErr, fence.ErrFenced) {
		t.Fatalf("the overtaken owner opened: %v", twoErr)
	}
	listed, err := objstore.ListAll(ctx, s, orid.Prefix(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range gc.ClassifyAll(orid, three.Manifest(), listed, time.Now()) {
		if o.Owner == gc.OwnerNone {
			t.Errorf("unowned %s", o.Key)
		}
	}
	for _, k := range unownedStreamSegments(t, s, three.Manifest(), three.WALStream()) {
		t.Errorf("unowned %s", k)
	}
	sc, err := three.Scan(ctx, scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for sc.Next() {
		n += len(sc.Batch())
	}
	sc.Close()
	if n != len(led.acked) {
		t.Fatalf("%d rows read, %d acknowledged", n, len(led.acked))
	}
}
