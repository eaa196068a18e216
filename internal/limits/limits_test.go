package limits

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stratadb/strata/internal/cluster/clustertest"
)

func TestSet(t *testing.T) {
	var l Limits
	if err := l.Set("max_active_series=100", "ingestion_rate=2.5", "ingestion_burst=10", "max_label_value_length = 64"); err != nil {
		t.Fatal(err)
	}
	want := Limits{MaxActiveSeries: 100, IngestionRate: 2.5, IngestionBurst: 10, MaxLabelValueLength: 64}
	if l != want {
		t.Fatalf("%+v, want %+v", l, want)
	}
	if err := l.Set("max_active_series=unlimited", "ingestion_burst=0"); err != nil || l.MaxActiveSeries != 0 || l.IngestionBurst != 0 {
		t.Fatalf("%+v %v", l, err)
	}
	for _, bad := range []string{"nope=1", "max_active_series=1.5", "max_active_series=-1", "ingestion_rate=NaN", "max_active_series", "max_series_per_query=x"} {
		if err := l.Set(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", bad, err)
		}
	}
	for _, k := range Keys {
		if k.Help == "" || k.get == nil || k.set == nil {
			t.Errorf("key %s is incomplete", k.Name)
		}
	}
	if err := CheckTenant("a/b"); err == nil {
		t.Error("tenant a/b accepted")
	}
}

// TestUpdateAndWatch: limits set in etcd reach a watcher without a
// restart; limits all 0 remove the key.
func TestUpdateAndWatch(t *testing.T) {
	ctx := context.Background()
	cli := clustertest.Etcd(t)
	if _, err := Update(ctx, cli, DefaultTenant, func(l *Limits) error { return l.Set("max_active_series=5") }); err != nil {
		t.Fatal(err)
	}
	w, err := Watch(ctx, cli, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got := w.For(DefaultTenant).MaxActiveSeries; got != 5 {
		t.Fatalf("loaded max_active_series %d, want 5", got)
	}
	waitFor := func(ok func(Limits) bool) {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			ch := w.Changed()
			if ok(w.For(DefaultTenant)) {
				return
			}
			select {
			case <-ch:
			case <-deadline:
				t.Fatalf("limits %+v after a minute", w.For(DefaultTenant))
			}
		}
	}
	l, err := Update(ctx, cli, DefaultTenant, func(l *Limits) error { return l.Set("max_active_series=7", "ingestion_rate=3") })
	if err != nil || l.MaxActiveSeries != 7 || l.IngestionRate != 3 {
		t.Fatalf("%+v %v", l, err)
	}
	waitFor(func(l Limits) bool { return l.MaxActiveSeries == 7 && l.IngestionRate == 3 })
	if _, err := Update(ctx, cli, DefaultTenant, func(l *Limits) error { return l.Set("max_active_series=0", "ingestion_rate=0") }); err != nil {
		t.Fatal(err)
	}
	waitFor(func(l Limits) bool { return l == Limits{} })
	if resp, err := cli.Get(ctx, EtcdKey(DefaultTenant)); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the key of no limits stays: %v %v", resp, err)
	}
	if got, err := Load(ctx, cli, DefaultTenant); err != nil || got != (Limits{}) {
		t.Fatalf("Load: %+v %v", got, err)
	}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestRate(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	in := NewIngest(Static(nil), 0)
	in.now = c.now
	l := Limits{IngestionRate: 10, IngestionBurst: 20}
	if err := in.Rate("a", l, 20); err != nil {
		t.Fatal(err)
	}
	err := in.Rate("a", l, 1)
	var le *Error
	if !errors.As(err, &le) || !le.Rate || le.Limit != "ingestion_rate" || !strings.Contains(err.Error(), "ingestion_rate=10") {
		t.Fatalf("over the burst: %v", err)
	}
	if ra, ok := RetryAfter(err); !ok || ra != "1" {
		t.Fatalf("Retry-After %q %v, want 1 (a token at 10/s)", ra, ok)
	}
	if err := in.Rate("b", l, 5); err != nil {
		t.Fatal("tenants share a bucket")
	}
	c.t = c.t.Add(time.Second) // 10 tokens back
	if err := in.Rate("a", l, 10); err != nil {
		t.Fatal(err)
	}
	if err := in.Rate("a", l, 1); err == nil {
		t.Fatal("a token more than refilled")
	}
	c.t = c.t.Add(time.Hour)
	err = in.Rate("a", l, 21)
	if err == nil || !strings.Contains(err.Error(), "send smaller requests") {
		t.Fatalf("a request over the burst: %v", err)
	}
	if _, ok := RetryAfter(err); ok {
		t.Fatal("a Retry-After for a request that never passes")
	}
}

// TestAdmit: new series are admitted up to the table's and the tenant's
// limits, those active always; a series not written for the window stops
// counting.
func TestAdmit(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	in := NewIngest(Static(nil), time.Minute)
	in.now = c.now
	l := Limits{MaxActiveSeriesPerTable: 3, MaxActiveSeries: 4}
	admit := func(table string, hashes ...uint64) ([]bool, *Error) {
		refused := make([]bool, len(hashes))
		return refused, in.Admit("t", table, l, hashes, refused)
	}
	refused, err := admit("x", 1, 1, 2, 3, 4, 4, 5)
	if err == nil || err.Limit != "max_active_series_per_table" || err.Refused != 3 || err.Table != "x" {
		t.Fatalf("%+v", err)
	}
	if want := []bool{false, false, false, false, true, true, true}; !slices.Equal(refused, want) {
		t.Fatalf("refused %v, want %v", refused, want)
	}
	if _, err := admit("x", 3, 2, 1); err != nil {
		t.Fatalf("active series refused: %v", err)
	}
	refused, err = admit("y", 10, 11)
	if err == nil || err.Limit != "max_active_series" || err.Refused != 1 || !refused[1] {
		t.Fatalf("tenant limit: %+v %v", err, refused)
	}
	if total, x := in.Active("t", "x"); total != 4 || x != 3 {
		t.Fatalf("active %d, of x %d", total, x)
	}
	c.t = c.t.Add(2 * time.Minute)
	if _, err := admit("y", 11, 12, 13); err != nil {
		t.Fatalf("after the window: %v", err)
	}
	if total, _ := in.Active("t", "x"); total != 3 {
		t.Fatalf("active %d after the window, want 3", total)
	}
	if got := testutil.CollectAndCount(activeCollector{in}); got != 1 {
		t.Fatalf("strata_active_series has %d series, want 1", got)
	}
	in.Discarded("t", ReasonSeriesPerTable, 3)
	if got := testutil.ToFloat64(in.discarded.WithLabelValues("t", ReasonSeriesPerTable)); got != 3 {
		t.Fatalf("discarded %v", got)
	}
}

// BenchmarkAdmit: a remote-write request of 2,000 series, all active (the
// steady state of a source under its limit), against a table of 100,000
// active series. Reported per series.
func BenchmarkAdmit(b *testing.B) {
	in := NewIngest(Static(nil), 0)
	l := Limits{MaxActiveSeriesPerTable: 1_000_000}
	const active, req = 100_000, 2000
	hashes := make([]uint64, active)
	for i := range hashes {
		hashes[i] = in.Hash([]byte(fmt.Sprintf("series-%d", i)))
	}
	refused := make([]bool, active)
	if err := in.Admit("t", "x", l, hashes, refused); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		off := (i * req) % (active - req)
		if err := in.Admit("t", "x", l, hashes[off:off+req], refused[:req]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*req), "ns/series")
}
