package region

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/fence"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/memtable"
	"github.com/stratadb/strata/internal/merge"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/sst"
)

// Flush writes every memtable holding data as of the call to SSTs.
func (r *Region) Flush(ctx context.Context) error {
	if err := r.usable(); err != nil {
		return err
	}
	return r.flushAll(ctx)
}

func (r *Region) flushAll(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	if r.fatal != nil {
		r.mu.Unlock()
		return r.fatal
	}
	if r.active.Stats().Entries > 0 {
		r.active.Freeze()
		r.immutable = append(r.immutable, r.active)
		r.active = r.active.Successor()
	}
	todo := append([]*memtable.Memtable(nil), r.immutable...)
	r.mu.Unlock()
	// INVARIANT: memtables flush oldest first, so the flushed sequence
	// never skips data of an older one.
	for _, mt := range todo {
		if err := r.flushOne(ctx, mt); err != nil {
			return r.setFatal(err)
		}
	}
	return nil
}

// flushOne writes one frozen memtable as an SST with the commit protocol:
//
//	commit Pending{job, [id]}  ->  upload sst/{id}.parquet  ->  commit Edit{add id, flushed seq, resolves job}
//	        \ failure: nothing to clean    \ failure: delete the SST, commit Resolve{job}
//
// A crash anywhere leaves the SST owned by the marker (GC deletes it) or by
// the live set.
func (r *Region) flushOne(ctx context.Context, mt *memtable.Memtable) (err error) {
	began := time.Now()
	m := r.opts.Metrics
	defer func() {
		m.Flushes.WithLabelValues(result(err)).Inc()
		m.FlushDuration.Observe(time.Since(began).Seconds())
	}()
	st := mt.Stats()
	if r.man.State().FlushedSeq >= st.MaxSeq {
		// An earlier attempt whose commit looked ambiguous did land.
		r.dropFlushed(mt, st)
		return nil
	}
	id := ulid.Make().String()
	job := "flush-" + id
	r.mu.Lock()
	r.flushJob = job
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.flushJob = ""
		r.mu.Unlock()
	}()

	// 1. Reserve the output before any byte of it exists.
	reservedAt := r.opts.Now().UTC()
	if err := r.commit(ctx, manifest.Action{Pending: &manifest.PendingOutputs{
		JobID: job, FileIDs: []string{id}, Epoch: r.epoch, CreatedAt: reservedAt,
	}}); err != nil {
		if !r.landed(ctx, func(s *manifest.State) bool { _, ok := s.Pending[job]; return ok }) {
			return fmt.Errorf("region %s: flush: reserve output: %w", r.id, err)
		}
	}

	// 2. Encode and upload.
	fields := r.Schema().Fields()
	// Sized from the last flush's file, not grown by doubling to it.
	var buf bytes.Buffer
	buf.Grow(int(r.lastFlushSize.Load()) * 9 / 8)
	wopts := sst.WriteOptions{RowGroupRows: r.opts.RowGroupRows, Compression: sst.CompressFast, NoNulls: mt.NullFree(len(fields)), SeriesIndex: true,
		Decimals: decimalsOf(mt, len(fields))}
	meta, werr := r.encode(&buf, fields, mt, wopts)
	edit := &manifest.Edit{FlushedSeq: st.MaxSeq, FlushedSegment: st.LastSegment, Resolves: job}
	var actions []manifest.Action
	switch {
	case errors.Is(werr, sst.ErrEmpty):
		// Everything expired: nothing to upload, only the sequence moves.
		edit.Resolves = ""
		actions = []manifest.Action{{Edit: edit}, {Resolve: &manifest.ResolvePending{JobID: job}}}
	case werr != nil:
		return r.abandon(ctx, job, id, fmt.Errorf("region %s: flush: encode: %w", r.id, werr))
	default:
		if err := r.upload(ctx, reservedAt, id, buf.Bytes(), meta.SeriesIndex); err != nil {
			return r.abandon(ctx, job, id, fmt.Errorf("region %s: flush: %w", r.id, err))
		}
		edit.Add = []manifest.FileMeta{{ID: id, Level: 0, MinTS: meta.MinTS, MaxTS: meta.MaxTS, Rows: meta.Rows, Size: meta.Size, Series: true}}
		actions = []manifest.Action{{Edit: edit}}
		// NB: the index is not decoded into the cache here: an ingest
		// that no query reads would pay for every key of every flush.
	}

	// 3. Commit: from here on, failure never deletes the output unless the
	// manifest proves the edit did not land. The same delta moves the WAL
	// stream references past what the flush made durable.
	r.streamMu.Lock()
	if sc := r.streamsAfterFlush(r.man.State(), st.MaxSeq, mt); sc != nil {
		actions = append(actions, manifest.Action{Streams: sc})
	}
	err = r.commit(ctx, actions...)
	r.streamMu.Unlock()
	if err != nil {
		if !r.landed(ctx, func(s *manifest.State) bool { _, p := s.Pending[job]; return !p && s.FlushedSeq >= st.MaxSeq }) {
			if errors.Is(err, manifest.ErrAmbiguous) || errors.Is(err, fence.ErrFenced) {
				return fmt.Errorf("region %s: flush: commit: %w", r.id, err)
			}
			return r.abandon(ctx, job, id, fmt.Errorf("region %s: flush: commit: %w", r.id, err))
		}
	}
	r.dropFlushed(mt, st)
	r.lastFlushSize.Store(meta.Size)
	m.FlushBytes.Add(float64(meta.Size))
	m.FlushRows.Add(float64(meta.Rows))
	r.log.Debug("flushed", "file", id, "rows", meta.Rows, "bytes", meta.Size, "flushed_seq", st.MaxSeq, "took", time.Since(began))
	if r.opts.OnFlush != nil && len(edit.Add) > 0 {
		r.opts.OnFlush(r)
	}
	if r.opts.TTL > 0 {
		if err := r.expire(ctx); err != nil {
			r.log.Warn("ttl expiry after flush failed", "err", err)
		}
	}
	return nil
}

// dropFlushed forgets a memtable whose data is now in the manifest.
func (r *Region) dropFlushed(mt *memtable.Memtable, st memtable.Stats) {
	size := st.Bytes
	r.mu.Lock()
	for i, x := range r.immutable {
		if x == mt {
			// NB: slices.Delete clears the vacated slot; a plain append
			// would keep the flushed memtable reachable from the array.
			r.immutable = slices.Delete(r.immutable, i, i+1)
			break
		}
	}
	delete(r.memPos, mt)
	r.memBytes -= size
	r.memKeys -= st.KeyBytes
	r.active.ForgetPredecessor(mt)
	close(r.memChanged)
	r.memChanged = make(chan struct{})
	r.mu.Unlock()
	if r.opts.Budget != nil {
		r.opts.Budget.add(-size)
	}
	r.opts.Metrics.MemtableBytes.Sub(float64(size))
}

// commit commits actions, translating fencing.
func (r *Region) commit(ctx context.Context, actions ...manifest.Action) error {
	_, err := r.man.Commit(ctx, actions...)
	return err
}

// landed settles an ambiguous commit and reports whether the manifest now
// satisfies ok. If the outcome stays unknown it reports false.
func (r *Region) landed(ctx context.Context, ok func(*manifest.State) bool) bool {
	if err := r.man.Settle(ctx); err != nil {
		return false
	}
	return ok(r.man.State())
}

// upload writes a reserved file: its series index, then the SST, both
// within the upload window that began at the reservation.
func (r *Region) upload(ctx context.Context, reservedAt time.Time, id string, data, series []byte) error {
	uctx, cancel := r.UploadContext(ctx, reservedAt)
	defer cancel()
	if err := r.store.Put(uctx, r.id.SeriesKey(id), series); err != nil {
		return fmt.Errorf("upload %s: %w", r.id.SeriesKey(id), err)
	}
	if err := r.store.Put(uctx, r.id.SSTKey(id), data); err != nil {
		return fmt.Errorf("upload %s: %w", r.id.SSTKey(id), err)
	}
	return nil
}

// abandon cleans up a flush that failed before its edit committed: delete
// the output's objects (idempotent; they may not exist), then forget the
// marker. If either step fails the marker stays, and GC finishes the job.
func (r *Region) abandon(ctx context.Context, job, id string, cause error) error {
	for _, key := range r.id.FileKeys(id) {
		if err := r.store.Delete(ctx, key); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return errors.Join(cause, fmt.Errorf("delete abandoned output %s (left to GC): %w", key, err))
		}
	}
	if err := r.commit(ctx, manifest.Action{Resolve: &manifest.ResolvePending{JobID: job}}); err != nil {
		return errors.Join(cause, fmt.Errorf("resolve abandoned job %s (left to GC): %w", job, err))
	}
	return cause
}

// decimalsOf is how a flush finds the scale of each float field's values;
// a variable so that tests can make it wrong.
var decimalsOf = (*memtable.Memtable).Decimals

// encode writes mt as an SST into buf. A field found decimal whose value
// turns out not to be (never expected: memtable.Decimals checks every
// value) is written again as doubles rather than fail the flush.
func (r *Region) encode(buf *bytes.Buffer, fields []schema.Field, mt *memtable.Memtable, wopts sst.WriteOptions) (sst.Meta, error) {
	for {
		it := merge.New([]row.Iterator{mt.Iter(memtable.Filter{Start: math.MinInt64, End: math.MaxInt64, ReuseFields: true})}, merge.Options{KeepTombstones: true, DropBefore: r.ttlCutoff()})
		meta, err := sst.Write(buf, fields, it, wopts)
		it.Close()
		var nd *sst.NotDecimalField
		if !errors.As(err, &nd) || nd.Field >= len(wopts.Decimals) || wopts.Decimals[nd.Field] < 0 {
			return meta, err
		}
		r.log.Warn("flush: a field found decimal is not; writing it as doubles", "err", err)
		wopts.Decimals = slices.Clone(wopts.Decimals)
		wopts.Decimals[nd.Field] = decimal.None
		buf.Reset()
	}
}
