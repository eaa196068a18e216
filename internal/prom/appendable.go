package prom

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/tenant"
)

// Appendable stores the samples Strata makes itself (the results of
// recording rules, an alerting rule's ALERTS and ALERTS_FOR_STATE) as
// remote write stores a sample: in the metrics table, each series keyed by
// its labels, through writeMetrics. An appender's samples are one write,
// durable in the WAL in the object store before Commit returns.
type Appendable struct {
	engine *datanode.Engine
	tenant string // whose metrics table ("": the default tenant's)
}

// NewAppendable is the Appendable of eng's metrics table.
func NewAppendable(eng *datanode.Engine) *Appendable { return &Appendable{engine: eng} }

// ForTenant is a writing tenant t's metrics table (the rules of t's
// namespaces write through it).
func (a *Appendable) ForTenant(t string) *Appendable {
	return &Appendable{engine: a.engine, tenant: t}
}

// AppenderV2 returns an appender whose Commit writes under ctx.
func (a *Appendable) AppenderV2(ctx context.Context) storage.AppenderV2 {
	return &appender{ctx: ctx, engine: a.engine, tenant: cmp.Or(a.tenant, tenant.Default), b: newBatcher()}
}

// errHistogram refuses a native histogram: the metrics table holds floats.
var errHistogram = errors.New("native histograms are not supported")

// appender gathers samples into a batcher, as a remote-write request's are
// gathered, and writes them at Commit. Like every storage.AppenderV2 it is
// used by one goroutine, and not after Commit or Rollback.
type appender struct {
	ctx    context.Context
	engine *datanode.Engine
	tenant string
	b      *batcher // nil once committed or rolled back
}

// Append adds one float sample of series ls at t (milliseconds). A sample
// the metrics table can never hold (a bad label, no __name__, a timestamp
// out of range, a histogram) is refused with the reason and the others
// are kept.
func (a *appender) Append(_ storage.SeriesRef, ls labels.Labels, _, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, _ storage.AOptions) (storage.SeriesRef, error) {
	if h != nil || fh != nil {
		return 0, fmt.Errorf("%s: %w", ls, errHistogram)
	}
	refused := a.b.refused
	a.b.reasons, a.b.more = a.b.reasons[:0], 0 // so that a refusal's reason is reasons[0]
	a.b.series(ls, 0, 1, func(int) (int64, float64) { return t, v })
	if a.b.refused > refused {
		return 0, fmt.Errorf("%w: %s", errBadWrite, a.b.reasons[0])
	}
	return storage.SeriesRef(ls.Hash()), nil
}

// Commit writes every sample appended, durably, and releases the appender.
func (a *appender) Commit() error {
	points := a.b.points
	defer a.release() // after the write: the points are the batcher's
	if len(points) == 0 {
		return nil
	}
	return writeMetrics(a.ctx, a.engine, a.tenant, points)
}

// Rollback drops the samples appended.
func (a *appender) Rollback() error {
	a.release()
	return nil
}

func (a *appender) release() {
	if a.b != nil {
		a.b.release()
		a.b = nil
	}
}

// writeMetrics stores points of the metrics table, creating it on first
// use: the one write path of remote write and of Appendable. When it
// returns nil every point is durable in the WAL. The table is tenant's
// (Appendable's tenant for the rules' results).
func writeMetrics(ctx context.Context, eng *datanode.Engine, tenant string, points []row.Point) error {
	batch := []datanode.TableBatch{{Table: catalog.MetricsOf(tenant), Points: points}}
	_, err := eng.WriteTables(ctx, batch, datanode.WriteOptions{CreateTable: true, Metrics: true})
	return err
}
