package compact

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stratadb/strata/internal/row"
)

// TestLimitIterStopsOnCancel: an output's stream ends within 4096 rows of
// the job's cancellation, with ErrCancelled, so a cancelled job does not
// encode the rest of a large output.
func TestLimitIterStopsOnCancel(t *testing.T) {
	es := make([]row.Entry, 100_000)
	for i := range es {
		es[i] = row.Entry{Series: "s", TS: int64(i), Seq: 1}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := &limitIter{ctx: ctx, it: &row.SliceIter{Entries: es}, left: math.MaxInt64}
	n := 0
	for l.Next() {
		if n++; n == 10_000 {
			cancel()
		}
	}
	if !errors.Is(l.Err(), ErrCancelled) || n > 10_000+4096 {
		t.Fatalf("after cancelling at row 10000: %d rows, err %v", n, l.Err())
	}
	// Uncancelled, it yields everything and no error.
	l = &limitIter{ctx: context.Background(), it: &row.SliceIter{Entries: es}, left: math.MaxInt64}
	for n = 0; l.Next(); n++ {
	}
	if n != len(es) || l.Err() != nil {
		t.Fatalf("%d of %d rows, err %v", n, len(es), l.Err())
	}
}
