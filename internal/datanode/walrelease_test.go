package datanode_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/fsck"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server/servertest"
)

// streamSegments lists the WAL stream segments in s, by stream.
func streamSegments(t *testing.T, s objstore.Bucket) map[string][]uint64 {
	t.Helper()
	objs, err := objstore.ListAll(context.Background(), s, "wal/streams/", 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]uint64{}
	for _, o := range objs {
		stream, n, ok := layout.ParseStreamKey(o.Key)
		if !ok {
			t.Fatalf("not a stream segment: %s", o.Key)
		}
		out[stream] = append(out[stream], n)
	}
	return out
}

func countSegments(m map[string][]uint64) int {
	n := 0
	for _, ns := range m {
		n += len(ns)
	}
	return n
}

// loadAndFlush writes rounds batches into table m, each its own WAL
// segment, and flushes.
func loadAndFlush(t *testing.T, e *Engine, rounds int) {
	t.Helper()
	ctx := context.Background()
	for i := range rounds {
		batch := pts(200, "v", func(j int) row.Value { return row.FloatValue(float64(i*1000 + j)) })
		for j := range batch {
			batch[j].TS += int64(i * 1000)
		}
		if _, err := e.Write(ctx, "m", batch, WriteOptions{CreateTable: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Flush(ctx, "m"); err != nil {
		t.Fatal(err)
	}
}

// noOrphans runs full-listing GC on every region (no minimum age) and
// fsck over the whole store: neither may find an unowned object.
func noOrphans(t *testing.T, e *Engine, s objstore.Bucket) {
	t.Helper()
	ctx := context.Background()
	res, err := e.GC(ctx, datanode.GCRequest{Full: true, MinAge: -1, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if len(r.Listed.Orphans) != 0 {
			t.Fatalf("full GC of %s found unowned objects: %+v", r.Region, r.Listed.Orphans)
		}
	}
	rep, err := fsck.Check(ctx, s, fsck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OrphanCount() != 0 || rep.Missing() != 0 {
		t.Fatalf("fsck: %d unowned (%+v), %d missing", rep.OrphanCount(), rep.Orphans, rep.Missing())
	}
}

// TestFlushReleasesWALAtOnce: the WAL segments a flush lets go are deleted
// right after its commit, with no scheduled GC at all (the standalone here
// runs none), and every object left is owned.
func TestFlushReleasesWALAtOnce(t *testing.T) {
	s := objstoretest.Mem(t)
	released := make(chan datanode.GCResult, 100)
	_, e := openEngine(t, s, servertest.Options{Tune: func(o *datanode.Options) {
		o.AfterRelease = func(r datanode.GCResult) { released <- r }
	}})
	const rounds = 20
	loadAndFlush(t, e, rounds)
	// The release runs in the background: wait for runs until only the
	// newest segment of the node's live stream is left (kept: a new owner
	// seals the stream above it) and the runs reported deleting the rest.
	// Both are waited on: a release can finish its deletes before its
	// report reaches the channel.
	deadline := time.After(2 * time.Minute)
	deleted := 0
	for {
		segs := streamSegments(t, s)
		if len(segs) == 1 && countSegments(segs) == 1 && deleted >= rounds-1 {
			break
		}
		select {
		case r := <-released:
			if r.Err != nil {
				t.Fatalf("release of %s: %v", r.Region, r.Err)
			}
			deleted += r.Fast.Stream.Deleted
		case <-deadline:
			t.Fatalf("two minutes after the flush: segments %v, releases reported %d deleted of %d written", segs, deleted, rounds)
		}
	}
	if n, _ := count(t, e, "m", scan.Request{}); n != rounds*200 {
		t.Fatalf("%d rows after the release, want %d", n, rounds*200)
	}
	noOrphans(t, e, s)
}

// holdStreamDeletes holds every delete of a WAL stream segment until its
// context ends, and fails it then: a release cut short between the
// flush's commit and its deletes.
type holdStreamDeletes struct {
	objstore.Bucket
	mu      sync.Mutex
	hold    bool
	reached chan struct{}
	once    sync.Once
}

func (h *holdStreamDeletes) Delete(ctx context.Context, key string) error {
	h.mu.Lock()
	hold := h.hold
	h.mu.Unlock()
	if hold && strings.HasPrefix(key, "wal/streams/") {
		h.once.Do(func() { close(h.reached) })
		<-ctx.Done()
		return ctx.Err()
	}
	return h.Bucket.Delete(ctx, key)
}

func (h *holdStreamDeletes) setHold(v bool) { h.mu.Lock(); h.hold = v; h.mu.Unlock() }

// TestReleaseCutShortLeavesWALToFastGC: a node that stops (its release
// cancelled) after the flush committed and before its first delete loses
// nothing and leaves nothing unowned: the released segments stay in the
// manifest's stream garbage, and fast GC of the next owner deletes them.
func TestReleaseCutShortLeavesWALToFastGC(t *testing.T) {
	ctx := context.Background()
	s := &holdStreamDeletes{Bucket: objstoretest.Mem(t), hold: true, reached: make(chan struct{})}
	dir := t.TempDir()
	n, e := openEngine(t, s, servertest.Options{Dir: dir})
	const rounds = 20
	loadAndFlush(t, e, rounds)
	select {
	case <-s.reached:
	case <-time.After(2 * time.Minute):
		t.Fatal("no release began after the flush")
	}
	id := e.LocalRegions("m")[0].ID()
	n.Stop() // cancels the release held in its first delete
	segs := countSegments(streamSegments(t, s))
	st, err := manifest.ReadState(ctx, s, id)
	if err != nil {
		t.Fatal(err)
	}
	if segs < rounds || len(st.StreamGarbage) == 0 {
		t.Fatalf("after the cut-short release: %d segments, stream garbage %+v", segs, st.StreamGarbage)
	}
	noOrphansOffline(t, s)

	s.setHold(false)
	_, e = openEngine(t, s, servertest.Options{Dir: dir, Tune: func(o *datanode.Options) {
		o.AfterRelease = func(r datanode.GCResult) { t.Errorf("a release ran with no flush: %+v", r) }
	}})
	servertest.WaitHosted(t, e, "m")
	if got := countSegments(streamSegments(t, s)); got < segs {
		t.Fatalf("%d segments before fast GC, %d when the node stopped", got, segs)
	}
	res, err := e.GC(ctx, datanode.GCRequest{})
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for _, r := range res {
		deleted += r.Fast.Stream.Deleted
	}
	// All but the old stream's fence (kept), and what the new stream holds.
	left := streamSegments(t, s)
	if deleted < rounds || countSegments(left) > 2 {
		t.Fatalf("fast GC deleted %d segments; left %v", deleted, left)
	}
	if n, _ := count(t, e, "m", scan.Request{}); n != rounds*200 {
		t.Fatalf("%d rows after fast GC, want %d", n, rounds*200)
	}
	noOrphans(t, e, s)
}

// noOrphansOffline checks a stopped node's store with fsck.
func noOrphansOffline(t *testing.T, s objstore.Bucket) {
	t.Helper()
	rep, err := fsck.Check(context.Background(), s, fsck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OrphanCount() != 0 || rep.Missing() != 0 {
		t.Fatalf("fsck: %d unowned (%+v), %d missing", rep.OrphanCount(), rep.Orphans, rep.Missing())
	}
	if rep.Streams.AwaitingGC == 0 {
		t.Fatalf("fsck: no stream segment awaiting GC: %+v", rep.Streams)
	}
}
