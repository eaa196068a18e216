package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/server/servertest"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

func TestGCByTenant(t *testing.T) {
	regions := []*pb.GcRegionResult{
		{Region: "1/0", Tenant: "default", RemovedFiles: 2, WalSegments: 1, Bytes: 10},
		{Region: "2/0", Tenant: "a", RemovedFiles: 1, Bytes: 5},
		{Region: "2/1", Tenant: "a", Bytes: 1, Error: "boom"},
		{Region: "9/0"},
	}
	got := gcByTenant(regions, false)
	want := []string{
		"tenant (unknown table): 1 regions, 0 removed files and WAL segments, 0 bytes, 0 failed",
		"tenant a: 2 regions, 1 removed files and WAL segments, 6 bytes, 1 failed",
		"tenant default: 1 regions, 3 removed files and WAL segments, 10 bytes, 0 failed",
	}
	if !slices.Equal(got, want) {
		t.Errorf("fast:\n%q\nwant\n%q", got, want)
	}
	full := gcByTenant([]*pb.GcRegionResult{{Region: "2/0", Tenant: "a", Orphans: []*pb.GcObject{{Key: "k"}}, Deleted: 1, Bytes: 3}}, true)
	if want := []string{"tenant a: 1 regions, 1 orphans, 1 deleted, 3 bytes, 0 failed"}; !slices.Equal(full, want) {
		t.Errorf("full: %q", full)
	}
}

// TestTenantFlag: the commands that name tables name --tenant's: a
// table tenant a creates is a's, listed and described as a, and no other
// tenant's; a bad tenant is a usage error.
func TestTenantFlag(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	run := func(args ...string) (string, error) {
		t.Helper()
		var out, errb bytes.Buffer
		root := newRoot(nil, &out, &errb)
		root.SetArgs(append(args, "--server", n.GRPCAddr()))
		err := root.Execute()
		return out.String() + errb.String(), err
	}
	if out, err := run("table", "create", "cpu", "--tenant", "a"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if out, err := run("table", "list", "--tenant", "a", "-o", "csv"); err != nil || !strings.Contains(out, "\ncpu,") {
		t.Errorf("a's tables: %v: %s", err, out)
	}
	if out, err := run("table", "list", "-o", "csv"); err != nil || strings.Contains(out, "cpu") {
		t.Errorf("the default tenant's tables: %v: %s", err, out)
	}
	if out, err := run("table", "describe", "cpu", "--tenant", "a"); err != nil || !strings.Contains(out, "timestamp") {
		t.Errorf("a's cpu: %v: %s", err, out)
	}
	if _, err := run("table", "describe", "cpu", "--tenant", "b"); err == nil {
		t.Error("b's cpu: found")
	}
	for _, bad := range []string{"a|b", "a/b"} {
		if _, err := run("table", "list", "--tenant", bad); !errors.As(err, new(usageError)) {
			t.Errorf("--tenant %s: %v, want a usage error", bad, err)
		}
	}
}

// TestRulesTenantFlag: `strata rules` loads, lists and deletes
// --tenant's namespaces: tenants a and b load a namespace of one name,
// each lists its own group only, the default tenant none, and a's delete
// leaves b's; a bad tenant is a usage error.
func TestRulesTenantFlag(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	run := func(args ...string) (string, error) {
		t.Helper()
		var out, errb bytes.Buffer
		root := newRoot(nil, &out, &errb)
		root.SetArgs(append(args, "--metasrv", n.GRPCAddr()))
		err := root.Execute()
		return out.String() + errb.String(), err
	}
	dir := t.TempDir()
	for _, tn := range []string{"a", "b"} {
		file := filepath.Join(dir, tn, "ns.yml")
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		content := "groups:\n  - name: g\n    rules:\n      - record: " + tn + ":one\n        expr: vector(1)\n"
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := run("rules", "load", file, "--tenant", tn); err != nil || !strings.Contains(out, "loaded ns/g: 1 recording, 0 alerting rules") {
			t.Fatalf("load %s's: %v: %s", tn, err, out)
		}
	}
	for _, tn := range []string{"a", "b"} {
		out, err := run("rules", "list", "--tenant", tn, "-o", "yaml")
		if err != nil || strings.Count(out, "# namespace ns") != 1 || !strings.Contains(out, "record: "+tn+":one") {
			t.Errorf("%s's rules: %v: %s", tn, err, out)
		}
	}
	if out, err := run("rules", "list", "-o", "csv"); err != nil || strings.TrimSpace(out) != "namespace,group,interval,recording,alerting,evaluated_by" {
		t.Errorf("the default tenant's rules: %v: %q", err, out)
	}
	if out, err := run("rules", "delete", "ns", "--tenant", "a"); err != nil || !strings.Contains(out, "deleted 1 group(s)") {
		t.Fatalf("delete a's ns: %v: %s", err, out)
	}
	if out, err := run("rules", "list", "--tenant", "a", "-o", "csv"); err != nil || strings.Contains(out, "ns,g") {
		t.Errorf("a's rules after its delete: %v: %s", err, out)
	}
	if out, err := run("rules", "list", "--tenant", "b", "-o", "csv"); err != nil || !strings.Contains(out, "ns,g,") {
		t.Errorf("b's rules after a's delete: %v: %s", err, out)
	}
	for _, bad := range []string{"a|b", "a/b"} {
		if _, err := run("rules", "list", "--tenant", bad); !errors.As(err, new(usageError)) {
			t.Errorf("--tenant %s: %v, want a usage error", bad, err)
		}
	}
}
