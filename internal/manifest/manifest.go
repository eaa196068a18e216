package manifest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore"
)

// Sentinel errors.
var (
	// ErrRegionNotFound: no manifest exists and Options.Create is false.
	ErrRegionNotFound = errors.New("manifest: region not found")
	// ErrGap: a delta version is missing between the checkpoint and a later
	// delta.
	ErrGap = errors.New("manifest: gap in delta versions")
	// ErrAmbiguous: a commit's outcome is unknown (the store failed while
	// reporting it). The next Commit resolves it first by reading the delta
	// back; until then, no cleanup may rely on the commit having failed.
	ErrAmbiguous = errors.New("manifest: commit outcome unknown")
	// ErrClosed: the manifest was closed.
	ErrClosed = errors.New("manifest: closed")
)

// Options configure a Manifest.
type Options struct {
	// CheckpointDistance is the number of deltas between checkpoints
	// (default 10).
	CheckpointDistance int
	// Create makes Open create the region if it has no manifest.
	Create bool
	// ReadOnly opens without taking ownership: no epoch is committed and
	// Commit fails. For fsck and tests.
	ReadOnly bool
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Manifest is one region's manifest, open for writing by one owner.
type Manifest struct {
	store  objstore.Bucket
	region layout.RegionID
	opts   Options
	writer string // unique per Open; makes every delta's bytes unique

	mu    sync.Mutex
	state *State
	// view is state, published for View without mu: a commit holds mu
	// across its store write, and a scan (under its region's lock) must
	// not wait on that.
	view         atomic.Pointer[State]
	err          error  // sticky: fence.ErrFenced or ErrClosed
	unknown      []byte // the delta whose commit is ambiguous, if any
	pendingState *State // the state that delta would make
	checkpoint   uint64 // latest checkpoint version known (0: none)
	lowestDelta  uint64 // lowest delta version that may still exist
	oldCkpts     []uint64
}

// Open reads the region's manifest: the latest checkpoint plus every later
// delta. Unless ReadOnly, it then commits a WriterEpoch one above the last
// owner's, which fences any previous writer.
func Open(ctx context.Context, store objstore.Bucket, region layout.RegionID, opts Options) (*Manifest, error) {
	if opts.CheckpointDistance <= 0 {
		opts.CheckpointDistance = 10
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	// A former owner may still be committing while this one opens: its
	// checkpoint can delete the deltas and the checkpoint a listing just
	// saw (which looks like a gap or a missing object), and its commit can
	// take the version this owner's epoch needed. A fresh start resolves
	// both; a real gap persists, and the former owner is fenced by the
	// first epoch that lands.
	const attempts = 10
	var err error
	for attempt := 1; ; attempt++ {
		m := &Manifest{store: store, region: region, opts: opts, writer: hex.EncodeToString(rnd[:])}
		err = m.recover(ctx)
		raced := errors.Is(err, ErrGap) || errors.Is(err, objstore.ErrNotFound)
		if err == nil {
			m.view.Store(m.state)
			if m.state.Version == 0 && !opts.Create {
				return nil, fmt.Errorf("%w: %s", ErrRegionNotFound, region)
			}
			if opts.ReadOnly {
				return m, nil
			}
			if _, err = m.Commit(ctx, Action{Epoch: &WriterEpoch{Epoch: m.state.Epoch + 1}}); err == nil {
				return m, nil
			}
			err = fmt.Errorf("manifest: take ownership of region %s: %w", region, err)
			raced = errors.Is(err, fence.ErrFenced)
		}
		if !raced || attempt == attempts {
			return nil, err
		}
	}
}

// recover loads the latest checkpoint and replays later deltas.
func (m *Manifest) recover(ctx context.Context) error {
	objs, err := objstore.ListAll(ctx, m.store, m.region.ManifestPrefix(), 1000)
	if err != nil {
		return fmt.Errorf("manifest: list region %s: %w", m.region, err)
	}
	var deltas, ckpts []uint64
	for _, o := range objs {
		v, isCkpt, ok := m.region.ParseManifestKey(o.Key)
		switch {
		case !ok:
			continue
		case isCkpt:
			ckpts = append(ckpts, v)
		default:
			deltas = append(deltas, v)
		}
	}
	slices.Sort(deltas)
	slices.Sort(ckpts)
	m.state = newState()
	if n := len(ckpts); n > 0 {
		v := ckpts[n-1]
		key := m.region.CheckpointKey(v)
		data, err := m.store.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("manifest: read checkpoint %s: %w", key, err)
		}
		if m.state, err = decodeCheckpoint(m.region.String(), key, v, data); err != nil {
			return err
		}
		m.checkpoint = v
		m.oldCkpts = ckpts[:n-1]
	}
	if len(deltas) > 0 {
		m.lowestDelta = deltas[0]
	} else {
		m.lowestDelta = m.state.Version + 1
	}
	if m.state.Version == 0 && len(deltas) > 0 && deltas[0] != 1 {
		return fmt.Errorf("%w: region %s has no checkpoint and its first delta is version %d", ErrGap, m.region, deltas[0])
	}
	for {
		v := m.state.Version + 1
		key := m.region.DeltaKey(v)
		data, err := m.store.Get(ctx, key)
		if errors.Is(err, objstore.ErrNotFound) {
			if last := lastOr(deltas, 0); last > m.state.Version {
				return fmt.Errorf("%w: region %s: version %d missing, version %d exists", ErrGap, m.region, v, last)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("manifest: read delta %s: %w", key, err)
		}
		at, actions, err := decodeDelta(m.region.String(), key, v, data)
		if err != nil {
			return err
		}
		for _, a := range actions {
			if err := m.state.apply(a, at); err != nil {
				return &CorruptError{Region: m.region.String(), Version: v, Key: key, Reason: err.Error()}
			}
		}
		m.state.Version = v
	}
}

func lastOr(s []uint64, d uint64) uint64 {
	if len(s) == 0 {
		return d
	}
	return s[len(s)-1]
}

// State returns a copy of the current state.
func (m *Manifest) State() *State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.Clone()
}

// View returns the current state itself, which the caller must not
// modify: an open manifest never changes a state it has published (a
// commit applies its actions to a copy and then swaps it in), so a reader
// on a hot path (every scan) need not copy every file's entry. It takes
// no lock, so it never waits for a commit's store write.
func (m *Manifest) View() *State { return m.view.Load() }

// publishLocked makes s the current state.
func (m *Manifest) publishLocked(s *State) {
	m.state = s
	m.view.Store(s)
}

// Commit applies actions atomically as the next delta and returns its
// version. It returns ErrInvalidAction (nothing written) if they do not apply,
// fence.ErrFenced if another writer owns the region, and ErrAmbiguous if the outcome
// is unknown. Any other error means the delta was not committed.
func (m *Manifest) Commit(ctx context.Context, actions ...Action) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.opts.ReadOnly {
		return 0, errors.New("manifest: opened read-only")
	}
	if m.err != nil {
		return 0, m.err
	}
	if len(actions) == 0 {
		return 0, fmt.Errorf("%w: empty action list", ErrInvalidAction)
	}
	if m.unknown != nil {
		if err := m.resolveUnknownLocked(ctx); err != nil {
			return 0, err
		}
	}
	v := m.state.Version + 1
	at := m.opts.Now().UTC().Round(0)
	next := m.state.Clone()
	for _, a := range actions {
		if err := next.apply(a, at); err != nil {
			return 0, err
		}
	}
	next.Version = v
	data, err := encodeDelta(m.region.String(), v, m.writer, at, actions)
	if err != nil {
		return 0, fmt.Errorf("manifest: encode delta: %w", err)
	}
	key := m.region.DeltaKey(v)
	err = m.store.CreateIfAbsent(ctx, key, data)
	switch {
	case errors.Is(err, objstore.ErrPreconditionFailed):
		m.err = fmt.Errorf("%w: region %s version %d was committed by another writer", fence.ErrFenced, m.region, v)
		return 0, m.err
	case err != nil:
		// The create may have landed, or may still land.
		serr := m.settleLocked(ctx, v, data, next)
		switch {
		case serr == nil:
			return v, nil
		case errors.Is(serr, errNotLanded):
			return 0, fmt.Errorf("manifest: write delta %s: %w", key, err)
		}
		return 0, fmt.Errorf("write %s: %v: %w", key, err, serr)
	}
	if err := m.checkNotFencedLocked(ctx, v); err != nil {
		if errors.Is(err, ErrAmbiguous) {
			// The delta landed but the store could not say whether we
			// still own the region: settle both before the next commit.
			m.unknown = data
			m.pendingState = next
		}
		return 0, err
	}
	m.publishLocked(next)
	m.maybeCheckpointLocked(ctx)
	return v, nil
}

// errNotLanded: settleLocked proved that the create did not land.
var errNotLanded = errors.New("manifest: the delta did not land")

// voidDelta is this writer's void delta at version v: no actions. Its bytes
// are deterministic, so a retried create of it is recognized.
func (m *Manifest) voidDelta(v uint64) []byte {
	data, _ := encodeDelta(m.region.String(), v, m.writer, time.Unix(0, 0), nil)
	return data
}

// settleLocked learns the outcome of an uncertain create of delta v (data,
// which would make the state next). A read-back that finds nothing does not
// prove the create failed: a PUT whose client gave up after sending it may
// still be committed by the store later. So v is claimed with a void delta
// by a create-if-absent: once v exists, the original create (conditional
// too) can never land. It returns nil if v holds data (the state is then
// next), errNotLanded if v holds our void (the state moves to v, unchanged),
// ErrAmbiguous while the store cannot tell (kept for the next commit or
// Settle), and fence.ErrFenced if another writer holds v.
func (m *Manifest) settleLocked(ctx context.Context, v uint64, data []byte, next *State) error {
	key := m.region.DeltaKey(v)
	keep := func(err error) error {
		m.unknown, m.pendingState = data, next
		return err
	}
	void := m.voidDelta(v)
	got, err := m.store.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		cerr := m.store.CreateIfAbsent(ctx, key, void)
		switch {
		case cerr == nil:
			got, err = void, nil
		case errors.Is(cerr, objstore.ErrPreconditionFailed):
			got, err = m.store.Get(ctx, key) // it landed meanwhile, or another writer's
		default:
			return keep(fmt.Errorf("%w: claim %s with a void delta: %v", ErrAmbiguous, key, cerr))
		}
	}
	if err != nil {
		return keep(fmt.Errorf("%w: re-read %s: %v", ErrAmbiguous, key, err))
	}
	result := next
	switch {
	case string(got) == string(data):
	case string(got) == string(void):
		result = m.state.Clone()
		result.Version = v
	default:
		m.unknown, m.pendingState = nil, nil
		m.err = fmt.Errorf("%w: region %s: %s was committed by another writer", fence.ErrFenced, m.region, key)
		return m.err
	}
	if err := m.checkNotFencedLocked(ctx, v); err != nil {
		if errors.Is(err, ErrAmbiguous) {
			return keep(err)
		}
		m.unknown, m.pendingState = nil, nil
		return err
	}
	m.unknown, m.pendingState = nil, nil
	m.publishLocked(result)
	m.maybeCheckpointLocked(ctx)
	if result != next {
		return errNotLanded
	}
	return nil
}

// resolveUnknownLocked settles an ambiguous commit before the next one.
func (m *Manifest) resolveUnknownLocked(ctx context.Context) error {
	err := m.settleLocked(ctx, m.pendingState.Version, m.unknown, m.pendingState)
	if errors.Is(err, errNotLanded) {
		return nil
	}
	return err
}

// Settle resolves an ambiguous commit, if there is one, by reading the delta
// back. Afterwards State tells whether it landed. It returns ErrAmbiguous
// while the store cannot answer, and fence.ErrFenced if another writer took the
// version.
func (m *Manifest) Settle(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unknown == nil {
		return nil
	}
	return m.resolveUnknownLocked(ctx)
}

// checkNotFencedLocked runs after this writer created delta v. A store
// failure leaves ownership unverified: it returns ErrAmbiguous (not
// sticky), and the commit is settled by the next Commit or Settle. Deltas are
// deleted only below a checkpoint and in ascending order, so if another
// writer had checkpointed past v and deleted v (which let our create
// succeed), it deleted v-1 first. Delta v-1 was read or written by this
// writer, so its absence proves we are fenced. For v = 1 there is no v-1:
// list the manifest for a checkpoint instead (region creation only).
func (m *Manifest) checkNotFencedLocked(ctx context.Context, v uint64) error {
	fenced := func(why string) error {
		m.err = fmt.Errorf("%w: region %s version %d: %s", fence.ErrFenced, m.region, v, why)
		return m.err
	}
	if v == 1 {
		objs, err := objstore.ListAll(ctx, m.store, m.region.ManifestPrefix(), 1000)
		if err != nil {
			return fmt.Errorf("%w: region %s version %d landed, but ownership cannot be verified: %v", ErrAmbiguous, m.region, v, err)
		}
		for _, o := range objs {
			if _, isCkpt, ok := m.region.ParseManifestKey(o.Key); ok && isCkpt {
				return fenced("a checkpoint exists above a newly created region")
			}
		}
		return nil
	}
	_, err := m.store.Attributes(ctx, m.region.DeltaKey(v-1))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, objstore.ErrNotFound):
		return fenced("the previous delta was deleted by a later checkpoint")
	default:
		return fmt.Errorf("%w: region %s version %d landed, but ownership cannot be verified: %v", ErrAmbiguous, m.region, v, err)
	}
}

// maybeCheckpointLocked writes a checkpoint once CheckpointDistance deltas
// have passed, then deletes older deltas (ascending) and checkpoints. Its
// failures never fail the commit: the next commit tries again.
func (m *Manifest) maybeCheckpointLocked(ctx context.Context) {
	v := m.state.Version
	if v-m.checkpoint < uint64(m.opts.CheckpointDistance) {
		return
	}
	data, err := encodeCheckpoint(m.region.String(), m.state)
	if err != nil {
		return
	}
	err = m.store.CreateIfAbsent(ctx, m.region.CheckpointKey(v), data)
	if errors.Is(err, objstore.ErrPreconditionFailed) {
		m.err = fmt.Errorf("%w: region %s: checkpoint %d written by another writer", fence.ErrFenced, m.region, v)
		return
	}
	if err != nil {
		return
	}
	if m.checkpoint != 0 {
		m.oldCkpts = append(m.oldCkpts, m.checkpoint)
	}
	m.checkpoint = v
	// INVARIANT: deltas are deleted in ascending order (see
	// checkNotFencedLocked), and delta v itself is kept.
	for m.lowestDelta < v {
		if err := m.store.Delete(ctx, m.region.DeltaKey(m.lowestDelta)); err != nil {
			return
		}
		m.lowestDelta++
	}
	for len(m.oldCkpts) > 0 {
		if err := m.store.Delete(ctx, m.region.CheckpointKey(m.oldCkpts[0])); err != nil {
			return
		}
		m.oldCkpts = m.oldCkpts[1:]
	}
}

// Verify proves that this writer still owns the region at the time of the
// call: its latest delta v is still there and no delta v+1 exists. A newer
// owner commits its epoch at v+1 before it touches anything else, and
// deltas are deleted only in ascending order below a later checkpoint, so
// either fact failing means the writer is fenced (sticky). Callers that act
// on a state read before Verify (full-listing GC) are then safe: nothing
// the newer owner does can make an object the old state called garbage
// owned again. A store failure returns ErrAmbiguous (not sticky).
func (m *Manifest) Verify(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	if m.unknown != nil {
		if err := m.resolveUnknownLocked(ctx); err != nil {
			return err
		}
	}
	v := m.state.Version
	_, err := m.store.Attributes(ctx, m.region.DeltaKey(v+1))
	switch {
	case err == nil:
		m.err = fmt.Errorf("%w: region %s: version %d was committed by another writer", fence.ErrFenced, m.region, v+1)
		return m.err
	case !errors.Is(err, objstore.ErrNotFound):
		return fmt.Errorf("%w: region %s: verify ownership: %v", ErrAmbiguous, m.region, err)
	}
	if v == 0 {
		return nil
	}
	_, err = m.store.Attributes(ctx, m.region.DeltaKey(v))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, objstore.ErrNotFound):
		m.err = fmt.Errorf("%w: region %s: version %d was deleted by a later checkpoint", fence.ErrFenced, m.region, v)
		return m.err
	default:
		return fmt.Errorf("%w: region %s: verify ownership: %v", ErrAmbiguous, m.region, err)
	}
}

// Close releases the manifest. Later commits fail with ErrClosed.
func (m *Manifest) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil {
		m.err = ErrClosed
	}
	return nil
}

// ReadState reads a region's manifest without taking ownership; nil if
// the region does not exist.
func ReadState(ctx context.Context, store objstore.Bucket, id layout.RegionID) (*State, error) {
	m, err := Open(ctx, store, id, Options{ReadOnly: true})
	if errors.Is(err, ErrRegionNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer m.Close()
	return m.State(), nil
}
