package manifest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	objstoretest.StopMinIO()
	os.Exit(code)
}

func benchAction(i int) Action {
	id := fmt.Sprintf("f%08d", i)
	return Action{Edit: &Edit{Add: []FileMeta{{ID: id, Rows: 100000, Size: 8 << 20}}, FlushedSeq: uint64(i + 1)}}
}

// BenchmarkCommit measures one manifest commit (create-if-absent delta plus
// the fence check, and every 10th a checkpoint with deletions).
func BenchmarkCommit(b *testing.B) {
	for _, bk := range objstoretest.BenchBackends() {
		b.Run(bk.Name, func(b *testing.B) {
			s := bk.Open(b)
			m := mustOpen(b, s, Options{Create: true})
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				// Keep the state small: add one file, remove the previous one.
				a := benchAction(i)
				if i > 0 {
					a.Edit.Remove = []string{fmt.Sprintf("f%08d", i-1)}
				}
				if _, err := m.Commit(ctx, a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRecover10k measures opening a region whose manifest has had 10,000
// deltas (checkpoint every 10): list, read the checkpoint, replay the tail.
func BenchmarkRecover10k(b *testing.B) {
	for _, bk := range objstoretest.BenchBackends() {
		b.Run(bk.Name, func(b *testing.B) {
			s := bk.Open(b)
			m := mustOpen(b, s, Options{Create: true})
			ctx := context.Background()
			for i := range 10004 {
				a := benchAction(i)
				if i > 0 && i%2 == 0 {
					a.Edit.Remove = []string{fmt.Sprintf("f%08d", i-1)}
				}
				if _, err := m.Commit(ctx, a); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				ro, err := Open(ctx, s, region, Options{ReadOnly: true})
				if err != nil {
					b.Fatal(err)
				}
				if ro.State().Version != 10005 {
					b.Fatalf("version %d", ro.State().Version)
				}
			}
		})
	}
}
