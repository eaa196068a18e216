package rwload_test

import (
	"context"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/rwload"
	"github.com/stratadb/strata/internal/server/servertest"
)

// The generator against a real Strata, over remote write 1.0 and 2.0,
// with churn, staleness markers and NaN samples: the checker finds every
// series and sample through the query API alone, and counts what is there
// when asked for a name and a scrape never sent; the probe finds every
// name, and fails on a name never sent.
func TestRunAndVerifyAgainstStrata(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	write, base, err := rwload.Endpoints("http://" + n.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	shape := rwload.Shape{Names: 20, Series: 5, Labels: 15, Scrapes: 3, Interval: 15 * time.Second,
		Start: time.Now().Add(-time.Hour).Truncate(time.Millisecond), Churn: 0.1, StaleMarkers: true, NaNFraction: 0.05, Batch: 37, Seed: 1}
	for _, p := range []rwload.Protocol{rwload.V1, rwload.V2} {
		shape.Prefix = "rw_v" + p.String()[:1]
		g, err := rwload.NewGenerator(shape)
		if err != nil {
			t.Fatal(err)
		}
		res, err := rwload.Run(ctx, g, rwload.Options{URL: write, Protocol: p, Workers: 3})
		if err != nil {
			t.Fatal(err)
		}
		if res.Failed != 0 || res.Samples != g.Samples() || res.Series != g.Series() || res.StaleMarkers != g.StaleMarkers() || res.StaleMarkers == 0 {
			t.Fatalf("%s: %+v; want %d samples, %d series, %d markers, no failure", p, res, g.Samples(), g.Series(), g.StaleMarkers())
		}
		c, err := rwload.Verify(ctx, g, rwload.VerifyOptions{URL: base, Settle: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if !c.OK() || c.StoredSeries != 120 || c.StoredSamples != 300 {
			t.Fatalf("%s: %+v; want 120 series and 300 samples stored", p, c)
		}
		pr, err := rwload.RunProbe(ctx, g, rwload.ProbeOptions{URL: base, LabelValues: 3, CountByName: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(pr.LabelValues) != 3 || len(pr.CountByName) != 2 || pr.Groups != 20 || pr.Names < 20 {
			t.Fatalf("%s: probe %+v; want 3 and 2 timings, 20 names", p, pr)
		}
	}
	// A name and a scrape never sent: the checker counts what is there.
	shape.Names, shape.Scrapes = 21, 4
	g, err := rwload.NewGenerator(shape)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rwload.Verify(ctx, g, rwload.VerifyOptions{URL: base, Settle: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if c.OK() || c.StoredSamples != 300 || c.ExpectedSamples != 420 || c.StoredSeries != 120 || c.ExpectedSeries != 138 {
		t.Fatalf("a name and a scrape never sent: %+v", c)
	}
	if _, err := rwload.RunProbe(ctx, g, rwload.ProbeOptions{URL: base, LabelValues: 1, CountByName: 1}); err == nil {
		t.Fatal("the probe found a name never sent")
	}
}
