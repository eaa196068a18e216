package region

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/memtable"
	"github.com/stratadb/strata/internal/merge"
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

// flushOne writes one frozen memtable as an SST through an OutputTxn:
//
//	reserve Pending{job, [id]}  ->  stream sst/{id}.parquet as it is encoded, upload .series  ->  commit Edit{add id, flushed seq, resolves job}
//	        \ failure: nothing to clean     \ failure: delete both, commit Resolve{job}
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
	// NB: the unchecked commit: Close flushes a region it already marked
	// closed, and flushAll records fencing.
	txn := r.newOutputTxn("flush-"+id, r.commit)
	// The same delta moves the WAL stream references past what the flush
	// made durable.
	txn.streams = func(s *manifest.State) *manifest.WALStreams { return r.streamsAfterFlush(s, st.MaxSeq, mt) }
	r.mu.Lock()
	r.flushJob = txn.Job()
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.flushJob = ""
		r.mu.Unlock()
	}()

	// 1. Reserve the output before any byte of it exists.
	if err := txn.Reserve(ctx, id); err != nil {
		return fmt.Errorf("region %s: flush: %w", r.id, err)
	}

	// 2. Encode while uploading, then the series index.
	fields := r.Schema().Fields()
	wopts := sst.WriteOptions{RowGroupRows: r.opts.RowGroupRows, Compression: sst.CompressFast, NoNulls: mt.NullFree(len(fields)), SeriesIndex: true,
		Decimals: decimalsOf(mt, len(fields))}
	meta, werr := r.encode(ctx, txn, id, fields, mt, wopts)
	edit := &manifest.Edit{FlushedSeq: st.MaxSeq, FlushedSegment: st.LastSegment}
	switch {
	case errors.Is(werr, sst.ErrEmpty):
		// Everything expired: nothing was uploaded, only the sequence
		// moves (and the commit forgets the unused reservation).
	case werr != nil:
		return txn.Abandon(ctx, fmt.Errorf("region %s: flush: %w", r.id, werr))
	default:
		if err := txn.PutSeries(ctx, id, meta.SeriesIndex); err != nil {
			return txn.Abandon(ctx, fmt.Errorf("region %s: flush: %w", r.id, err))
		}
		edit.Add = []manifest.FileMeta{{ID: id, Level: 0, MinTS: meta.MinTS, MaxTS: meta.MaxTS, Rows: meta.Rows, Size: meta.Size, Series: true}}
		// NB: the index is not decoded into the cache here: an ingest
		// that no query reads would pay for every key of every flush.
	}

	// Counts of the region's series kept for cardinality requests count
	// the memtable whole, so the file takes its place in them.
	r.catchUpCardinality(ctx)

	// 3. Commit: from here on, failure never deletes the output unless the
	// manifest proves the edit did not land.
	if err := txn.Commit(ctx, edit, func(s *manifest.State) bool {
		_, p := s.Pending[txn.Job()]
		return !p && s.FlushedSeq >= st.MaxSeq
	}); err != nil {
		return fmt.Errorf("region %s: flush: %w", r.id, err)
	}
	if len(edit.Add) > 0 && r.cardinality.recent() {
		r.cardinality.noteFlush(id, mt, st, meta)
		// The next count looks its new series up in this file too: its
		// index is decoded here, not by that request.
		if fs, err := decodeFileSeries(id, meta.SeriesIndex); err == nil {
			r.seriesIdx.put(id, fs)
		}
	}
	r.dropFlushed(mt, st)
	m.FlushBytes.Add(float64(meta.Size))
	m.FlushRows.Add(float64(meta.Rows))
	r.log.Debug("flushed", "file", id, "rows", meta.Rows, "bytes", meta.Size, "flushed_seq", st.MaxSeq, "took", time.Since(began))
	r.walReleased()
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

// walReleased tells Options.OnWALReleased that the manifest holds WAL
// garbage, after a commit that may have released some.
func (r *Region) walReleased() {
	if r.opts.OnWALReleased != nil && HasWALGarbage(r.man.State()) {
		r.opts.OnWALReleased(r)
	}
}

// HasWALGarbage reports whether fast GC has WAL to collect in st: stream
// ranges released (StreamGarbage), or segments of the region's own WAL
// (an earlier version's) up to the flushed segment.
func HasWALGarbage(st *manifest.State) bool {
	return len(st.StreamGarbage) > 0 || st.FlushedSegment >= max(st.WALPurged, 1)
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
	close(r.memChanged)
	r.memChanged = make(chan struct{})
	r.mu.Unlock()
	if r.opts.Budget != nil {
		r.opts.Budget.add(-size)
	}
	r.opts.Metrics.MemtableBytes.Sub(float64(size))
}

// makeRoom freezes the active memtable for a successor, as a flush does,
// if it cannot take entries up to sequence last (memtable.Fits), and asks
// for a flush. The caller holds r.mu or owns the region alone.
func (r *Region) makeRoom(last uint64) {
	if r.active.Fits(last) {
		return
	}
	r.active.Freeze()
	r.immutable = append(r.immutable, r.active)
	r.active = r.active.Successor()
	r.requestFlush()
}

// commit commits actions.
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

// decimalsOf is how a flush finds the scale of each float field's values;
// a variable so that tests can make it wrong.
var decimalsOf = (*memtable.Memtable).Decimals

// encode writes mt as output id's SST, streamed to the store as it is
// encoded (upload). A field found decimal whose value turns out not to be
// (never expected: memtable.Decimals checks every value) is written again
// as doubles rather than fail the flush: the first upload failed without
// an object, and the second writes the same reserved id.
func (r *Region) encode(ctx context.Context, txn *OutputTxn, id string, fields []schema.Field, mt *memtable.Memtable, wopts sst.WriteOptions) (sst.Meta, error) {
	for {
		meta, err := upload(ctx, txn, id, func(w io.Writer) (sst.Meta, error) {
			it := merge.New([]row.Iterator{mt.Iter(memtable.Filter{Start: math.MinInt64, End: math.MaxInt64, ReuseFields: true})}, merge.Options{KeepTombstones: true, DropBefore: r.ttlCutoff()})
			defer it.Close()
			return sst.Write(w, fields, it, wopts)
		})
		var nd *sst.NotDecimalField
		if !errors.As(err, &nd) || nd.Field >= len(wopts.Decimals) || wopts.Decimals[nd.Field] < 0 {
			return meta, err
		}
		r.log.Warn("flush: a field found decimal is not; writing it as doubles", "err", err)
		wopts.Decimals = slices.Clone(wopts.Decimals)
		wopts.Decimals[nd.Field] = decimal.None
	}
}

// upload streams the SST write writes as reserved output id: write fills a
// pipe that a concurrent UploadSST empties, so a flush holds a few MiB of
// its file, not the file. It returns write's error if write failed (the
// upload then failed too, before the end of the object: nothing was
// stored), the upload's otherwise.
//
// NB: the upload's context is the reservation's window, not ctx (UploadSST):
// a cancelled flush still ends its upload, so that Abandon's deletes
// come after it.
func upload(ctx context.Context, txn *OutputTxn, id string, write func(io.Writer) (sst.Meta, error)) (sst.Meta, error) {
	p := sst.NewPipe(sst.PipeBuffer)
	uploaded := make(chan error, 1)
	go func() {
		err := txn.UploadSST(ctx, id, p)
		if err != nil {
			p.UploadFailed(err)
		}
		uploaded <- err
	}()
	meta, err := write(p)
	p.Finish(err)
	uerr := <-uploaded
	switch {
	case err != nil && (uerr == nil || errors.Is(uerr, sst.ErrAbandoned)):
		// The encoder gave up on its own (uerr is nil only if it failed
		// after the object was complete, which Write never does).
		return sst.Meta{}, fmt.Errorf("encode: %w", err)
	case uerr != nil:
		return sst.Meta{}, uerr
	}
	return meta, nil
}
