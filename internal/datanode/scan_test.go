package datanode_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server/servertest"
)

// regionsTable makes table m of 4 regions, 40 series of 10 points, flushed.
func regionsTable(t *testing.T) (*Engine, catalog.Table) {
	t.Helper()
	_, e := openEngine(t, objstoretest.Mem(t), servertest.Options{})
	ctx := context.Background()
	tb, err := e.CreateTable(ctx, catalog.TableSpec{Name: "m", Regions: 4})
	if err != nil {
		t.Fatal(err)
	}
	var points []row.Point
	for s := range 40 {
		for i := range 10 {
			points = append(points, row.Point{Tags: []row.Tag{{Name: "host", Value: fmt.Sprintf("h%d", s)}}, TS: int64(i), Fields: []row.Field{{Name: "v", Value: row.FloatValue(float64(i))}}})
		}
	}
	if _, err := e.Write(ctx, "m", points, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	return e, tb
}

// A column scan reads a table's regions at once: a column of one region
// waits in emit until one of another region comes (read one after
// another, the regions would never meet).
func TestScanColumnsReadsRegionsAtOnce(t *testing.T) {
	e, tb := regionsTable(t)
	var mu sync.Mutex
	seen := map[uint32]bool{}
	met := make(chan struct{})
	n := 0
	err := e.ScanColumns(context.Background(), "m", scan.Request{Start: region.AllTime, End: region.AllTimeEnd, Fields: []string{"v"}}, func(c *scan.Column) error {
		mu.Lock()
		n += len(c.TS)
		if r := layout.Route([]byte(c.Series), tb.Regions); !seen[r] {
			seen[r] = true
			if len(seen) == 2 {
				close(met)
			}
		}
		mu.Unlock()
		select {
		case <-met:
			return nil
		case <-time.After(time.Minute):
			return errors.New("no column of another region came while one waited in emit: the regions are read one after another")
		}
	})
	if err != nil || n != 400 {
		t.Fatalf("%d points, %v", n, err)
	}
}

// When its context ends, a column scan stops reading every region and
// returns the context's error, with no emit call left running or to come.
func TestScanColumnsEndsWithItsContext(t *testing.T) {
	e, _ := regionsTable(t)
	ctx, cancel := context.WithCancel(context.Background())
	var returned, late atomic.Bool
	err := e.ScanColumns(ctx, "m", scan.Request{Start: region.AllTime, End: region.AllTimeEnd, Fields: []string{"v"}}, func(c *scan.Column) error {
		if returned.Load() {
			late.Store(true)
		}
		cancel()
		return nil
	})
	returned.Store(true)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("scan cancelled in its first column: %v", err)
	}
	if late.Load() {
		t.Fatal("emit called after the scan returned")
	}
}

// A column scan whose emit fails for one region's series returns that
// error, whichever region it is (the last is read on the caller's
// goroutine, the others on their own), not the cancellation it caused in
// the others.
func TestScanColumnsReturnsTheFirstError(t *testing.T) {
	e, tb := regionsTable(t)
	for bad := range tb.Regions {
		t.Run(fmt.Sprintf("region %d", bad), func(t *testing.T) {
			want := fmt.Errorf("emit refused a column of region %d", bad)
			failed := make(chan struct{})
			var once sync.Once
			err := e.ScanColumns(context.Background(), "m", scan.Request{Start: region.AllTime, End: region.AllTimeEnd, Fields: []string{"v"}}, func(c *scan.Column) error {
				if layout.Route([]byte(c.Series), tb.Regions) == bad {
					once.Do(func() { close(failed) })
					return want
				}
				<-failed // the other regions are still reading when it fails
				return nil
			})
			if !errors.Is(err, want) {
				t.Fatalf("%v, want %v", err, want)
			}
		})
	}
}
