package region

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/wal"
)

// putCounter counts WAL creates: stream segments.
type putCounter struct {
	objstore.Bucket
	wal atomic.Int64
}

func (p *putCounter) CreateIfAbsent(ctx context.Context, key string, data []byte) error {
	if strings.HasPrefix(key, layout.StreamsPrefix) {
		p.wal.Add(1)
	}
	return p.Bucket.CreateIfAbsent(ctx, key, data)
}

// BenchmarkWALCost is what an acknowledgement costs in WAL PUTs on one
// datanode: 16 concurrent writers send requests of 100 or 10,000 TSBS rows
// round-robin into 1 or 16 regions, each region with a stream of its own
// (as each had its own WAL before the shared stream) or all through the
// node's shared stream, both with the default 10 ms window (STRATA_WAL_WINDOW overrides it). Each op is one request.
// It reports rows/s, acknowledgement p50/p99 and WAL PUTs per second.
// Flushes are out of the way (64 MiB memtables, not reached in a run).
//
//	go test ./internal/region -run '^$' -bench WALCost -benchtime 400x
func BenchmarkWALCost(b *testing.B) {
	window := 10 * time.Millisecond
	if v := os.Getenv("STRATA_WAL_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		window = d
	}
	const writers = 16
	for _, bk := range objstoretest.BenchBackends() {
		for _, rows := range []int{100, 10_000} {
			for _, regions := range []int{1, 16} {
				for _, mode := range []string{"own", "stream"} {
					name := fmt.Sprintf("%s/rows=%d/regions=%d/wal=%s", bk.Name, rows, regions, mode)
					b.Run(name, func(b *testing.B) {
						ctx := context.Background()
						store := &putCounter{Bucket: bk.Open(b)}
						opts := Options{Logger: quiet, WALWindow: window, FlushBytes: 1 << 40, MaxMemtableBytes: 1 << 40}
						if mode == "stream" {
							s := wal.NewStream(store, wal.StreamOptions{Window: window, NewID: func() string { return "bench/1" }})
							defer func() { _ = s.Close() }()
							opts.Stream = s
						}
						var rs []*Region
						for i := range regions {
							rs = append(rs, openAt(b, store, layout.RegionID{Table: 1, Region: uint32(i)}, opts))
						}
						defer func() {
							for _, r := range rs {
								_ = r.Close(ctx, CloseOptions{})
							}
						}()
						tags := tsbsTags()
						for _, r := range rs {
							mustWrite(b, r, tsbsBatch(tags, 0, 1)...) // schema
						}
						batches := make([][]row.Point, writers)
						for w := range batches {
							// Each writer owns its batch, tag slices included:
							// a write sorts its points' tags in place.
							batches[w] = tsbsBatch(tags, w, rows)
							for i := range batches[w] {
								batches[w][i].Tags = slices.Clone(batches[w][i].Tags)
							}
						}
						var next atomic.Int64
						lat := make([][]time.Duration, writers)
						puts0 := store.wal.Load()
						b.ResetTimer()
						var wg sync.WaitGroup
						for w := range writers {
							wg.Add(1)
							go func() {
								defer wg.Done()
								for {
									i := next.Add(1) - 1
									if i >= int64(b.N) {
										return
									}
									r := rs[int(i)%len(rs)]
									t0 := time.Now()
									if _, err := r.Write(ctx, batches[w]); err != nil {
										b.Error(err)
										return
									}
									lat[w] = append(lat[w], time.Since(t0))
								}
							}()
						}
						wg.Wait()
						b.StopTimer()
						secs := b.Elapsed().Seconds()
						all := slices.Concat(lat...)
						slices.Sort(all)
						if len(all) == 0 {
							return
						}
						b.ReportMetric(float64(b.N*rows)/secs, "rows/s")
						b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
						b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
						b.ReportMetric(float64(store.wal.Load()-puts0)/secs, "wal-puts/s")
						b.ReportMetric(0, "ns/op")
					})
				}
			}
		}
	}
}
