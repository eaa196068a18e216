package datanode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
	tenants "github.com/stratadb/strata/internal/tenant"
)

// CreateTable adds a table to the catalog; metasrv places its regions and
// their owners create them.
// A table created so is physical unless spec says Logical; a write
// creates logical ones (catalog.Table.Logical).
func (e *Engine) CreateTable(ctx context.Context, spec catalog.TableSpec) (catalog.Table, error) {
	if catalog.IsLines(spec.Name) {
		return catalog.Table{}, fmt.Errorf("%w: %s is created with the first logical table", catalog.ErrInvalidTable, spec.Name)
	}
	if spec.Logical {
		if err := catalog.ValidateTableName(spec.Name); err != nil {
			return catalog.Table{}, err
		}
		if err := e.ensureLines(ctx, spec.Name); err != nil {
			return catalog.Table{}, err
		}
	}
	return e.createTable(ctx, spec)
}

// createTable commits a new table to the catalog, without Engine.mu: the
// catalog's compare-and-swap orders racing creates (all but one get
// ErrTableExists).
func (e *Engine) createTable(ctx context.Context, spec catalog.TableSpec) (catalog.Table, error) {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return catalog.Table{}, region.ErrClosed
	}
	if spec.Partition != "" && e.opts.CheckPartitioning != nil {
		if err := e.opts.CheckPartitioning(ctx); err != nil {
			return catalog.Table{}, fmt.Errorf("create table %s partitioned by %s: %w", spec.Name, spec.Partition, err)
		}
	}
	if !spec.Logical && spec.Regions == 0 {
		n, err := e.regionCount(ctx)
		if err != nil {
			return catalog.Table{}, fmt.Errorf("create table %s: %w", spec.Name, err)
		}
		spec.Regions = n
	}
	t, err := e.cat.CreateTable(ctx, spec)
	if err != nil {
		return catalog.Table{}, err
	}
	e.log.Info("table created", "table", t.Name, "id", t.ID, "regions", t.Regions)
	return t, nil
}

// regionCount is the region count of a physical table created without
// one: DefaultRegions if set, else one per datanode live now. The count
// is fixed at creation, so a table a write creates while a cluster is
// still starting spreads over the datanodes registered by then only.
func (e *Engine) regionCount(ctx context.Context) (uint32, error) {
	if e.opts.DefaultRegions > 0 || e.opts.LiveDatanodes == nil {
		return catalog.DefaultRegionCount(e.opts.DefaultRegions, 1), nil
	}
	live, err := e.opts.LiveDatanodes(ctx)
	if err != nil {
		return 0, err
	}
	return catalog.DefaultRegionCount(0, live), nil
}

// Tables lists the tables by name: LinesTable, whose rows are those of
// the logical tables listed, is left out.
func (e *Engine) Tables() []catalog.Table {
	out := slices.DeleteFunc(e.cat.List(false), func(t catalog.Table) bool { return catalog.IsLines(t.Name) })
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// TablesOf lists tenant's tables by name (as Tables), under their catalog
// names (tenant.Qualify's).
func (e *Engine) TablesOf(tenant string) []catalog.Table {
	return slices.DeleteFunc(e.Tables(), func(t catalog.Table) bool { return tenants.Of(t.Name) != tenant })
}

// TableByID returns the live table with id, as the catalog's copy has it.
func (e *Engine) TableByID(id uint32) (catalog.Table, bool) { return e.cat.ByID(id) }

// catalog.Table returns one table.
func (e *Engine) Table(name string) (catalog.Table, error) {
	t, ok := e.cat.Lookup(name)
	if !ok || t.Dropping {
		return catalog.Table{}, fmt.Errorf("%w: %s", catalog.ErrTableNotFound, name)
	}
	return t, nil
}

// DropTable marks a table dropping in the catalog and closes the regions
// of it hosted here. Metasrv's leader finishes the drop: it has every
// datanode close what it hosts of the table, then deletes its objects.
func (e *Engine) DropTable(ctx context.Context, name string) error {
	t, err := e.cat.MarkDropping(ctx, name)
	if err != nil {
		return err
	}
	if t.Logical {
		// Its rows are keyed by its id, which no table gets again: no
		// scan reads them from now on, whatever lands after. Metasrv
		// has every datanode delete them from the regions of
		// LinesTable it hosts (CloseTable).
		e.log.Info("logical table marked dropping; metasrv finishes the drop", "table", name)
		return nil
	}
	// Once the table is dropping in the copy, Assign opens none of its
	// regions (ByID leaves it out): those taken out here are all there are.
	var rs []*region.Region
	e.mu.Lock()
	for i := range t.Regions {
		id := layout.RegionID{Table: t.ID, Region: i}
		if r := e.regions[id]; r != nil {
			rs = append(rs, r)
			delete(e.regions, id)
		}
	}
	e.mu.Unlock()
	for _, r := range rs {
		_, _ = e.sched.Cancel(r)                // waits until the job's outputs are owned
		_ = r.Close(ctx, region.CloseOptions{}) // not flushed: the table is being dropped
	}
	e.log.Info("table marked dropping; metasrv finishes the drop", "table", name)
	return nil
}

// TruncateTable removes every row of a table acknowledged before the call;
// the table, its schema and its regions stay. Each region's running
// compaction is cancelled first, and the truncate waits until that
// cancellation is acknowledged (the job's outputs deleted or owned by its
// marker). A compaction that starts in between cannot commit: its inputs
// are no longer live, so the manifest refuses its edit.
//
// A logical table's rows are deleted series by series, in the regions of
// LinesTable wherever they are hosted.
func (e *Engine) TruncateTable(ctx context.Context, table string) error {
	tg, err := e.resolveTable(ctx, table, false)
	if err != nil {
		return err
	}
	if tg.t.Logical {
		return e.deleteLogical(ctx, tg.t, false)
	}
	if catalog.IsLines(table) {
		return fmt.Errorf("%w: %s holds the rows of every logical table: truncate them one by one", catalog.ErrInvalidTable, table)
	}
	_, regions, err := e.localRegions(ctx, table)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range regions {
		if _, err := e.sched.Cancel(r); err != nil && !errors.Is(err, compact.ErrTooLate) {
			errs = append(errs, fmt.Errorf("region %s: cancel compaction: %w", r.ID(), err))
			continue
		}
		if err := r.Truncate(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
