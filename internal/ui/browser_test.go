package ui_test

// Browser tests: a real headless Chromium (Debian's package, driven with
// chromedp) loads the UI of servers started in this process. They skip
// where Chromium is missing, unless STRATA_REQUIRE_CHROMIUM=1 (CI), and
// write a screenshot of each page under $STRATA_UI_SCREENSHOTS/ui/ when it
// is set (the docs directory: docs/ui.md shows them).

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stratadb/strata/internal/auth"
	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// wait bounds every wait on the page: generous, for a loaded 2-core
// machine.
const wait = 90 * time.Second

// browser starts a headless Chromium for the test, or skips it.
func browser(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("STRATA_REQUIRE_CHROMIUM") == "1" {
			t.Fatal("Chromium is required (STRATA_REQUIRE_CHROMIUM=1) but none is on PATH: apt-get install chromium")
		}
		t.Skip("browser test skipped: no Chromium on PATH (apt-get install chromium; STRATA_REQUIRE_CHROMIUM=1 makes this a failure)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-gpu", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first Run starts the browser, under a context with no deadline.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium %s: %v", path, err)
	}
	return ctx
}

// do runs steps, each wait bounded by wait.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression on the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// poll waits until a JavaScript expression is truthy.
func poll(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	do(t, ctx, what, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(wait), chromedp.WithPollingInterval(time.Second))(ctx, tg)
		return err
	}))
}

// screenshot saves the page as $STRATA_UI_SCREENSHOTS/ui/name.png.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("STRATA_UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "ui"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ui", name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeLines posts line protocol to a node's HTTP API.
func writeLines(t *testing.T, addr, body string) {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/api/v2/write?bucket=ui&precision=s", "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write: %s", resp.Status)
	}
}

// The known data: three hosts' cpu, one row a minute for the last hour;
// the last row's usage_user of host h is last(h).
var hosts = []string{"a", "b", "c"}

func last(h int) string { return fmt.Sprintf("%d.25", 10*(h+1)) }

func knownData(now time.Time) string {
	var b strings.Builder
	end := now.Add(-30 * time.Second).Unix()
	for i := 60; i >= 0; i-- {
		for h, host := range hosts {
			v := fmt.Sprintf("%d.%02d", 10*(h+1)+(i*7+h*3)%9, (i*13)%100)
			if i == 0 {
				v = last(h)
			}
			fmt.Fprintf(&b, "cpu,host=%s,region=eu usage_user=%s,usage_system=%d %d\n", host, v, i%5, end-int64(i)*60)
		}
	}
	return b.String()
}

const ruleFile = `groups:
- name: cpu
  interval: 1s
  rules:
  - record: host:cpu_usage_user:avg
    expr: avg by (host) (cpu_usage_user)
  - alert: HighCPU
    expr: cpu_usage_user > 25
    labels: {severity: page}
  - alert: SlowCPU
    expr: cpu_usage_user > 15
    for: 1h
`

func TestBrowserStandalone(t *testing.T) {
	ctx := browser(t)
	rules := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(rules, []byte(ruleFile), 0o644); err != nil {
		t.Fatal(err)
	}
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{Config: func(c *server.Config) { c.Rules.Files = []string{rules} }})
	writeLines(t, n.HTTPAddr(), knownData(time.Now()))
	base := "http://" + n.HTTPAddr() + "/"

	// Type a query: completion offers the metric, Tab takes it, Enter runs
	// it; the graph has one series a host.
	do(t, ctx, "load the query page", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("#expr")),
		chromedp.SendKeys(chromedp.CSS("#expr"), "cpu_usage_u"),
		chromedp.WaitVisible(chromedp.CSS(".complete li")))
	if got := eval[string](t, ctx, `document.querySelector('.complete li').firstChild.textContent`); got != "cpu_usage_user" {
		t.Fatalf("first completion of cpu_usage_u: %q", got)
	}
	do(t, ctx, "run the graph", chromedp.KeyEvent(kb.Tab), chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(chromedp.CSS(`#result .graph[data-drawn]`)))
	if got := eval[string](t, ctx, `document.getElementById('expr').value`); got != "cpu_usage_user" {
		t.Fatalf("expression after completion: %q", got)
	}
	if got := eval[int](t, ctx, `document.querySelectorAll('.legend div').length`); got != len(hosts) {
		t.Fatalf("graph: %d series in the legend, want %d", got, len(hosts))
	}
	if got := eval[string](t, ctx, `document.querySelector('.graph').dataset.series`); got != fmt.Sprint(len(hosts)) {
		t.Fatalf("graph: %s series, want %d", got, len(hosts))
	}
	// The samples read, from the API's stats: the hour's rows of each host
	// (61 a host written; the range's first minute may fall before them).
	if got := eval[string](t, ctx, `document.getElementById('stats').dataset.samplesRead || ''`); got != fmt.Sprint(61*len(hosts)) && got != fmt.Sprint(60*len(hosts)) {
		t.Fatalf("samples read shown: %q, want %d (or %d)", got, 61*len(hosts), 60*len(hosts))
	}
	if got := eval[string](t, ctx, `document.getElementById('stats').textContent`); !strings.Contains(got, "samples read") {
		t.Fatalf("stats line: %q", got)
	}
	// Label completion inside the selector.
	do(t, ctx, "complete a label", chromedp.SendKeys(chromedp.CSS("#expr"), "{ho"), chromedp.WaitVisible(chromedp.CSS(".complete li")))
	if got := eval[string](t, ctx, `document.querySelector('.complete li').firstChild.textContent`); got != "host" {
		t.Fatalf("first completion of a label starting ho: %q", got)
	}
	do(t, ctx, "complete a value", chromedp.KeyEvent(kb.Tab), chromedp.SendKeys(chromedp.CSS("#expr"), `="`),
		chromedp.WaitVisible(chromedp.CSS(".complete li")))
	if got := eval[string](t, ctx, `[...document.querySelectorAll('.complete li')].map(li => li.firstChild.textContent).join(',')`); got != "a,b,c" {
		t.Fatalf("completions of host's values: %q", got)
	}
	do(t, ctx, "take a value", chromedp.KeyEvent(kb.Tab), chromedp.SendKeys(chromedp.CSS("#expr"), "}"), chromedp.KeyEvent(kb.Escape), chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(chromedp.CSS(`#result .graph[data-series="1"][data-drawn]`)))
	if got := eval[string](t, ctx, `document.getElementById('expr').value`); got != `cpu_usage_user{host="a"}` {
		t.Fatalf("expression after completions: %q", got)
	}
	do(t, ctx, "stack the graph", chromedp.SetValue(chromedp.CSS("#expr"), "cpu_usage_user"), chromedp.Click(chromedp.CSS("#stack")),
		chromedp.WaitVisible(chromedp.CSS(`#result .graph[data-series="3"][data-drawn="3"]`)))
	screenshot(t, ctx, "query-graph")

	// The table of an instant query holds the last value of host b.
	do(t, ctx, "run the table", chromedp.SetValue(chromedp.CSS("#expr"), `cpu_usage_user{host="b"}`), chromedp.SetValue(chromedp.CSS("#mode"), "table"),
		chromedp.Click(chromedp.CSS("#run")), chromedp.WaitVisible(chromedp.CSS(`#result-table[data-series="1"]`)))
	if got := eval[string](t, ctx, `document.querySelector('#result-table .value').textContent`); got != last(1) {
		t.Fatalf("table: value %q, want %s", got, last(1))
	}
	screenshot(t, ctx, "query-table")

	// The URL holds the query: followed in a fresh page, it shows the same.
	shared := eval[string](t, ctx, `location.href`)
	if !strings.Contains(shared, "q=") || !strings.Contains(shared, "mode=table") {
		t.Fatalf("the URL does not hold the query: %s", shared)
	}
	do(t, ctx, "follow the shared URL", chromedp.Navigate("about:blank"), chromedp.Navigate(shared),
		chromedp.WaitVisible(chromedp.CSS(`#result-table[data-series="1"]`)))
	if got := eval[string](t, ctx, `document.querySelector('#result-table .value').textContent`); got != last(1) {
		t.Fatalf("shared URL: value %q, want %s", got, last(1))
	}
	graphURL := base + "#/query?" + url.Values{"q": {"sum by (host) (cpu_usage_user)"}, "range": {"3h"}}.Encode()
	do(t, ctx, "follow a graph's URL", chromedp.Navigate("about:blank"), chromedp.Navigate(graphURL),
		chromedp.WaitVisible(chromedp.CSS(`#result .graph[data-series="3"][data-drawn="3"]`)))
	if got := eval[string](t, ctx, `document.getElementById('range').value`); got != "3h" {
		t.Fatalf("range from the URL: %q", got)
	}

	// A bad expression: Prometheus' message, and the position it names.
	do(t, ctx, "run a bad expression", chromedp.SetValue(chromedp.CSS("#expr"), `sum(cpu_usage_user{host="a"}) by (`), chromedp.SetValue(chromedp.CSS("#mode"), "graph"),
		chromedp.Click(chromedp.CSS("#run")), chromedp.WaitVisible(chromedp.CSS(`#result [role=alert] .caret`)))
	msg := eval[string](t, ctx, `document.querySelector('#result [role=alert]').textContent`)
	if !strings.Contains(msg, "parse error") || !strings.Contains(msg, "column") {
		t.Fatalf("error shown: %q", msg)
	}
	screenshot(t, ctx, "query-error")

	// Cardinality: the metrics by series, and a metric's labels.
	do(t, ctx, "cardinality", chromedp.Navigate(base+"#/cardinality"), chromedp.WaitVisible(chromedp.CSS("#metrics")))
	poll(t, ctx, "cpu_usage_user in the top metrics", `[...document.querySelectorAll('#metrics a')].some(a => a.textContent === 'cpu_usage_user')`)
	do(t, ctx, "drill down", chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll('#metrics a')].find(a => a.textContent === 'cpu_usage_user')`)),
		chromedp.WaitVisible(chromedp.CSS("#metric-labels")))
	if got := eval[string](t, ctx, `[...document.querySelectorAll('#metric-labels tbody tr')].map(r => r.cells[0].textContent + '=' + r.cells[1].textContent).join(',')`); got != "host=3,region=1" {
		t.Fatalf("labels of cpu_usage_user: %q", got)
	}
	screenshot(t, ctx, "cardinality")

	// Rules and alerts: the group, and the alerts firing and pending.
	do(t, ctx, "rules", chromedp.Navigate(base+"#/rules"), chromedp.WaitVisible(chromedp.CSS("#rules .group")))
	// The page is loaded again at each poll until the rules have run.
	poll(t, ctx, "alerts firing and pending", `(() => {
		const t = document.querySelector('#alerts');
		if (t && t.textContent.includes('firing') && t.textContent.includes('pending')) return true;
		location.hash = '#/rules?at=' + Date.now();
		return false;
	})()`)
	screenshot(t, ctx, "rules")

	// Tables: the cpu table and the rows it has in files.
	if err := n.Engine().Flush(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "tables", chromedp.Navigate(base+"#/tables"), chromedp.WaitVisible(chromedp.CSS("#table-list")),
		chromedp.Click(chromedp.CSS("#t-cpu summary")), chromedp.Click(chromedp.CSS("#t-__lines summary")), chromedp.WaitVisible(chromedp.CSS("#t-__lines table")))
	if got := eval[string](t, ctx, `document.querySelector('#table-list').textContent`); !strings.Contains(got, "cpu") || !strings.Contains(got, "__lines") || !strings.Contains(got, fmt.Sprint(61*len(hosts))) {
		t.Fatalf("tables page: %q", got)
	}
	screenshot(t, ctx, "tables")
}

// TestBrowserCluster: the cluster page of a datanode of a 2-datanode
// cluster lists both datanodes and every region with its live owner, so
// does metasrv's (which has no other pages but tables), and the tables
// page lists the table's regions.
func TestBrowserCluster(t *testing.T) {
	ctx := browser(t)
	c := servertest.StartCluster(t, 2, servertest.ClusterOptions{})
	dn1 := c.Datanodes[0]
	writeLines(t, dn1.HTTPAddr(), knownData(time.Now()))
	lines, err := dn1.Engine().Table(catalog.LinesTable)
	if err != nil {
		t.Fatal(err)
	}
	if lines.Regions != 2 {
		t.Fatalf("%s has %d regions, want one a datanode", catalog.LinesTable, lines.Regions)
	}
	var regions []string
	for _, tb := range append(dn1.Engine().Tables(), lines) {
		if tb.Logical {
			continue
		}
		for r := range tb.Regions {
			regions = append(regions, layout.RegionID{Table: tb.ID, Region: r}.String())
		}
	}
	// The page refreshes itself: it is polled until every region's owner
	// reported it (an owner opens its regions in the background).
	base := "http://" + dn1.HTTPAddr() + "/"
	do(t, ctx, "cluster page", chromedp.Navigate(base+"#/cluster"), chromedp.WaitVisible(chromedp.CSS("#datanodes")))
	poll(t, ctx, "every region listed with a live owner and statistics", fmt.Sprintf(`(() => {
		const want = %q.split(',');
		const rows = [...document.querySelectorAll('#regions tbody tr')];
		return want.every(id => rows.some(r => r.cells[0].textContent === id && /^dn[12]$/.test(r.cells[2].textContent) &&
			r.cells[3].textContent === 'live' && r.cells[13].textContent === ''));
	})()`, strings.Join(regions, ",")))
	if got := eval[string](t, ctx, `[...document.querySelectorAll('#datanodes tbody tr')].map(r => r.cells[0].textContent).join(',')`); got != "dn1,dn2" {
		t.Fatalf("datanodes listed: %q", got)
	}
	if got := eval[int](t, ctx, `document.querySelectorAll('#metasrvs tbody tr').length`); got != 1 {
		t.Fatalf("%d metasrv replicas listed, want 1", got)
	}
	owners := eval[string](t, ctx, `[...new Set([...document.querySelectorAll('#regions tbody tr')].map(r => r.cells[2].textContent))].sort().join(',')`)
	t.Logf("regions %v, owners %s", regions, owners)
	// It refreshes on its own.
	poll(t, ctx, "a refresh", `Number(document.getElementById('cluster').dataset.loaded) >= 2`)
	screenshot(t, ctx, "cluster")

	// Metasrv's HTTP address serves the cluster and tables pages alone.
	meta := httptest.NewServer(c.Meta.Handler(prometheus.NewRegistry()))
	defer meta.Close()
	do(t, ctx, "metasrv's cluster page", chromedp.Navigate(meta.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#datanodes")))
	if got := eval[string](t, ctx, `location.hash + ' ' + [...document.querySelectorAll('#nav a')].map(a => a.dataset.page).join(',')`); got != "#/cluster cluster,tables" {
		t.Fatalf("metasrv's page and pages: %q", got)
	}
	if got := eval[string](t, ctx, `[...document.querySelectorAll('#datanodes tbody tr')].map(r => r.cells[0].textContent).join(',')`); got != "dn1,dn2" {
		t.Fatalf("datanodes listed by metasrv's page: %q", got)
	}

	do(t, ctx, "tables page", chromedp.Navigate(base+"#/tables"), chromedp.WaitVisible(chromedp.CSS("#table-list")),
		chromedp.Click(chromedp.CSS("#t-__lines summary")), chromedp.WaitVisible(chromedp.CSS("#t-__lines table")))
	if got := eval[int](t, ctx, `document.querySelectorAll('#t-__lines table')[1].tBodies[0].rows.length`); got != 2 {
		t.Fatalf("tables page: %d regions of __lines, want 2", got)
	}
}

// TestBrowserAuth: with a token, a browser is challenged for basic auth;
// given the token as the password (here in the URL, as a user answering
// the prompt would), the page and its API calls get through.
func TestBrowserAuth(t *testing.T) {
	ctx := browser(t)
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{Config: func(c *server.Config) { c.Auth = auth.New("s3cret") }})
	req, _ := http.NewRequest("GET", "http://"+n.HTTPAddr()+"/", nil)
	req.Header.Set("Accept", "text/html")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
		t.Fatalf("a page without the token: %s, challenge %q", resp.Status, resp.Header.Get("WWW-Authenticate"))
	}
	page := "http://user:s3cret@" + n.HTTPAddr() + "/#/query?" + url.Values{"q": {"vector(42)"}, "mode": {"table"}}.Encode()
	do(t, ctx, "the page with the token", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS(`#result-table[data-series="1"]`)))
	if got := eval[string](t, ctx, `document.querySelector('#result-table .value').textContent`); got != "42" {
		t.Fatalf("vector(42) with auth: %q", got)
	}
}
