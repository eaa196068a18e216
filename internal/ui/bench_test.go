package ui_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stratadb/strata/internal/compact"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/server/servertest"
	"github.com/stratadb/strata/internal/tsbs"
)

// TestBrowserRenderTime (STRATA_UI_BENCH=1) times the graph of
// avg by (hostname) (avg_over_time(cpu_usage_user[1h])) over 12 h of
// 4,000 TSBS hosts (17.3 million rows, one a host every 10 s, written to
// the engine, flushed and compacted) end to end: from navigating to the
// query's URL to the graph drawn with every series, in Chromium, the
// page loaded fresh each time. The page's own split (query, render) is
// logged too (docs/ui.md, "Render time").
func TestBrowserRenderTime(t *testing.T) {
	if os.Getenv("STRATA_UI_BENCH") != "1" {
		t.Skip("set STRATA_UI_BENCH=1 to time the 4,000-host graph (loads 17 million rows, minutes)")
	}
	ctx := browser(t)
	const hosts, hours = 4000, 12
	store, err := objstore.Open(context.Background(), "file://"+t.TempDir(), objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	node := servertest.Start(t, store, servertest.Options{})
	e := node.Engine()
	end := time.Now().Truncate(time.Hour)
	start := end.Add(-hours * time.Hour)
	tags := make([][]row.Tag, hosts)
	for h := range tags {
		tags[h] = tsbs.Tags(h)
	}
	began := time.Now()
	const perWrite = 10 // rounds a write
	bg := context.Background()
	for r := 0; r < hours*360; r += perWrite {
		batch := make([]row.Point, 0, hosts*perWrite)
		for k := r * hosts; k < (r+perWrite)*hosts; k++ {
			batch = append(batch, tsbs.Point(tags, k, start.UnixNano()))
		}
		if _, err := e.Write(bg, "cpu", batch, datanode.WriteOptions{CreateTable: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Flush(bg, "cpu"); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := e.Compact(bg, "cpu", true)
		if err == nil {
			break
		}
		if !errors.Is(err, compact.ErrBusy) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // a compaction the flush started is running: no signal to wait on
	}
	t.Logf("loaded %d rows (%d hosts, %d h) in %v", hosts*hours*360, hosts, hours, time.Since(began).Round(time.Second))

	for _, step := range []string{"1h", ""} {
		q := url.Values{"q": {"avg by (hostname) (avg_over_time(cpu_usage_user[1h]))"}, "range": {"12h"},
			"end": {fmt.Sprint(end.Unix())}}
		name := "step 1h (the TSBS query's)"
		if step != "" {
			q.Set("step", step)
		} else {
			name = "step auto (range/250: 173 s)"
		}
		page := "http://" + node.HTTPAddr() + "/#/query?" + q.Encode()
		var times []time.Duration
		for i := range 3 {
			do(t, ctx, "blank page", chromedp.Navigate("about:blank"))
			began := time.Now()
			do(t, ctx, "graph", chromedp.Navigate(page),
				chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#result .graph[data-series="%d"][data-drawn="%d"]`, hosts, hosts))))
			took := time.Since(began)
			times = append(times, took)
			split := eval[string](t, ctx, `(s => 'query ' + s.dataset.queryMs + ' ms, render ' + s.dataset.renderMs + ' ms, of which drawing ' +
				document.querySelector('.graph').dataset.drawMs + ' ms; drawn ' + s.dataset.sinceNavigationMs + ' ms after the navigation began')(document.getElementById('stats'))`)
			t.Logf("%s, run %d: %v end to end (the page: %s)", name, i+1, took.Round(time.Millisecond), split)
			if i == 0 && step != "" {
				screenshot(t, ctx, "query-4000-hosts")
			}
		}
		slices.Sort(times)
		t.Logf("%s: median %v end to end", name, times[1].Round(time.Millisecond))
	}
}
