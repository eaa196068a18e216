package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/server/servertest"
)

// strata cardinality prints /api/v1/status/tsdb's lists: of a
// measurement with series flushed and in memtables (host b in both),
// each counted once, as tables, as CSV, of one table, with a focus label;
// a server's refusal is the command's error.
func TestCardinalityCommand(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	base := "http://" + n.HTTPAddr()
	write := func(body string) {
		t.Helper()
		resp, err := http.Post(base+"/write?db=x&precision=s", "text/plain", strings.NewReader(body))
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("write: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).Unix()
	// cpu: hosts a, b, c in dc x, d in dc y; fields user and system.
	write(fmt.Sprintf("cpu,host=a,dc=x user=1,system=2 %d\ncpu,host=b,dc=x user=1,system=2 %d\n", t0, t0))
	if err := n.Engine().Flush(context.Background(), "cpu"); err != nil {
		t.Fatal(err)
	}
	write(fmt.Sprintf("cpu,host=b,dc=x user=1,system=2 %d\ncpu,host=c,dc=x user=1,system=2 %d\ncpu,host=d,dc=y user=1,system=2 %d\ndisk,host=a,dc=x value=3 %d\n", t0+60, t0+60, t0+60, t0+60))
	run := func(args ...string) (string, error) {
		t.Helper()
		var out, errb bytes.Buffer
		root := newRoot(nil, &out, &errb)
		root.SetArgs(append([]string{"cardinality", "--url", base}, args...))
		err := root.Execute()
		return out.String(), err
	}
	out, err := run("--limit", "3")
	if err != nil {
		t.Fatal(err)
	}
	// 4 cpu hosts x 2 fields, and disk: 9 series.
	for _, want := range []string{
		"series: 9\n",
		"label pairs: 9\n", // __name__ 3, host 4, dc 2
		"series by metric name:\nMETRIC      SERIES\ncpu_system  4\ncpu_user    4\ndisk        1\n",
		"values by label name:\nLABEL     VALUES\nhost      4\n__name__  3\ndc        2\n",
		"series by label pair:\nPAIR                 SERIES\ndc=x                 7\n__name__=cpu_system  4\n__name__=cpu_user    4\n",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = run("--table", "cpu", "--label", "host", "-o", "csv", "--limit", "100")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range recs[1:] {
		got[r[0]+"/"+r[1]] = r[2]
	}
	for k, v := range map[string]string{"total/series": "8", "series by metric name/cpu_user": "4", "series by metric name/disk": "",
		"series by value of host/a": "2", "series by value of host/b": "2", "series by label pair/dc=y": "2", "values by label name/host": "4"} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if t.Failed() {
		t.Fatalf("csv:\n%s", out)
	}
	if _, err := run("--table", "nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("an unknown table: %v", err)
	}
}
