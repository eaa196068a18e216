package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/limits"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/server/servertest"
)

// TestLimitsCommand: strata limits get lists every key, unlimited by
// default; strata limits set changes a standalone's limits at run time: a
// line-protocol burst over max_active_series_per_table stores the series
// that fit and refuses the rest with 400 naming the limit, and once the
// limit is raised with the CLI, the same burst is stored, without a
// restart. A bad key is a usage error.
func TestLimitsCommand(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	run := func(args ...string) (string, error) {
		t.Helper()
		var out, errb bytes.Buffer
		root := newRoot(nil, &out, &errb)
		root.SetArgs(append(append([]string{"limits"}, args...), "--metasrv", n.GRPCAddr()))
		err := root.Execute()
		return out.String(), err
	}
	out, err := run("get")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range limits.Names() {
		if !strings.Contains(out, k) {
			t.Fatalf("limits get lacks %s:\n%s", k, out)
		}
	}
	if strings.Count(out, "unlimited") != len(limits.Keys) {
		t.Fatalf("not every limit unlimited by default:\n%s", out)
	}
	if _, err := run("set", "nope=1"); !errors.As(err, new(usageError)) {
		t.Fatalf("a bad key: %v, want a usage error", err)
	}
	follows := func(want int64) {
		t.Helper()
		w := n.Limits()
		deadline := time.After(time.Minute)
		for {
			ch := w.Changed()
			if w.For(limits.DefaultTenant).MaxActiveSeriesPerTable == want {
				return
			}
			select {
			case <-ch:
			case <-deadline:
				t.Fatalf("the node does not follow max_active_series_per_table=%d", want)
			}
		}
	}
	if out, err = run("set", "max_active_series_per_table=5", "-o", "csv"); err != nil || !strings.Contains(out, "max_active_series_per_table,5,") {
		t.Fatalf("limits set: %v\n%s", err, out)
	}
	follows(5)

	ts := time.Now().Unix()
	var burst strings.Builder
	for i := range 8 {
		fmt.Fprintf(&burst, "cpu,host=h%d usage=%d %d\n", i, i, ts)
	}
	write := func() (int, string) {
		t.Helper()
		resp, err := http.Post("http://"+n.HTTPAddr()+"/write?db=x&precision=s", "text/plain", strings.NewReader(burst.String()))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := write()
	if code != http.StatusBadRequest || !strings.Contains(body, "limit max_active_series_per_table=5 exceeded (tenant default, table cpu)") ||
		!strings.Contains(body, "3 of 8 samples refused, the other 5 stored") {
		t.Fatalf("burst: %d %s", code, body)
	}
	count := func() string {
		t.Helper()
		q := url.Values{"query": {"count(cpu_usage)"}, "time": {fmt.Sprint(ts + 1)}}
		resp, err := http.Get("http://" + n.HTTPAddr() + "/api/v1/query?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			Data struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || len(r.Data.Result) != 1 {
			t.Fatalf("count(cpu_usage): %v %+v", err, r)
		}
		return fmt.Sprint(r.Data.Result[0].Value[1])
	}
	if got := count(); got != "5" {
		t.Fatalf("count(cpu_usage) = %s, want 5", got)
	}
	if out, err = run("set", "max_active_series_per_table=100"); err != nil || !strings.Contains(out, "100") {
		t.Fatalf("limits set: %v\n%s", err, out)
	}
	follows(100)
	if code, body := write(); code != http.StatusNoContent {
		t.Fatalf("the burst after raising the limit: %d %s", code, body)
	}
	if got := count(); got != "8" {
		t.Fatalf("count(cpu_usage) = %s, want 8", got)
	}
}
