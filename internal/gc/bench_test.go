package gc

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
)

// putAll uploads a small object at each key, 32 at a time.
func putAll(b *testing.B, s objstore.Bucket, keys []string) {
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, k := range keys {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := s.Put(context.Background(), k, []byte("sst")); err != nil {
				mu.Lock()
				first = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}

// gcRegion builds a region of total objects, garbage of them garbage: with
// orphans, unowned objects (full GC's work); otherwise removed files (fast
// GC's work). The rest are live SSTs in the manifest.
func gcRegion(b *testing.B, s *objstore.Store, total, garbage int, orphans bool) *region.Region {
	ctx := context.Background()
	r, err := region.Open(ctx, s, rid, region.Options{Create: true, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	files := total - garbage
	if !orphans {
		files = total
	}
	var keys []string
	var metas []manifest.FileMeta
	for range files {
		id := ulid.Make().String()
		metas = append(metas, manifest.FileMeta{ID: id, MinTS: 1, MaxTS: 2, Rows: 1, Size: 3})
		keys = append(keys, rid.SSTKey(id))
	}
	if orphans {
		for range garbage {
			keys = append(keys, rid.SSTKey(ulid.Make().String()))
		}
	}
	putAll(b, s, keys)
	// Register the files under the commit protocol, 1000 per job.
	for at := 0; at < len(metas); at += 1000 {
		part := metas[at:min(at+1000, len(metas))]
		job := fmt.Sprintf("bench-%d", at)
		ids := make([]string, len(part))
		for i, m := range part {
			ids[i] = m.ID
		}
		if err := r.Commit(ctx, manifest.Action{Pending: &manifest.PendingOutputs{JobID: job, FileIDs: ids, Epoch: r.Epoch()}}); err != nil {
			b.Fatal(err)
		}
		if err := r.Commit(ctx, manifest.Action{Edit: &manifest.Edit{Add: part, Resolves: job}}); err != nil {
			b.Fatal(err)
		}
	}
	if !orphans {
		remove := make([]string, garbage)
		for i := range remove {
			remove[i] = metas[i].ID
		}
		if err := r.Commit(ctx, manifest.Action{Edit: &manifest.Edit{Remove: remove}}); err != nil {
			b.Fatal(err)
		}
	}
	return r
}

// BenchmarkGC compares fast and full-listing GC on a region of 10,000
// objects of which 100 are garbage (removed files for fast GC, unowned
// objects for full GC), on mem:// and MinIO, reporting the requests each
// run issues. Run with -benchtime 1x: setting up a region costs 10,000
// PUTs.
func BenchmarkGC(b *testing.B) {
	const total, garbage = 10_000, 100
	backends := map[string]func(b *testing.B) string{
		"mem":   func(*testing.B) string { return "mem://" },
		"minio": func(b *testing.B) string { return objstoretest.MinIO(b).NewBucket(b) },
	}
	for _, name := range []string{"mem", "minio"} {
		for _, mode := range []string{"fast", "full"} {
			b.Run(name+"/"+mode, func(b *testing.B) {
				ctx := context.Background()
				var lists, deletes, gets, puts, reclaimed int64
				b.StopTimer()
				for range b.N {
					s, err := objstore.Open(ctx, backends[name](b), objstore.Options{})
					if err != nil {
						b.Fatal(err)
					}
					r := gcRegion(b, s, total, garbage, mode == "full")
					before := s.Requests()
					b.StartTimer()
					if mode == "fast" {
						rep, err := Fast(ctx, r, Options{Lingering: -1})
						if err != nil {
							b.Fatal(err)
						}
						reclaimed += int64(len(rep.RemovedFiles))
					} else {
						rep, err := Full(ctx, r, FullOptions{MinAge: -1})
						if err != nil {
							b.Fatal(err)
						}
						if rep.Listed < total {
							b.Fatalf("listed %d objects, want at least %d", rep.Listed, total)
						}
						reclaimed += int64(len(rep.Deleted))
					}
					b.StopTimer()
					after := s.Requests()
					lists += after[objstore.OpList] - before[objstore.OpList]
					deletes += after[objstore.OpDelete] - before[objstore.OpDelete]
					gets += after[objstore.OpGet] - before[objstore.OpGet] + after[objstore.OpHead] - before[objstore.OpHead]
					puts += after[objstore.OpPut] - before[objstore.OpPut]
					if err := r.Close(ctx, region.CloseOptions{}); err != nil {
						b.Fatal(err)
					}
					s.Close()
				}
				n := float64(b.N)
				if reclaimed != int64(garbage*b.N) {
					b.Fatalf("reclaimed %d objects in %d runs, want %d each", reclaimed, b.N, garbage)
				}
				b.ReportMetric(float64(lists)/n, "LISTs/op")
				b.ReportMetric(float64(deletes)/n, "DELETEs/op")
				b.ReportMetric(float64(gets)/n, "GETs+HEADs/op")
				b.ReportMetric(float64(puts)/n, "PUTs/op")
			})
		}
	}
}
