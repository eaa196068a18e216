package region

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
)

// abandonTimeout bounds an abandon's deletes and its resolving commit. They
// run whatever the job's context: a cancelled job cleans up too.
const abandonTimeout = 30 * time.Second

// OutputTxn is the commit protocol of a job that writes SSTs, written once
// for flushes and compactions (docs/compaction.md, "The commit protocol"):
//
//	Reserve(id) ... ──► UploadSST, PutSeries ──► Commit(edit) ──► done
//	      │                        │                         │ failed, and landed says it did not land:
//	      │ failed: nothing        │ failed or cancelled      │   ambiguous or fenced: return, delete nothing
//	      │ of id is written       ▼                          ▼   otherwise:
//	      └──────────────────► Abandon(cause): delete every reserved output, commit ResolvePending{job}
//
// INVARIANT: no object of an output is written before the marker naming
// its id has landed (an upload of an id not reserved fails), and every
// upload ends within the upload window from its reservation
// (UploadContext). So at every instant each output is owned by the
// marker, by the live set once the edit landed, or deleted.
//
// Every method but Commit may be called after a cancellation; a caller
// that stops before Commit calls Abandon. Reserve may run concurrently with
// the job's other calls (a compaction reserves its first output while its
// inputs open); Commit and Abandon come after every Reserve has returned.
type OutputTxn struct {
	r   *Region
	job string
	// commit writes the transaction's deltas: Region.Commit for a
	// compaction; for a flush the unchecked commit, since Close flushes a
	// region already marked closed (and flushAll records fencing).
	commit func(context.Context, ...manifest.Action) error
	// streams, if set, gives the WAL stream references the edit moves; it
	// is read and committed under streamMu (a flush).
	streams func(*manifest.State) *manifest.WALStreams

	mu       sync.Mutex
	reserved []string             // ids the persisted marker names, in order
	at       map[string]time.Time // reserved id -> its reservation time (the marker's CreatedAt)
}

// NewOutputTxn begins job's output transaction in r. Its manifest writes
// go through Commit: refused once r is closed or fenced, and a fencing
// failure fences r.
func (r *Region) NewOutputTxn(job string) *OutputTxn {
	return r.newOutputTxn(job, r.Commit)
}

func (r *Region) newOutputTxn(job string, commit func(context.Context, ...manifest.Action) error) *OutputTxn {
	return &OutputTxn{r: r, job: job, commit: commit, at: map[string]time.Time{}}
}

// Job is the job id the marker is committed under.
func (t *OutputTxn) Job() string { return t.job }

// Reserve commits (or extends) the job's pending-outputs marker with id
// (chosen by the caller, a new ULID). Once it returns nil the objects of id
// may be uploaded, within the upload window from now. If the commit fails
// and the manifest cannot show that it landed, nothing of id may be
// written, and the marker, if it did land, is left to GC.
func (t *OutputTxn) Reserve(ctx context.Context, id string) error {
	p := &manifest.PendingOutputs{JobID: t.job, FileIDs: []string{id}, Epoch: t.r.epoch, CreatedAt: t.r.opts.Now().UTC()}
	if err := t.commit(ctx, manifest.Action{Pending: p}); err != nil {
		// NB: settled without ctx's cancellation: a marker that landed
		// must be known, so that Abandon deletes what it owns.
		if !t.r.landed(context.WithoutCancel(ctx), func(s *manifest.State) bool { return slices.Contains(s.Pending[t.job].FileIDs, id) }) {
			return fmt.Errorf("reserve output: %w", err)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reserved = append(t.reserved, id)
	t.at[id] = p.CreatedAt
	return nil
}

// PutSeries writes reserved output id's series index.
func (t *OutputTxn) PutSeries(ctx context.Context, id string, index []byte) error {
	return t.put(ctx, id, t.r.id.SeriesKey(id), index)
}

// UploadSST streams reserved output id's SST from body, read until it
// reports io.EOF (objstore.Upload): for an SST still being encoded.
func (t *OutputTxn) UploadSST(ctx context.Context, id string, body io.ReaderAt) error {
	key := t.r.id.SSTKey(id)
	uctx, cancel, err := t.window(ctx, id)
	if err != nil {
		return err
	}
	defer cancel()
	if err := objstore.Upload(uctx, t.r.store, key, body, -1); err != nil {
		return fmt.Errorf("upload %s: %w", key, err)
	}
	return nil
}

func (t *OutputTxn) put(ctx context.Context, id, key string, data []byte) error {
	uctx, cancel, err := t.window(ctx, id)
	if err != nil {
		return err
	}
	defer cancel()
	if err := t.r.store.Put(uctx, key, data); err != nil {
		return fmt.Errorf("upload %s: %w", key, err)
	}
	return nil
}

// window is the context of an upload of id: the upload window from its
// reservation, not cancelled with ctx (UploadContext).
func (t *OutputTxn) window(ctx context.Context, id string) (context.Context, context.CancelFunc, error) {
	t.mu.Lock()
	at, ok := t.at[id]
	t.mu.Unlock()
	if !ok {
		return nil, nil, fmt.Errorf("job %s: output %s is not reserved: nothing would own it", t.job, id)
	}
	uctx, cancel := t.r.UploadContext(ctx, at)
	return uctx, cancel, nil
}

// Commit commits edit, the job's one delta, and with it resolves the
// marker: by Edit.Resolves if the edit adds outputs, by a ResolvePending
// beside it if it adds none (every reservation went unused). From the call
// on the outcome is the commit's; ctx should not be one a cancellation
// ends.
//
// If the commit fails, landed (over the re-read manifest) tells whether
// the edit landed all the same (then Commit returns nil). If it did not,
// or cannot be told: an ambiguous (manifest.ErrAmbiguous) or fencing
// (fence.ErrFenced) failure returns with nothing deleted, since the outputs
// may be live or are the newer owner's to collect; any other failure
// abandons the transaction.
func (t *OutputTxn) Commit(ctx context.Context, edit *manifest.Edit, landed func(*manifest.State) bool) error {
	t.mu.Lock()
	held := len(t.reserved) > 0
	t.mu.Unlock()
	actions := []manifest.Action{{Edit: edit}}
	switch {
	case held && len(edit.Add) > 0:
		edit.Resolves = t.job
	case held:
		actions = append(actions, manifest.Action{Resolve: &manifest.ResolvePending{JobID: t.job}})
	}
	var err error
	if t.streams != nil {
		t.r.streamMu.Lock()
		if sc := t.streams(t.r.man.State()); sc != nil {
			actions = append(actions, manifest.Action{Streams: sc})
		}
		err = t.commit(ctx, actions...)
		t.r.streamMu.Unlock()
	} else {
		err = t.commit(ctx, actions...)
	}
	if err == nil || t.r.landed(ctx, landed) {
		return nil
	}
	err = fmt.Errorf("commit: %w", err)
	if errors.Is(err, manifest.ErrAmbiguous) || errors.Is(err, fence.ErrFenced) {
		return err
	}
	return t.Abandon(ctx, err)
}

// Abandon ends a transaction that will not commit, and returns cause: it
// deletes every reserved output (idempotent: an output may not exist),
// then forgets the marker. If a step fails the marker stays and GC
// finishes the job; either way every output is deleted or owned when
// Abandon returns.
func (t *OutputTxn) Abandon(ctx context.Context, cause error) error {
	t.mu.Lock()
	reserved := slices.Clone(t.reserved)
	t.mu.Unlock()
	if len(reserved) == 0 {
		return cause
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	for _, id := range reserved {
		for _, key := range t.r.id.FileKeys(id) {
			if err := t.r.store.Delete(ctx, key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				return errors.Join(cause, fmt.Errorf("delete abandoned output %s (left to GC): %w", key, err))
			}
		}
	}
	if err := t.commit(ctx, manifest.Action{Resolve: &manifest.ResolvePending{JobID: t.job}}); err != nil {
		return errors.Join(cause, fmt.Errorf("resolve abandoned job %s (left to GC): %w", t.job, err))
	}
	return cause
}
