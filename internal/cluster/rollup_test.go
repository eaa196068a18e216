package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/rollup"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/testseed"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// Owners' ages, as olderOwners plays them.
const (
	current          int32 = iota
	beforeAggregates       // knows rollups, not aggregates: sends each series rolled up
	beforeRollups          // knows neither: sends samples
)

// olderOwners is a Remote whose column scans reach owners of the age age
// holds: the request goes without the fields such an owner does not know,
// as it reads them, and the answer comes as theirs does (samples without
// the rolled flag, rolled series without the aggregated one).
type olderOwners struct {
	datanode.Remote
	age *atomic.Int32
}

func (o olderOwners) ScanColumns(ctx context.Context, table string, id layout.RegionID, req scan.Request, emit func(*scan.Column) error) error {
	if o.age.Load() >= beforeAggregates {
		req.Aggregate = nil
	}
	if o.age.Load() >= beforeRollups {
		req.Rollup = nil
	}
	return o.Remote.ScanColumns(ctx, table, id, req, emit)
}

// twins is three datanodes, each the owner of one of table m's three
// regions (through owners of the age age holds), and a standalone with m
// in one region. write writes points to both, the cluster's through a
// datanode rng picks, and with flush, flushes every node's m.
func twins(t *testing.T, rng *rand.Rand) (dns []*server.Server, sa *servertest.Node, age *atomic.Int32, write func(points []row.Point, flush bool)) {
	t.Helper()
	age = new(atomic.Int32)
	dns = datanodes(t, 3, func(o *datanode.Options) { o.Remote = olderOwners{Remote: o.Remote, age: age} })
	ctx := context.Background()
	if _, err := dns[0].Engine().CreateTable(ctx, catalog.TableSpec{Name: "m", Regions: 3}); err != nil {
		t.Fatal(err)
	}
	for i, h := range placedOn(t, dns, "m") {
		if len(h) != 1 {
			t.Fatalf("dn%d hosts regions %v of m, want one", i+1, h)
		}
	}
	sa = servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	standalone := sa.Engine()
	if _, err := standalone.CreateTable(ctx, catalog.TableSpec{Name: "m", Regions: 1}); err != nil {
		t.Fatal(err)
	}
	servertest.WaitHosted(t, standalone, "m")
	write = func(points []row.Point, flush bool) {
		t.Helper()
		for _, e := range []*datanode.Engine{dns[rng.Intn(3)].Engine(), standalone} {
			if _, err := e.Write(ctx, "m", points, datanode.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if !flush {
			return
		}
		for _, dn := range dns {
			if err := dn.Engine().Flush(ctx, "m"); err != nil {
				t.Fatal(err)
			}
		}
		if err := standalone.Flush(ctx, "m"); err != nil {
			t.Fatal(err)
		}
	}
	return dns, sa, age, write
}

// rollupCluster is twins holding the same points of m (field v, 24
// hosts, 3 hours, about every 10 s): irregular and sub-millisecond
// timestamps, huge values whose sums overflow, samples rewritten by later
// files whose time ranges overlap the earlier ones (so an owner reads
// some series' columns out of time order and rolls them up from their
// samples kept), and the last stretch in memtables.
func rollupCluster(t *testing.T) (dns []*server.Server, sa *servertest.Node, age *atomic.Int32, base time.Time) {
	t.Helper()
	rng := rand.New(rand.NewSource(int64(testseed.Seed(t))))
	dns, sa, age, write := twins(t, rng)
	base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	special := []float64{1e308, -1e308, 1.7e308, 5e-324, math.Copysign(0, -1)}
	point := func(host int, ts time.Time) row.Point {
		v := float64(rng.Intn(1000)) / 10
		if rng.Intn(50) == 0 {
			v = special[rng.Intn(len(special))]
		}
		return row.Point{Tags: []row.Tag{{Name: "host", Value: fmt.Sprint("h", host)}}, TS: ts.UnixNano(), Fields: []row.Field{{Name: "v", Value: row.FloatValue(v)}}}
	}
	for hour := range 3 {
		var points []row.Point
		for h := range 24 {
			for i := range 360 {
				ts := base.Add(time.Duration(hour)*time.Hour + time.Duration(i)*10*time.Second)
				switch rng.Intn(6) {
				case 0:
					ts = ts.Add(time.Duration(rng.Intn(9000)) * time.Millisecond)
				case 1:
					ts = ts.Add(time.Duration(rng.Intn(2000)) * time.Microsecond)
				}
				points = append(points, point(h, ts))
			}
		}
		write(points, hour < 2)
		if hour == 1 {
			// A file over the first two hours that rewrites some of
			// their samples: hosts' columns out of time order.
			var rewrite []row.Point
			for h := range 6 {
				for range 40 {
					rewrite = append(rewrite, point(h, base.Add(time.Duration(rng.Int63n(int64(2*time.Hour))))))
				}
			}
			write(rewrite, true)
		}
	}
	return dns, sa, age, base
}

// render prints a result exactly: every value's bits.
func render(t *testing.T, v any) string {
	t.Helper()
	var m promql.Matrix
	switch v := v.(type) {
	case promql.Matrix:
		m = v
	case promql.Vector:
		for _, s := range v {
			m = append(m, promql.Series{Metric: s.Metric, Floats: []promql.FPoint{{T: s.T, F: s.F}}})
		}
	default:
		t.Fatalf("a %T", v)
	}
	slices.SortFunc(m, func(a, b promql.Series) int { return labels.Compare(a.Metric, b.Metric) })
	var b strings.Builder
	for _, s := range m {
		b.WriteString(s.Metric.String())
		for _, p := range s.Floats {
			fmt.Fprintf(&b, " %d:%x", p.T, math.Float64bits(p.F))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Range-function rollups computed by each region's owner give, through
// every datanode, the answers of a standalone and of Prometheus' engine
// over the raw samples, to the bit: avg, sum, min, max and last over
// time, over ranges of a minute to an hour at steps of the range and
// more, alone, aggregated and in a binary expression, through
// Prometheus' engine and through the API (which evaluates aggregations
// of rollups itself). The same with owners older than rollups, which
// send samples for the receiver to roll up.
func TestRollupsAtTheOwnersAreTheStandalones(t *testing.T) {
	dns, sa, age, base := rollupCluster(t)
	standalone := sa.Engine()
	ctx := context.Background()
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e8, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	run := func(q storage.Queryable, expr string, start, end time.Time, step time.Duration) string {
		t.Helper()
		qry, err := engine.NewRangeQuery(ctx, q, nil, expr, start, end, step)
		if err != nil {
			t.Fatal(err)
		}
		defer qry.Close()
		res := qry.Exec(ctx)
		if res.Err != nil {
			t.Fatalf("%s: %v", expr, res.Err)
		}
		return render(t, res.Value)
	}
	api := func(httpAddr, expr string, start, end time.Time, step time.Duration) string {
		t.Helper()
		q := url.Values{"query": {expr}, "start": {fmt.Sprint(start.Unix())}, "end": {fmt.Sprint(end.Unix())}, "step": {fmt.Sprint(step.Seconds())}}
		resp, err := http.Get("http://" + httpAddr + "/api/v1/query_range?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", expr, resp.StatusCode, body)
		}
		return string(body)
	}
	rescans := rollup.Rescans()
	queries := 0
	for _, f := range []string{"avg_over_time", "sum_over_time", "min_over_time", "max_over_time", "last_over_time"} {
		for _, r := range []time.Duration{time.Minute, 10 * time.Minute, time.Hour} {
			for _, k := range []int64{1, 2} {
				step := time.Duration(k) * r
				inner := fmt.Sprintf("%s(m_v[%dm])", f, int(r.Minutes()))
				for _, expr := range []string{inner, "avg by (host) (" + inner + ")", "sum(" + inner + ")", "max(" + inner + ")", inner + " - " + inner} {
					start, end := base.Add(r), base.Add(3*time.Hour)
					want := run(&prom.Queryable{Engine: standalone}, expr, start, end, step) // Prometheus' engine over raw samples
					if got := run(&prom.Queryable{Engine: standalone, Rollups: true}, expr, start, end, step); got != want {
						t.Fatalf("%s step %s: the standalone's rollups\n%s\nraw samples\n%s", expr, step, got, want)
					}
					for _, older := range []int32{current, beforeRollups} {
						age.Store(older)
						for i, dn := range dns {
							if got := run(&prom.Queryable{Engine: dn.Engine(), Rollups: true}, expr, start, end, step); got != want {
								t.Fatalf("%s step %s through dn%d (owners' age %d):\n%s\nraw samples on a standalone\n%s", expr, step, i+1, older, got, want)
							}
						}
					}
					age.Store(current)
					queries++
				}
				// The API, which evaluates aggregations of rollups
				// without the engine: every datanode answers as the
				// standalone, with owners old and new.
				expr := "sum by (host) (" + inner + ")"
				first := api(sa.HTTPAddr(), expr, base.Add(r), base.Add(3*time.Hour), step)
				for _, older := range []int32{current, beforeRollups} {
					age.Store(older)
					for i, dn := range dns {
						if got := api(dn.HTTPAddr(), expr, base.Add(r), base.Add(3*time.Hour), step); got != first {
							t.Fatalf("%s through dn%d's API (owners' age %d):\n%s\nthe standalone's\n%s", expr, i+1, older, got, first)
						}
					}
				}
				age.Store(current)
			}
		}
	}
	if rollup.Rescans() == rescans {
		t.Fatal("no owner read a series' columns out of time order")
	}
	t.Logf("%d queries, %d scans read again for columns out of time order", queries, rollup.Rescans()-rescans)
}

// peerReceived is how many bytes of ScanColumns messages dn received from
// other datanodes.
func peerReceived(t *testing.T, dn *server.Server) float64 {
	t.Helper()
	return servertest.PeerBytes(t, dn, "received", "/ScanColumns")
}

// Every host's hourly average, asked of one datanode, moves a small part
// of the bytes between datanodes with the rollups at the owners that it
// moves with owners older than rollups (every sample), for the same
// answer. The owners' columns come rolled, one value a window and
// series; an older owner's come unrolled, as do a local region's (the
// receiver rolls those up as they come).
func TestRollupsAtTheOwnersMoveFewerBytes(t *testing.T) {
	dns, _, age, base := rollupCluster(t)
	ctx := context.Background()
	q := url.Values{"query": {"avg(avg_over_time(m_v[1h])) by (host)"}, "start": {fmt.Sprint(base.Add(time.Hour).Unix())},
		"end": {fmt.Sprint(base.Add(3 * time.Hour).Unix())}, "step": {"3600"}}
	query := func() (string, float64) {
		before := peerReceived(t, dns[0])
		resp, err := http.Get("http://" + dns[0].HTTPAddr() + "/api/v1/query_range?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		return string(body), peerReceived(t, dns[0]) - before
	}
	pushed, pushedBytes := query()
	age.Store(beforeRollups)
	raw, rawBytes := query()
	age.Store(current)
	if pushed != raw {
		t.Fatalf("rolled up at the owners:\n%s\nby the receiver:\n%s", pushed, raw)
	}
	t.Logf("ScanColumns bytes received by dn1: %.0f with rollups at the owners, %.0f without (%.0f×)", pushedBytes, rawBytes, rawBytes/pushedBytes)
	if pushedBytes == 0 || pushedBytes*20 > rawBytes {
		t.Fatalf("%.0f bytes with rollups at the owners, %.0f without", pushedBytes, rawBytes)
	}

	// The columns dn1's column scan hands out.
	tb, err := dns[0].Engine().Table("m")
	if err != nil {
		t.Fatal(err)
	}
	local := dns[0].Engine().Hosted()[0].Region
	spec := &scan.Rollup{Func: "avg_over_time", Range: 3_600_000, Start: base.Add(time.Hour).UnixMilli() - 3_600_000 + 1, End: base.Add(3 * time.Hour).UnixMilli(), Step: 3_600_000}
	for _, older := range []int32{current, beforeRollups} {
		age.Store(older)
		var mu sync.Mutex
		rolled, unrolled, values := map[string]int{}, map[string]int{}, 0
		err := dns[0].Engine().ScanColumns(ctx, "m", scan.Request{Start: region.AllTime, End: region.AllTimeEnd, Fields: []string{"v"}, Rollup: spec}, func(c *scan.Column) error {
			mu.Lock()
			defer mu.Unlock()
			if c.Rolled {
				rolled[c.Series]++
				values += len(c.TS)
				if c.Kind != row.Float || c.Samples <= len(c.TS) {
					return fmt.Errorf("a rolled column of %s: kind %s, %d values of %d samples", c.Series, c.Kind, len(c.TS), c.Samples)
				}
			} else {
				unrolled[c.Series]++
			}
			isLocal := layout.Route([]byte(c.Series), tb.Regions) == local
			if c.Rolled != (!isLocal && older == current) {
				return fmt.Errorf("series %q (local %v, owners' age %d): rolled %v", c.Series, isLocal, older, c.Rolled)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for k, n := range rolled {
			if n != 1 {
				t.Fatalf("%q: %d rolled columns", k, n)
			}
		}
		if len(rolled)+len(unrolled) != 24 || values > 3*len(rolled) || older == current && len(rolled) == 0 || older != current && len(rolled) > 0 {
			t.Fatalf("owners' age %d: %d series rolled (%d values), %d not", older, len(rolled), values, len(unrolled))
		}
	}
	age.Store(current)

	// The sample limit counts the samples an owner rolled up, not the
	// windows it sent: two remote series of 1,080 samples each are over
	// a limit of 1,000, in 6 windows.
	var hosts []string
	for h := range 24 {
		if name := fmt.Sprint("h", h); layout.Route([]byte(key(name)), tb.Regions) != local && len(hosts) < 2 {
			hosts = append(hosts, name)
		}
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e8, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	expr := fmt.Sprintf("avg_over_time(m_v{host=~%q}[1h])", strings.Join(hosts, "|"))
	for _, limit := range []int{1000, 10_000} {
		for _, older := range []int32{current, beforeRollups} {
			age.Store(older)
			qry, err := engine.NewRangeQuery(ctx, &prom.Queryable{Engine: dns[0].Engine(), Rollups: true, MaxSamples: limit}, nil, expr, base.Add(time.Hour), base.Add(3*time.Hour), time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			res := qry.Exec(ctx)
			if over := errors.Is(res.Err, prom.ErrTooManySamples); over != (limit == 1000) || !over && res.Err != nil {
				t.Fatalf("%s, limit %d, owners' age %d: %v", expr, limit, older, res.Err)
			}
			qry.Close()
		}
	}
	age.Store(current)
}

// A rollup that is not one (an unknown function, windows that overlap, no
// range) is an invalid scan (400) wherever it is refused: by the engine
// the query asks, by a region's owner over gRPC (InvalidArgument, read
// back as invalid by the asking datanode's agent), and in a scan of rows,
// which computes none.
func TestABadRollupIsInvalid(t *testing.T) {
	var remote datanode.Remote // dn1's agent
	var once sync.Once
	dns := datanodes(t, 2, func(o *datanode.Options) { once.Do(func() { remote = o.Remote }) })
	ctx := context.Background()
	if _, err := dns[0].Engine().CreateTable(ctx, catalog.TableSpec{Name: "m", Regions: 2}); err != nil {
		t.Fatal(err)
	}
	hosted := placedOn(t, dns, "m")
	if len(hosted[0]) != 1 || len(hosted[1]) != 1 {
		t.Fatalf("regions of m: %v", hosted)
	}
	var points []row.Point
	for h := range 8 {
		points = append(points, row.Point{Tags: []row.Tag{{Name: "host", Value: fmt.Sprint("h", h)}}, TS: int64(time.Second), Fields: []row.Field{{Name: "v", Value: row.FloatValue(1)}}})
	}
	if _, err := dns[0].Engine().Write(ctx, "m", points, datanode.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	bad := []scan.Rollup{
		{Func: "rate", Range: 60_000, Step: 60_000},
		{Func: "avg_over_time", Range: 60_000, Step: 30_000},
		{Func: "max_over_time"},
	}
	nop := func(*scan.Column) error { return nil }
	for _, sp := range bad {
		req := scan.Request{Start: region.AllTime, End: region.AllTimeEnd, Fields: []string{"v"}, Rollup: &sp}
		for i, dn := range dns {
			err := dn.Engine().ScanColumns(ctx, "m", req, nop)
			if !errors.Is(err, scan.ErrInvalid) || datanode.ErrClass(err).HTTP() != http.StatusBadRequest {
				t.Errorf("%+v: column scan on dn%d: %v (%s)", sp, i+1, err, datanode.ErrClass(err))
			}
			if _, err := dn.Engine().Scan(ctx, "m", req); !errors.Is(err, scan.ErrInvalid) {
				t.Errorf("%+v: scan of rows on dn%d: %v", sp, i+1, err)
			}
		}
		// dn2's region, asked by dn1's agent: refused by dn2.
		err := remote.ScanColumns(ctx, "m", hosted[1][0], req, nop)
		if c := datanode.ErrClass(err); err == nil || c.HTTP() != http.StatusBadRequest {
			t.Errorf("%+v: dn2's region through dn1's agent: %v (%s)", sp, err, c)
		}
		// Straight to each owner, as an older receiver or another client
		// would ask.
		for i, dn := range dns {
			conn, err := grpc.NewClient(dn.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			c := pb.NewDatanodeClient(conn)
			for _, call := range []string{"ScanColumns", "Scan"} {
				preq := &pb.ScanRequest{Table: "m", Region: hosted[i][0].String(), Fields: []string{"v"},
					Rollup: &pb.Rollup{Func: sp.Func, Range: sp.Range, Start: sp.Start, End: sp.End, Step: sp.Step}}
				var err error
				if call == "ScanColumns" {
					var st grpc.ServerStreamingClient[pb.ScanColumnsResponse]
					if st, err = c.ScanColumns(ctx, preq); err == nil {
						_, err = st.Recv()
					}
				} else {
					var st grpc.ServerStreamingClient[pb.ScanResponse]
					if st, err = c.Scan(ctx, preq); err == nil {
						_, err = st.Recv()
					}
				}
				if status.Code(err) != codes.InvalidArgument {
					t.Errorf("%+v: %s on dn%d: %v", sp, call, i+1, err)
				}
			}
			conn.Close()
		}
	}
	// A good one, straight to an owner: its region's series rolled, the
	// response says so; without one, samples, and it does not.
	conn, err := grpc.NewClient(dns[1].GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, r := range []*pb.Rollup{{Func: "sum_over_time", Range: 10_000, Start: -9_999, End: 10_000, Step: 10_000}, nil} {
		st, err := pb.NewDatanodeClient(conn).ScanColumns(ctx, &pb.ScanRequest{Table: "m", Region: hosted[1][0].String(), Fields: []string{"v"}, Rollup: r})
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.Recv()
		if err != nil || m.Rolled != (r != nil) || len(m.Columns) == 0 {
			t.Fatalf("rollup %v: %v, %v", r, m, err)
		}
		for _, c := range m.Columns {
			if (c.Samples == 1) != (r != nil) {
				t.Fatalf("rollup %v: a column of %d samples", r, c.Samples)
			}
		}
	}
}
