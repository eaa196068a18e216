package datanode_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/fwdbatch"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server/servertest"
)

// WriteForwarded routes a key once however often its bytes repeat (as
// fwdbatch.Decode gives them), but every key of other bytes, even equal
// to a routed one's, is routed: a key of another region refuses the
// batch, and a refused batch writes nothing.
func TestWriteForwardedRoutesEveryKey(t *testing.T) {
	ctx := context.Background()
	_, e := openEngine(t, objstoretest.Mem(t), servertest.Options{})
	if _, err := e.CreateTable(ctx, catalog.TableSpec{Name: "cpu", Regions: 3}); err != nil {
		t.Fatal(err)
	}
	servertest.WaitHosted(t, e, "cpu")
	tb, err := e.Table("cpu")
	if err != nil {
		t.Fatal(err)
	}
	id := layout.RegionID{Table: tb.ID}
	// keyOf finds a series key (and its point) that routes to region n.
	keyOf := func(n uint32, from int) (row.Point, []byte) {
		for i := from; ; i++ {
			tags := []row.Tag{{Name: "host", Value: fmt.Sprintf("h%d", i)}}
			k, _ := row.EncodeSeries(nil, slices.Clone(tags))
			if layout.Route(k, 3) == n {
				return row.Point{Tags: tags, TS: int64(i), Fields: []row.Field{{Name: "v", Value: row.FloatValue(1)}}}, k
			}
		}
	}
	here, keyHere := keyOf(0, 0)
	there, keyThere := keyOf(1, 0)
	decoded := func(b region.Batch) region.Batch {
		out, err := fwdbatch.Decode(fwdbatch.Append(nil, b))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for name, b := range map[string]region.Batch{
		"decoded, a key of another region after a repeated one": decoded(region.Batch{Points: []row.Point{here, here, there, here}, Keys: [][]byte{keyHere, keyHere, keyThere, keyHere}}),
		"a key of another region, its own bytes":                {Points: []row.Point{here, there}, Keys: [][]byte{keyHere, keyThere}},
	} {
		var pe *region.PointError
		if _, err := e.WriteForwarded(ctx, "cpu", id, b); !errors.Is(err, region.ErrInvalidWrite) || !errors.As(err, &pe) || pe.Index != 2 && pe.Index != 1 {
			t.Errorf("%s: %v, want the key of region 1 refused", name, err)
		}
		if n, _ := count(t, e, "cpu", scan.Request{}); n != 0 {
			t.Fatalf("%s: %d rows written by a refused batch", name, n)
		}
	}
	// Good keys, repeated, are written.
	other, keyOther := keyOf(0, int(here.TS)+1)
	res, err := e.WriteForwarded(ctx, "cpu", id, decoded(region.Batch{Points: []row.Point{here, other, here, other}, Keys: [][]byte{keyHere, keyOther, keyHere, keyOther}}))
	if err != nil || res.Written != 4 {
		t.Fatalf("a good batch: %+v, %v", res, err)
	}
	// A routed key's bytes, reused by the next batch for a key of another
	// region (keys of one length: hosts h0 to h9), are routed again.
	if len(keyHere) != len(keyThere) {
		t.Fatalf("keys %q and %q of different lengths", keyHere, keyThere)
	}
	buf := slices.Clone(keyHere)
	if _, err := e.WriteForwarded(ctx, "cpu", id, region.Batch{Points: []row.Point{here}, Keys: [][]byte{buf}}); err != nil {
		t.Fatal(err)
	}
	copy(buf, keyThere)
	if _, err := e.WriteForwarded(ctx, "cpu", id, region.Batch{Points: []row.Point{there}, Keys: [][]byte{buf}}); !errors.Is(err, region.ErrInvalidWrite) {
		t.Errorf("a key of region 1 in a routed key's bytes: %v", err)
	}
	if n, _ := count(t, e, "cpu", scan.Request{}); n != 2 { // two series, each at one timestamp
		t.Errorf("%d rows, want 2", n)
	}
}
