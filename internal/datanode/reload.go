package datanode

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/stratadb/strata/internal/catalog"
)

// reloads shares the catalog reloads of requests that name a table the
// engine's copy of the catalog does not hold: however many writes and
// scans miss one table at once, one reload (and at most one create) of it
// runs, outside Engine.mu.
//
// A reload runs under its own context, a child of the engine's lifetime:
// it ends when the engine closes, or when every request waiting on it has
// given up (its context ended). So one client's cancel or deadline stops
// its wait at once, and stops the reload itself if no other request needs
// it.
type reloads struct {
	life context.Context // the engine's; cancelled by Close

	mu      sync.Mutex
	flights map[reloadKey]*reload
}

type reloadKey struct {
	table  string
	create bool // the reload creates the table if it is still missing
}

// reload is one flight: done is closed once err is set.
type reload struct {
	done    chan struct{}
	err     error
	waiters int // guarded by reloads.mu
	cancel  context.CancelFunc
}

// do runs f once for every caller of do with key that arrives before it
// returns, and returns f's error, or ctx's if ctx ends first.
func (rs *reloads) do(ctx context.Context, key reloadKey, f func(context.Context) error) error {
	rs.mu.Lock()
	fl := rs.flights[key]
	if fl == nil {
		fctx, cancel := context.WithCancel(rs.life)
		fl = &reload{done: make(chan struct{}), cancel: cancel}
		if rs.flights == nil {
			rs.flights = map[reloadKey]*reload{}
		}
		rs.flights[key] = fl
		go func() {
			err := f(fctx)
			rs.mu.Lock()
			if rs.flights[key] == fl {
				delete(rs.flights, key)
			}
			rs.mu.Unlock()
			fl.err = err
			cancel()
			close(fl.done)
		}()
	}
	fl.waiters++
	rs.mu.Unlock()
	select {
	case <-fl.done:
		return fl.err
	case <-ctx.Done():
		rs.mu.Lock()
		if fl.waiters--; fl.waiters == 0 {
			// Nobody waits for it any more: stop it, and let the next
			// request start afresh rather than join a cancelled flight.
			fl.cancel()
			if rs.flights[key] == fl {
				delete(rs.flights, key)
			}
		}
		rs.mu.Unlock()
		return fmt.Errorf("datanode: wait for the catalog's reload of table %s: %w", key.table, context.Cause(ctx))
	}
}

// waiting is the number of requests waiting on the reload of key (tests).
func (rs *reloads) waiting(key reloadKey) int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if fl := rs.flights[key]; fl != nil {
		return fl.waiters
	}
	return 0
}

// reloadTable brings the catalog's copy up to etcd's newest commit and, if
// create is set and table is still missing, creates it (a create that
// loses the race to another's is no error: the table exists). It holds no
// lock of the engine: the catalog's compare-and-swap orders creates.
func (e *Engine) reloadTable(ctx context.Context, table string, create bool) error {
	return e.reloads.do(ctx, reloadKey{table, create}, func(ctx context.Context) error {
		// Created through another datanode or metasrv since the catalog's
		// watch last delivered.
		if err := e.cat.Sync(ctx); err != nil && !errors.Is(err, catalog.ErrClosed) {
			return err
		}
		t, ok := e.cat.Lookup(table)
		switch {
		case ok && t.Logical && !t.Dropping:
			return e.ensureLines(ctx, table) // written by a node that died before creating it
		case ok || !create:
			return nil
		}
		spec := catalog.TableSpec{Name: table}
		switch {
		case catalog.IsMetrics(table):
			spec.Regions = e.opts.MetricsRegions
		case !e.opts.PhysicalTables && !catalog.Reserved(table):
			// A measurement a write names: a logical table, its rows in
			// LinesTable, which is created first so that no logical
			// table is ever without it.
			if err := catalog.ValidateTableName(table); err != nil {
				return err
			}
			if err := e.ensureLines(ctx, table); err != nil {
				return err
			}
			spec.Logical = true
		}
		_, err := e.createTable(ctx, spec)
		if errors.Is(err, catalog.ErrTableExists) {
			return nil
		}
		return err
	})
}
