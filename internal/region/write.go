package region

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/memtable"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/wal"
)

// PointError says which point of a batch was rejected and why. It wraps
// ErrInvalidWrite, or a *schema.ConflictError for a type conflict.
type PointError struct {
	Index int
	Err   error
}

func (e *PointError) Error() string   { return fmt.Sprintf("region: point %d: %v", e.Index, e.Err) }
func (e *PointError) Unwrap() []error { return []error{ErrInvalidWrite, e.Err} }

// WriteResult reports what a write did.
type WriteResult struct {
	Written int // points now durable
	Expired int // points older than the TTL, dropped
}

// Write makes a batch durable and visible, atomically: either every point is
// applied or none is. It returns a *PointError (wrapping ErrInvalidWrite)
// for bad input and ErrBatchTooLarge before anything is written. A
// wal.ErrOutcomeUnknown error means the batch may have been applied (then
// wholly); retrying it is safe, since rows are keyed by (series, ts).
func (r *Region) Write(ctx context.Context, points []row.Point) (WriteResult, error) {
	res, err := r.write(ctx, Batch{Points: points}, false)
	r.opts.Metrics.WriteBatches.WithLabelValues(result(err)).Inc()
	return res, err
}

// Batch is a write its caller has prepared: every point validated against
// a schema whose column types the region's agree with (its table's, with
// ValidateBatch), and each point's series key encoded.
type Batch struct {
	Points []row.Point
	Keys   [][]byte // Keys[i] is row.EncodeSeries of Points[i].Tags
	// With Keys, only the names of Points' tags are read (their columns):
	// a forwarded batch's points carry names only (internal/fwdbatch).

	// Encoded, if set, is Points and Keys as another datanode forwarded
	// them: one S2 (or Snappy) block that Options.DecodeForwarded decodes
	// after decompression. The WAL takes it as it is when the region
	// writes every point (none expired), so the owner encodes nothing
	// again (forwarded.go). It must stay as it is until the write returns.
	Encoded []byte
}

// WriteBatch is Write for a prepared batch: the region checks only which
// columns are new to it, and encodes no series key again.
func (r *Region) WriteBatch(ctx context.Context, b Batch) (WriteResult, error) {
	if len(b.Keys) != len(b.Points) {
		return WriteResult{}, fmt.Errorf("%w: %d series keys for %d points", ErrInvalidWrite, len(b.Keys), len(b.Points))
	}
	res, err := r.write(ctx, b, true)
	r.opts.Metrics.WriteBatches.WithLabelValues(result(err)).Inc()
	return res, err
}

func result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrInvalidWrite), errors.Is(err, ErrBatchTooLarge):
		return "rejected"
	default:
		return "error"
	}
}

func (r *Region) write(ctx context.Context, b Batch, prepared bool) (WriteResult, error) {
	if err := r.usable(); err != nil {
		return WriteResult{}, err
	}
	points := b.Points
	if len(points) > r.opts.MaxBatchRows {
		return WriteResult{}, fmt.Errorf("%w: %d points, the limit is %d", ErrBatchTooLarge, len(points), r.opts.MaxBatchRows)
	}
	sch, err := r.schemaFor(ctx, points, prepared)
	if err != nil {
		return WriteResult{}, err
	}
	cutoff := r.ttlCutoff()
	var res WriteResult
	var size int64
	var key, kbuf []byte
	nf := len(sch.Fields())
	sc := getScratch(len(points), nf)
	entries, vals, keys := sc.entries, sc.vals, sc.keys[:0]
	defer func() { // whatever the outcome: the WAL keeps none of them (wal.Member.Append)
		clear(keys) // drop references into the write's buffers
		sc.entries, sc.keys = entries, keys
		putScratch(sc)
	}()
	var ords []int
	var full bool // ords name every field of the schema
	var prev *row.Point
	for i := range points {
		p := &points[i]
		if p.TS < cutoff {
			res.Expired++
			continue
		}
		if b.Keys != nil {
			key = b.Keys[i]
		} else {
			start := len(kbuf) // one buffer for the batch's keys
			if kbuf, err = row.EncodeSeries(kbuf, p.Tags); err != nil {
				return WriteResult{}, &PointError{Index: i, Err: err}
			}
			key = kbuf[start:len(kbuf):len(kbuf)]
		}
		fields := vals[i*nf : (i+1)*nf : (i+1)*nf]
		if !row.SameShape(p, prev) {
			ords = ords[:0]
			for _, f := range p.Fields {
				ord, _ := sch.FieldOrdinal(f.Name)
				ords = append(ords, ord)
			}
			full = covers(ords, nf)
		}
		if !full {
			clear(fields) // the fields it lacks are nulls; a kept scratch holds the last write's
		}
		prev = p
		width := 0
		for j, f := range p.Fields {
			fields[ords[j]] = f.Value
			width = max(width, ords[j]+1)
			if f.Value.Kind() == row.String {
				sc.strs = true
			}
		}
		keys = append(keys, key)
		e := row.Entry{TS: p.TS, Op: row.Put, Fields: fields[:width:width]}
		size += int64(e.Size() + len(key))
		entries = append(entries, e)
	}
	memtable.ShareKeys(entries, keys)
	if size > r.opts.MaxBatchBytes {
		return WriteResult{}, fmt.Errorf("%w: about %d bytes, the limit is %d", ErrBatchTooLarge, size, r.opts.MaxBatchBytes)
	}
	var chunk []byte
	if b.Encoded != nil && r.opts.DecodeForwarded != nil && len(entries) == len(points) {
		chunk = b.Encoded // every point is an entry, in order: replay gives the same
	}
	if err := r.append(ctx, entries, chunk); err != nil {
		return WriteResult{}, err
	}
	res.Written = len(entries)
	return res, nil
}

// covers reports whether ords holds every ordinal below n.
func covers(ords []int, n int) bool {
	if len(ords) != n {
		return false
	}
	var small [64]bool
	var seen []bool
	if n <= len(small) {
		seen = small[:n]
	} else {
		seen = make([]bool, n)
	}
	for _, o := range ords {
		if o < 0 || o >= n || seen[o] {
			return false
		}
		seen[o] = true
	}
	return true
}

// scratch is a write's entries and their field values. Once the WAL took
// a write, the memtable holds a copy of it, so the next write may reuse
// them (allocated for each write, they were a third of its allocations).
type scratch struct {
	entries []row.Entry
	vals    []row.Value
	keys    [][]byte // the entries' series keys, until memtable.ShareKeys
	strs    bool     // vals holds strings
}

// scratches are kept for the next writes (freelist: a sync.Pool's were
// mostly gone by the next write on a busy node).
var scratches = freelist.New[*scratch](16)

const maxScratchValues = 1 << 20 // larger scratches are not kept

func getScratch(points, fields int) *scratch {
	sc, ok := scratches.Get()
	if !ok {
		sc = &scratch{}
	}
	sc.entries = slices.Grow(sc.entries[:0], points)
	if n := points * fields; cap(sc.vals) < n {
		sc.vals = row.Written(make([]row.Value, n))
	} else {
		sc.vals = sc.vals[:n] // not cleared: a write fills each point's fields, or clears them
	}
	return sc
}

func putScratch(sc *scratch) {
	if cap(sc.vals) > maxScratchValues {
		return
	}
	clear(sc.entries) // drop the series keys
	if sc.strs {
		clear(sc.vals) // drop the strings, which hold their write's buffers
		sc.strs = false
	}
	scratches.Put(sc)
}

// ValidateBatch checks every point of a batch against base and returns the
// columns the batch adds. The first bad point's error is a *PointError.
// Engines that spread a batch over several regions call it once for the
// whole batch against the table's schema.
func ValidateBatch(points []row.Point, base *schema.Schema) (*schema.Additions, error) {
	add := base.Extend()
	var prev *row.Point
	for i := range points {
		p := &points[i]
		if err := validate(p, row.SameShape(p, prev), base.Timestamp(), add); err != nil {
			return nil, &PointError{Index: i, Err: err}
		}
		prev = p
	}
	return add, nil
}

// Columns returns the columns a batch already checked with ValidateBatch
// (against a schema whose column types base's agree with) adds to base:
// only each new shape's columns are looked at. A type conflict is a
// *PointError.
func Columns(points []row.Point, base *schema.Schema) (*schema.Additions, error) {
	add := base.Extend()
	var prev *row.Point
	for i := range points {
		p := &points[i]
		if !row.SameShape(p, prev) {
			if err := addColumns(p, add); err != nil {
				return nil, &PointError{Index: i, Err: err}
			}
		}
		prev = p
	}
	return add, nil
}

func addColumns(p *row.Point, add *schema.Additions) error {
	for _, t := range p.Tags {
		if err := add.Tag(t.Name); err != nil {
			return err
		}
	}
	for _, f := range p.Fields {
		if err := add.Field(f.Name, f.Value.Kind()); err != nil {
			return err
		}
	}
	return nil
}

// validate checks one point against the schema, collecting new columns.
// If known, the point's columns were checked with an earlier point of the
// same shape. Any float64 is a value, NaN and ±Inf among them (Prometheus
// stores them, and its staleness markers are NaNs).
func validate(p *row.Point, known bool, tsName string, add *schema.Additions) error {
	if p.TS == row.NoTimestamp {
		return fmt.Errorf("%w: missing timestamp", ErrInvalidWrite)
	}
	if len(p.Fields) == 0 {
		return fmt.Errorf("%w: no fields", ErrInvalidWrite)
	}
	if known {
		return nil
	}
	for j, t := range p.Tags {
		for _, u := range p.Tags[:j] {
			if u.Name == t.Name {
				return fmt.Errorf("%w: tag %q appears twice", ErrInvalidWrite, t.Name)
			}
		}
		if t.Name == tsName && !add.Labels() {
			return fmt.Errorf("%w: tag %q has the timestamp column's name", ErrInvalidWrite, t.Name)
		}
		if err := add.Tag(t.Name); err != nil {
			return err
		}
	}
	for j, f := range p.Fields {
		if f.Name == tsName {
			return fmt.Errorf("%w: field %q has the timestamp column's name", ErrInvalidWrite, f.Name)
		}
		k := f.Value.Kind()
		if k == row.Null {
			return fmt.Errorf("%w: field %q has no value", ErrInvalidWrite, f.Name)
		}
		for _, g := range p.Fields[:j] {
			if g.Name == f.Name {
				return fmt.Errorf("%w: field %q appears twice", ErrInvalidWrite, f.Name)
			}
		}
		if err := add.Field(f.Name, k); err != nil {
			return err
		}
	}
	return nil
}

// schemaFor validates a batch (only its columns, if prepared) and returns a
// schema that has every column it uses, committing new columns to the
// manifest first.
func (r *Region) schemaFor(ctx context.Context, points []row.Point, prepared bool) (*schema.Schema, error) {
	check := func(base *schema.Schema) (*schema.Additions, error) {
		if prepared {
			return Columns(points, base)
		}
		return ValidateBatch(points, base)
	}
	base := r.Schema()
	add, err := check(base)
	if err != nil || !add.Changed() {
		return base, err
	}
	r.schemaMu.Lock()
	defer r.schemaMu.Unlock()
	// Another write may have added columns meanwhile: check again.
	if add, err = check(r.schema); err != nil || !add.Changed() {
		return r.schema, err
	}
	next, err := add.Result()
	if err != nil {
		return nil, err
	}
	if _, err := r.man.Commit(ctx, manifest.Action{Schema: &manifest.SchemaChange{Schema: next.Manifest()}}); err != nil {
		if errors.Is(err, manifest.ErrAmbiguous) {
			// Learn whether it landed before anyone relies on it.
			if serr := r.man.Settle(ctx); serr == nil && r.man.State().Schema.Version == next.Version() {
				r.schema = next
				return next, nil
			}
		}
		return nil, r.setFatal(fmt.Errorf("region %s: commit schema change: %w", r.id, err))
	}
	r.schema = next
	return next, nil
}

// Delete writes a tombstone hiding every row of the series with
// start <= ts <= end that was written before it.
func (r *Region) Delete(ctx context.Context, tags []row.Tag, start, end int64) error {
	if err := r.usable(); err != nil {
		return err
	}
	if end < start {
		return fmt.Errorf("%w: delete range [%d, %d] is empty", ErrInvalidWrite, start, end)
	}
	key, err := row.EncodeSeries(nil, tags)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidWrite, err)
	}
	return r.append(ctx, []row.Entry{{Series: string(key), TS: start, End: end, Op: row.Delete}}, nil)
}

// append waits for memtable memory, then makes entries durable.
// With chunk (Batch.Encoded), the WAL takes it for the entries' encoding.
func (r *Region) append(ctx context.Context, entries []row.Entry, chunk []byte) error {
	if len(entries) == 0 {
		return nil
	}
	began := time.Now()
	waited, err := waitFor(ctx, r.regionFull)
	if err == nil && r.opts.Budget != nil {
		var w bool
		w, err = waitFor(ctx, r.opts.Budget.full)
		waited = waited || w
	}
	if waited {
		r.opts.Metrics.Stalls.Inc()
		r.opts.Metrics.StallSeconds.Add(time.Since(began).Seconds())
	}
	if err != nil {
		return fmt.Errorf("region %s: waiting for memtable memory: %w", r.id, err)
	}
	if chunk != nil {
		err = r.wal.AppendChunk(ctx, entries, chunk)
	} else {
		err = r.wal.Append(ctx, entries)
	}
	if err != nil {
		if errors.Is(err, wal.ErrClosed) {
			return fmt.Errorf("region %s: %w", r.id, ErrClosed)
		}
		return r.setFatal(fmt.Errorf("region %s: %w", r.id, err))
	}
	return nil
}

// regionFull reports whether the region's memtables are over their limit.
func (r *Region) regionFull() (bool, <-chan struct{}, *Region) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.memBytes-r.memKeys < r.opts.MaxMemtableBytes || r.closed || r.fatal != nil {
		return false, nil, nil
	}
	return true, r.memChanged, r
}
