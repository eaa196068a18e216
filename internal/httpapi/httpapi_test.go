package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/server"
	"github.com/stratadb/strata/internal/server/servertest"
)

// start runs a standalone (as `strata standalone` does) and returns its
// HTTP base URL and its engine.
func start(t *testing.T) (string, *datanode.Engine) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{Config: func(c *server.Config) { c.MaxBodyBytes = 4096 }})
	return "http://" + n.HTTPAddr(), n.Engine()
}

func do(t *testing.T, method, url string, body io.Reader, hdr map[string]string) (int, map[string]string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, body)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]string
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, &m) // an empty or non-JSON body: m stays nil
	return resp.StatusCode, m
}

func rows(t *testing.T, e *datanode.Engine, table string) int {
	sc, err := e.Scan(context.Background(), table, scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
	if err != nil {
		return -1
	}
	defer sc.Close()
	n := 0
	for sc.Next() {
		n += len(sc.Batch())
	}
	return n
}

func TestWriteEndpoints(t *testing.T) {
	base, e := start(t)
	v1, v2 := base+"/write?db=d", base+"/api/v2/write?bucket=b"
	if code, _ := do(t, "POST", v2, strings.NewReader("m,h=a x=1 1\nn y=2i 2\n"), nil); code != 204 {
		t.Fatalf("v2 write: %d", code)
	}
	if rows(t, e, "m") != 1 || rows(t, e, "n") != 1 {
		t.Fatal("rows missing")
	}
	// A rejected point of a request of several tables is named by its
	// line (the second point of table n, the request's fourth line).
	code, m := do(t, "POST", v2, strings.NewReader("# two tables\nn y=3i 7\nm,h=a x=2 5\nn y=1.5 6\n"), nil)
	if code != 400 || !strings.Contains(m["message"], "line 4") || !strings.Contains(m["message"], "conflict") {
		t.Fatalf("type conflict in a two-table request: %d %v", code, m)
	}
	if rows(t, e, "m") != 1 || rows(t, e, "n") != 1 {
		t.Fatal("a rejected request wrote rows")
	}
	// Error formats: 1.x {"error"}, 2.x {"code","message"}.
	code, m = do(t, "POST", v1, strings.NewReader("m x=1 1\nbad\n"), nil)
	if code != 400 || !strings.Contains(m["error"], "line 2") {
		t.Fatalf("v1 parse error: %d %v", code, m)
	}
	code, m = do(t, "POST", v2, strings.NewReader("m x=oops"), nil)
	if code != 400 || m["code"] != "invalid" || !strings.Contains(m["message"], "line 1") {
		t.Fatalf("v2 parse error: %d %v", code, m)
	}
	if rows(t, e, "m") != 1 {
		t.Fatal("a rejected request wrote rows")
	}
	// gzip, including a corrupt body; unknown encodings.
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	if _, err := gz.Write([]byte("m,h=b x=3 3\n")); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	if code, _ := do(t, "POST", v2, &b, map[string]string{"Content-Encoding": "gzip"}); code != 204 || rows(t, e, "m") != 2 {
		t.Fatalf("gzip write: %d", code)
	}
	if code, _ := do(t, "POST", v2, strings.NewReader("not gzip"), map[string]string{"Content-Encoding": "gzip"}); code != 400 {
		t.Fatalf("corrupt gzip: %d", code)
	}
	if code, _ := do(t, "POST", v2, strings.NewReader("m x=1"), map[string]string{"Content-Encoding": "br"}); code != 415 {
		t.Fatalf("brotli: %d", code)
	}
	// 413 for bodies over the limit, compressed or not.
	big := strings.Repeat("m x=1 1\n", 1000)
	if code, _ := do(t, "POST", v2, strings.NewReader(big), nil); code != 413 {
		t.Fatalf("big body: %d", code)
	}
	b.Reset()
	gz = gzip.NewWriter(&b)
	if _, err := gz.Write([]byte(big)); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	if code, _ := do(t, "POST", v2, &b, map[string]string{"Content-Encoding": "gzip"}); code != 413 {
		t.Fatalf("big gzip body: %d", code)
	}
	// Precisions: 2.x does not take m or h.
	if code, _ := do(t, "POST", v2+"&precision=h", strings.NewReader("m x=1 1"), nil); code != 400 {
		t.Fatalf("v2 precision h: %d", code)
	}
	if code, _ := do(t, "POST", v1+"&precision=h", strings.NewReader("m,h=c x=1 1"), nil); code != 204 {
		t.Fatalf("v1 precision h: %d", code)
	}
	// A bad measurement name is a 400.
	if code, _ := do(t, "POST", v2, strings.NewReader("__m x=1 1"), nil); code != 400 {
		t.Fatalf("reserved table name: %d", code)
	}
	// Health and metrics.
	if code, m := do(t, "GET", base+"/health", nil, nil); code != 200 || m["status"] != "pass" {
		t.Fatalf("health: %d %v", code, m)
	}
	if code, _ := do(t, "GET", base+"/ping", nil, nil); code != 204 {
		t.Fatalf("ping: %d", code)
	}
	resp, _ := http.Get(base + "/metrics")
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(data), `strata_http_write_requests_total{code="204"}`) {
		t.Fatalf("metrics:\n%s", data)
	}
}

// A parser's and a body buffer's memory is reused by the next request
// (tag values are cut from the parser's buffer): requests whose tag values
// all have one length, back to back and at once, must store exactly their
// own series, before and after a flush.
func TestRequestsReuseParserMemory(t *testing.T) {
	base, e := start(t)
	const requests, lines = 48, 20
	body := func(r int) string {
		var b strings.Builder
		for l := range lines {
			fmt.Fprintf(&b, "m,h=r%03d_l%02d,k=v%03d x=%d %d\n", r, l, r, r*lines+l, r*lines+l+1)
		}
		return b.String()
	}
	send := func(r int) error {
		resp, err := http.Post(base+"/api/v2/write?bucket=b", "text/plain", strings.NewReader(body(r)))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 204 {
			return fmt.Errorf("request %d: %s", r, resp.Status)
		}
		return nil
	}
	for r := range requests / 2 { // one at a time: the same parser each time
		if err := send(r); err != nil {
			t.Fatal(err)
		}
	}
	var g errgroup.Group
	for w := range 4 {
		g.Go(func() error {
			for r := requests/2 + w; r < requests; r += 4 {
				if err := send(r); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		sc, err := e.Scan(context.Background(), "m", scan.Request{Start: region.AllTime, End: region.AllTimeEnd})
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		got := 0
		for sc.Next() {
			for _, en := range sc.Batch() {
				x := int(en.Fields[0].Float())
				r, l := x/lines, x%lines
				if h, k := row.SeriesTag(en.Series, "h"), row.SeriesTag(en.Series, "k"); h != fmt.Sprintf("r%03d_l%02d", r, l) || k != fmt.Sprintf("v%03d", r) {
					t.Fatalf("%s: the row of x=%d has tags h=%q k=%q", when, x, h, k)
				}
				got++
			}
		}
		if err := sc.Err(); err != nil || got != requests*lines {
			t.Fatalf("%s: %d rows, want %d (%v)", when, got, requests*lines, err)
		}
	}
	check("in memtables")
	if err := e.Flush(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	check("flushed")
}

// The InfluxDB 1.x /query calls loaders and Telegraf make at start answer
// in InfluxDB's JSON; anything else is a 400 pointing to PromQL.
func TestInfluxQueryStartUpCalls(t *testing.T) {
	base, _ := start(t)
	get := func(q string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + "/query?q=" + url.QueryEscape(q))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(data))
	}
	if code, body := get("SHOW DATABASES"); code != 200 || body != `{"results":[{"statement_id":0,"series":[{"name":"databases","columns":["name"]}]}]}` {
		t.Fatalf("show databases: %d %s", code, body)
	}
	if code, body := get(`create database "benchmark"; show databases`); code != 200 || !strings.HasPrefix(body, `{"results":[{"statement_id":0},{"statement_id":1,`) {
		t.Fatalf("create then show: %d %s", code, body)
	}
	resp, err := http.PostForm(base+"/query", url.Values{"q": {"CREATE DATABASE telegraf"}})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("form POST create database: %v %v", resp, err)
	}
	resp.Body.Close()
	for _, q := range []string{"SELECT * FROM cpu", "", "DROP DATABASE x"} {
		if code, body := get(q); code != 400 || !strings.Contains(body, `"error"`) {
			t.Fatalf("%q: %d %s", q, code, body)
		}
	}
	if _, body := get("SELECT 1"); !strings.Contains(body, "/api/v1/query") {
		t.Fatalf("the refusal does not point to PromQL: %s", body)
	}
}
