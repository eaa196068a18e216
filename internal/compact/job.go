package compact

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/merge"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/schema"
	"github.com/stratadb/strata/internal/sst"
)

// Stage is a point in a job's life.
type Stage int

const (
	// StageReserved: an output id is reserved by the persisted marker; its
	// upload has not started.
	StageReserved Stage = iota
	// StageUploaded: every output is uploaded; the commit has not started.
	StageUploaded
	// StageCommitting: the commit write started; cancellation is too late.
	StageCommitting
)

func (s Stage) String() string {
	if names := [...]string{"reserved", "uploaded", "committing"}; int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("stage(%d)", int(s))
}

// readBudget bounds the input row groups a job holds whole (see
// sst.Filter.GroupBytes): with 8 inputs, row groups of up to 8 MiB are read
// with one request each.
const readBudget = 64 << 20

// Errors.
var (
	// ErrCancelled: the job was cancelled; its outputs are deleted or owned
	// by its pending marker.
	ErrCancelled = errors.New("compact: cancelled")
	// ErrTooLate: Cancel came after the commit started; the job's outcome
	// is the commit's.
	ErrTooLate = errors.New("compact: too late to cancel: the commit has started")
)

// Result describes a finished job.
type Result struct {
	Inputs, Outputs   []manifest.FileMeta
	BytesIn, BytesOut int64
	RowsIn, RowsOut   int64
	Duration          time.Duration
}

// Job is one compaction of one region.
type Job struct {
	ID     string
	r      *region.Region
	txn    *region.OutputTxn // reserve, upload, commit, abandon
	inputs []manifest.FileMeta
	opts   Options

	mu         sync.Mutex
	started    bool
	committing bool
	cancelled  bool
	cancel     context.CancelFunc
	cancelC    chan struct{} // closed by the first Cancel
	done       chan struct{}
	err        error
}

// NewJob prepares a job over inputs (live files of r).
func NewJob(r *region.Region, inputs []manifest.FileMeta, opts Options) *Job {
	opts.defaults()
	id := "compact-" + ulid.Make().String()
	return &Job{ID: id, r: r, txn: r.NewOutputTxn(id), inputs: inputs, opts: opts, done: make(chan struct{}), cancelC: make(chan struct{})}
}

// Cancel asks the job to stop and waits until it has. It returns nil once
// the job stopped before committing, with its outputs deleted or owned by
// its pending marker in the persisted manifest; ErrTooLate (joined with the
// job's error, if any) if the commit had started, after waiting for its
// outcome. Cancelling a job that has not started prevents it from running.
func (j *Job) Cancel() error {
	j.mu.Lock()
	if j.committing {
		j.mu.Unlock()
		<-j.done
		return errors.Join(ErrTooLate, j.err)
	}
	if !j.cancelled {
		close(j.cancelC)
	}
	j.cancelled = true
	started := j.started
	if j.cancel != nil {
		j.cancel()
	}
	j.mu.Unlock()
	if started {
		<-j.done
	}
	return nil
}

func (j *Job) cancelledC() <-chan struct{} { return j.cancelC }

// Inputs are the job's input files.
func (j *Job) Inputs() []manifest.FileMeta { return j.inputs }

func (j *Job) stage(ctx context.Context, s Stage) {
	if j.opts.OnStage != nil {
		j.opts.OnStage(ctx, s)
	}
}

// Run runs the job. Cancelling ctx cancels the job (until the commit
// starts).
func (j *Job) Run(ctx context.Context) (res Result, err error) {
	j.mu.Lock()
	if j.cancelled || j.started {
		j.mu.Unlock()
		return Result{}, ErrCancelled
	}
	j.started = true
	ctx, j.cancel = context.WithCancel(ctx)
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		j.err = err
		j.mu.Unlock()
		close(j.done)
	}()
	return j.run(ctx)
}

func (j *Job) run(ctx context.Context) (Result, error) {
	began := time.Now()
	res := Result{Inputs: j.inputs}
	st := j.r.Manifest()
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	inIDs := map[string]bool{}
	for _, f := range j.inputs {
		if _, ok := st.Files[f.ID]; !ok {
			return res, fmt.Errorf("compact %s: input %s is not live", j.ID, f.ID)
		}
		inIDs[f.ID] = true
		res.BytesIn += f.Size
		res.RowsIn += f.Rows
		lo, hi = min(lo, f.MinTS), max(hi, f.MaxTS)
	}
	// Tombstones may go only if no other live file overlaps the inputs'
	// range: otherwise they may still hide rows there.
	keepTombstones := false
	for id, f := range st.Files {
		if !inIDs[id] && f.MinTS <= hi && f.MaxTS >= lo {
			keepTombstones = true
		}
	}
	// The first output is reserved while the inputs open: the marker is a
	// manifest write, a round trip that needs nothing from them. No byte
	// of the output is written before it lands (first.err; the OutputTxn
	// refuses to upload an id it has not reserved).
	first := j.reserveAsync(ctx)
	fields := j.r.Schema().Fields()
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Name
	}
	// Each input opens (a read of its footer) and reads its first row
	// group on its own goroutine, all at once: merge's ParallelStart
	// advances every input to its first entry before the merge yields.
	// NB: opened with the job's context, which a ranged reader keeps for
	// its reads.
	// Row groups are read whole within a budget shared by the inputs.
	filter := sst.Filter{Start: math.MinInt64, End: math.MaxInt64, Fields: names, GroupBytes: readBudget / int64(len(j.inputs)), ReuseFields: true}
	opening := make([]*openingInput, len(j.inputs))
	inputs := make([]row.Iterator, len(j.inputs))
	for i, f := range j.inputs {
		opening[i] = &openingInput{open: func() (*sst.Reader, error) { return j.r.OpenSST(ctx, f) }, filter: filter}
		inputs[i] = opening[i]
	}
	it := merge.New(inputs, merge.Options{KeepTombstones: keepTombstones, DropBefore: j.r.TTLCutoff(), ParallelStart: true, DropSeries: j.r.DropSeries()})
	defer it.Close()

	// Rows per output, from the inputs' bytes per row.
	maxRows := int64(math.MaxInt64)
	if res.RowsIn > 0 && res.BytesIn > 0 {
		maxRows = max(1, j.opts.MaxOutputBytes/max(1, res.BytesIn/res.RowsIn))
	}
	var outputs []manifest.FileMeta
	var noNulls []bool
	var scales []int8
	src := &limitIter{ctx: ctx, it: it}
	for src.more() {
		if noNulls == nil {
			// Every input is open once the merge yields.
			noNulls, scales = nullFree(fields, opening), decimals(fields, opening)
		}
		// 1. Reserve the output before any byte of it exists.
		var id string
		var err error
		if first != nil {
			id, err = first.id, first.err()
			first = nil
		} else if err = ctx.Err(); err == nil {
			id = ulid.Make().String()
			err = j.reserve(ctx, id)
		}
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			if ctx.Err() != nil {
				err = ErrCancelled
			}
			return res, j.txn.Abandon(ctx, err)
		}
		j.stage(ctx, StageReserved)
		if err := ctx.Err(); err != nil {
			return res, j.txn.Abandon(ctx, ErrCancelled)
		}
		// 2. Encode and upload at once, streaming: memory stays bounded by
		// a few row groups, whatever the output size.
		src.left = maxRows
		meta, err := j.encodeAndUpload(ctx, id, fields, sst.WriteOptions{NoNulls: noNulls, Decimals: scales}, src)
		if err != nil {
			if ctx.Err() != nil {
				err = ErrCancelled
			}
			return res, j.txn.Abandon(ctx, err)
		}
		if ctx.Err() != nil {
			return res, j.txn.Abandon(ctx, ErrCancelled)
		}
		outputs = append(outputs, manifest.FileMeta{ID: id, Level: 1, MinTS: meta.MinTS, MaxTS: meta.MaxTS, Rows: meta.Rows, Size: meta.Size, Series: true})
		j.r.AddSeriesIndex(id, meta.SeriesIndex)
		res.BytesOut += meta.Size
		res.RowsOut += meta.Rows
	}
	if err := it.Err(); err != nil {
		err = fmt.Errorf("compact %s: read inputs: %w", j.ID, err)
		if ctx.Err() != nil {
			err = ErrCancelled // a read the cancel interrupted
		}
		first.wait()
		return res, j.txn.Abandon(ctx, err)
	}
	// With no output at all (every row dropped), the first reservation
	// was not needed: nothing was written under it, and the commit
	// forgets it.
	first.wait()
	j.stage(ctx, StageUploaded)

	// 3. Commit. From here on cancellation is too late.
	j.mu.Lock()
	if j.cancelled || ctx.Err() != nil {
		j.mu.Unlock()
		return res, j.txn.Abandon(ctx, ErrCancelled)
	}
	j.committing = true
	j.mu.Unlock()
	j.stage(ctx, StageCommitting)
	cctx := context.WithoutCancel(ctx)
	remove := make([]string, 0, len(j.inputs))
	for _, f := range j.inputs {
		remove = append(remove, f.ID)
	}
	landed := func(s *manifest.State) bool {
		if len(outputs) > 0 {
			_, live := s.Files[outputs[0].ID]
			return live
		}
		_, inputLive := s.Files[remove[0]]
		return !inputLive
	}
	if err := j.txn.Commit(cctx, &manifest.Edit{Add: outputs, Remove: remove}, landed); err != nil {
		return res, fmt.Errorf("compact %s: %w", j.ID, err)
	}
	res.Outputs = outputs
	res.Duration = time.Since(began)
	return res, nil
}

// encodeAndUpload writes the next output of src as key: the encoder
// writes into a pipe that a concurrent upload streams to the store.
//
// INVARIANT: an upload is never cut short by cancellation. A PUT aborted
// after its body was sent may still land after abandon's DELETE, leaving
// an object nothing owns; so the upload runs without the job's context and
// cancellation waits for its outcome (one output at most). The upload is
// stopped only by the encoder giving up, before the upload has read the
// end of the object, which no store turns into an object, or by the
// upload window after the reservation (region.UploadContext).
func (j *Job) encodeAndUpload(ctx context.Context, id string, fields []schema.Field, wopts sst.WriteOptions, src row.Iterator) (sst.Meta, error) {
	sp := sst.NewPipe(sst.PipeBuffer)
	uploaded := make(chan error, 1)
	go func() {
		err := j.txn.UploadSST(ctx, id, sp)
		if err != nil {
			sp.UploadFailed(err)
		}
		uploaded <- err
	}()
	// NB: unbuffered: the pipe copies each write anyway, and its reader
	// waits for a whole read's worth, however small the writes.
	wopts.RowGroupRows, wopts.Parallel, wopts.SeriesIndex = j.opts.RowGroupRows, runtime.GOMAXPROCS(0), true
	meta, err := sst.Write(sp, fields, src, wopts)
	if err == nil && ctx.Err() != nil {
		err = ErrCancelled // before the upload has read the end
	}
	sp.Finish(err)
	uerr := <-uploaded
	switch {
	case err != nil && uerr != nil && errors.Is(uerr, sst.ErrAbandoned):
		return sst.Meta{}, fmt.Errorf("compact %s: encode: %w", j.ID, err)
	case uerr != nil:
		return sst.Meta{}, fmt.Errorf("compact %s: %w", j.ID, uerr)
	case err != nil:
		// Not expected (the upload reads the end only once the encoder
		// succeeded), and safe: the object is owned by the marker.
		return sst.Meta{}, fmt.Errorf("compact %s: encode after upload: %w", j.ID, err)
	}
	// The series index is known once the SST is: it follows, in the same
	// upload window.
	if err := j.txn.PutSeries(ctx, id, meta.SeriesIndex); err != nil {
		return sst.Meta{}, fmt.Errorf("compact %s: %w", j.ID, err)
	}
	return meta, nil
}

// nullFree reports which fields every input has in every put: those have
// a value in every output put, since rows are only dropped or replaced
// whole.
func nullFree(fields []schema.Field, inputs []*openingInput) []bool {
	free := make([]bool, len(fields))
	for i, f := range fields {
		free[i] = true
		for _, in := range inputs {
			free[i] = free[i] && in.rd != nil && in.rd.NullFree(f.Name)
		}
	}
	return free
}

// decimals is the scale each float field is written at (decimal.None: as
// doubles): the largest of the inputs', if every input that has the field
// holds it as decimals, and each input's mantissas stay under the limit at
// it. Inputs are not read for this: a field any input holds as doubles
// stays doubles.
func decimals(fields []schema.Field, inputs []*openingInput) []int8 {
	scales := make([]int8, len(fields))
	for i, f := range fields {
		scales[i] = decimal.None
		if f.Kind != row.Float {
			continue
		}
		type held struct {
			scale  int8
			maxAbs int64
		}
		var hs []held
		for _, in := range inputs {
			if in.rd == nil {
				hs = nil
				break
			}
			if _, has := in.rd.FieldKind(f.Name); !has {
				continue // the field was added after the file was written
			}
			scale, maxAbs, ok := in.rd.Decimals(f.Name)
			if !ok {
				hs = nil
				break
			}
			hs = append(hs, held{scale, maxAbs})
		}
		if len(hs) == 0 {
			continue
		}
		top := hs[0].scale
		for _, h := range hs {
			top = max(top, h.scale)
		}
		fits := true
		for _, h := range hs {
			fits = fits && decimal.Rescale(h.maxAbs, h.scale, top)
		}
		if fits {
			scales[i] = top
		}
	}
	return scales
}

// openingInput is an input SST that opens on its first Next, so that the
// merge's ParallelStart opens an input and reads its first row group on
// one goroutine, without waiting for the other inputs to open.
type openingInput struct {
	open   func() (*sst.Reader, error)
	filter sst.Filter
	rd     *sst.Reader  // once opened
	it     row.Iterator // once opened
	err    error        // of the open
}

func (o *openingInput) Next() bool {
	if o.it == nil {
		if o.err != nil {
			return false
		}
		if o.rd, o.err = o.open(); o.err != nil {
			return false
		}
		o.it = o.rd.Iter(o.filter)
	}
	return o.it.Next()
}

func (o *openingInput) Entry() *row.Entry { return o.it.Entry() }

func (o *openingInput) Err() error {
	if o.it == nil {
		return o.err
	}
	return o.it.Err()
}

func (o *openingInput) Close() error {
	if o.it == nil {
		return nil
	}
	return o.it.Close()
}

// pendingReserve is a reservation in flight (Job.reserveAsync).
type pendingReserve struct {
	id     string
	done   chan struct{}
	result error
}

// reserveAsync starts reserving a new output id.
func (j *Job) reserveAsync(ctx context.Context) *pendingReserve {
	p := &pendingReserve{id: ulid.Make().String(), done: make(chan struct{})}
	go func() {
		p.result = j.reserve(ctx, p.id)
		close(p.done)
	}()
	return p
}

// err waits for the reservation's outcome.
func (p *pendingReserve) err() error {
	<-p.done
	return p.result
}

// wait waits for the reservation, if p is not nil, so that an abandon or
// a commit after it knows whether its id is reserved.
func (p *pendingReserve) wait() {
	if p != nil {
		<-p.done
	}
}

// reserve commits (or extends) the job's pending-outputs marker with id.
func (j *Job) reserve(ctx context.Context, id string) error {
	if err := j.txn.Reserve(ctx, id); err != nil {
		return fmt.Errorf("compact %s: %w", j.ID, err)
	}
	return nil
}

// limitIter yields at most left entries of it, so outputs split at a row
// count. A (series, ts) appears once in a merged stream, so a split never
// separates versions of a row. more peeks, so that no output id is
// reserved for an empty output. It ends early, with ErrCancelled, once ctx
// is done, so a cancelled job stops encoding within a few thousand rows.
type limitIter struct {
	ctx    context.Context
	it     row.Iterator
	left   int64
	peeked bool // it is positioned on an entry not yet yielded
	done   bool
	n      int // entries yielded, for the periodic ctx check
	err    error
}

func (l *limitIter) more() bool {
	if !l.peeked && !l.done {
		l.peeked = l.it.Next()
		l.done = !l.peeked
	}
	return l.peeked
}

func (l *limitIter) Next() bool {
	if l.left <= 0 || l.err != nil || !l.more() {
		return false
	}
	if l.n++; l.n%4096 == 0 && l.ctx.Err() != nil {
		l.err = ErrCancelled
		return false
	}
	l.peeked = false
	l.left--
	return true
}
func (l *limitIter) Entry() *row.Entry { return l.it.Entry() }
func (l *limitIter) Close() error      { return nil }

func (l *limitIter) Err() error {
	if l.err != nil {
		return l.err
	}
	return l.it.Err()
}
