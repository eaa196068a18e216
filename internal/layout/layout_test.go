package layout

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/testseed"
)

// RouteEach is Route for every key, whatever the keys' lengths and count
// (the four-at-once loop, its tails and the keys after the last four).
func TestRouteEachIsRoute(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed))
	for round := range 200 {
		keys := make([][]byte, rng.IntN(23))
		for i := range keys {
			keys[i] = make([]byte, rng.IntN(300))
			for j := range keys[i] {
				keys[i][j] = byte(rng.Uint32())
			}
		}
		regions := 1 + rng.Uint32N(64)
		got := make([]uint32, len(keys))
		RouteEach(got, keys, regions)
		for i, k := range keys {
			if want := Route(k, regions); got[i] != want {
				t.Fatalf("seed %d round %d: key %d of %d (%d bytes), %d regions: RouteEach %d, Route %d", seed, round, i, len(keys), len(k), regions, got[i], want)
			}
		}
	}
}

// Route is FNV-1a of the key modulo the regions, which decides where data
// lives: a change of it would misplace every series already written.
func TestRouteIsStable(t *testing.T) {
	for _, c := range []struct {
		key     string
		regions uint32
		want    uint32
	}{
		{"", 3, 14695981039346656037 % 3},
		{"a", 7, 0xaf63dc4c8601ec8c % 7}, // FNV-1a 64 of "a"
		{"foobar", 1000, 0x85944171f73967e8 % 1000},
	} {
		if got := Route([]byte(c.key), c.regions); got != c.want {
			t.Errorf("Route(%q, %d) = %d, want %d", c.key, c.regions, got, c.want)
		}
	}
}

// BenchmarkRoute: a batch of TSBS series keys (10 tags, about 140 bytes)
// routed one by one and four at once.
func BenchmarkRoute(b *testing.B) {
	keys := make([][]byte, 4000)
	for i := range keys {
		k, err := row.EncodeSeries(nil, []row.Tag{
			{Name: "hostname", Value: fmt.Sprintf("host_%d", i)}, {Name: "region", Value: "eu-central-1"},
			{Name: "datacenter", Value: "eu-central-1a"}, {Name: "rack", Value: fmt.Sprint(i % 100)},
			{Name: "os", Value: "Ubuntu16.04LTS"}, {Name: "arch", Value: "x64"}, {Name: "team", Value: "SF"},
			{Name: "service", Value: fmt.Sprint(i % 20)}, {Name: "service_version", Value: "1"},
			{Name: "service_environment", Value: "production"},
		})
		if err != nil {
			b.Fatal(err)
		}
		keys[i] = k
	}
	dst := make([]uint32, len(keys))
	b.Run("one", func(b *testing.B) {
		for b.Loop() {
			for i, k := range keys {
				dst[i] = Route(k, 3)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/key")
	})
	b.Run("each", func(b *testing.B) {
		for b.Loop() {
			RouteEach(dst, keys, 3)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(keys)), "ns/key")
	})
}
