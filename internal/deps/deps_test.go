package deps_test

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/stratadb/strata/"

// rule bounds what pkg links (itself and everything it imports,
// transitively). A forbidden path forbids its subpackages too.
type rule struct {
	pkg       string
	forbidden []string
	// onlyStrata, if set, are the only packages of this module that pkg
	// may link besides itself.
	onlyStrata []string
	// direct checks pkg's own imports only, not what they link: for a
	// package that reaches forbidden ones through an import it may have
	// (the PromQL layer queries a datanode.Engine, which is made of
	// regions).
	direct bool
	why    string
}

var rules = []rule{
	{
		pkg: module + "cmd/metasrv",
		forbidden: []string{
			module + "internal/region",
			module + "internal/sst",
			module + "internal/memtable",
			module + "internal/wal",
			module + "internal/gc",
			module + "internal/compact",
			module + "internal/datanode",
			module + "internal/grpcapi",
			"github.com/parquet-go/parquet-go",
			"github.com/DataDog/zstd",
		},
		why: "the coordinator links no data plane: it builds with CGO_ENABLED=0 and carries no SST, WAL or GC code",
	},
	{
		pkg:        module + "internal/lineproto",
		onlyStrata: []string{module + "internal/row"},
		why:        "the line-protocol parser is a leaf over rows",
	},
	{
		pkg:       module + "internal/wire",
		forbidden: []string{module + "internal/objstore", "github.com/aws/", "gocloud.dev/"},
		why:       "protobuf conversions need no object store, and the AWS SDK in every client of wire is megabytes of nothing",
	},
	{
		pkg: module + "internal/errclass",
		forbidden: []string{
			module + "internal/region",
			module + "internal/datanode",
			module + "internal/compact",
			module + "internal/fence",
			module + "internal/objstore",
			module + "proto/",
		},
		why: "metasrv classifies errors through it: it knows the shared sentinels and gRPC codes, and links no data plane (datanode.ErrClass adds the data plane's sentinels)",
	},
	{
		pkg: module + "internal/gc",
		forbidden: []string{
			module + "internal/region",
			module + "internal/memtable",
			module + "internal/sst",
		},
		why: "GC works on a region through gc.Region (its manifest, store and owner checks) and links no region engine, memtable or SST code",
	},
	{
		pkg: module + "internal/prom",
		forbidden: []string{
			module + "internal/region",
			module + "internal/sst",
			module + "internal/wal",
			module + "internal/compact",
			module + "internal/memtable",
		},
		direct: true,
		why:    "the query layer works on internal/scan's types and datanode.Engine's methods, never on the engine's insides (which it links through datanode: only its own imports are checked)",
	},
	{
		pkg:        module + "internal/rules",
		onlyStrata: []string{module + "internal/prom", module + "internal/rules/rulestore", module + "internal/cluster", module + "internal/tenant"},
		direct:     true,
		why:        "rules read and write through the query layer's storage interfaces (prom.API's engine and Queryable, prom.Appendable), never the engine itself; of the cluster they know the rule groups' store and the coordination keys (leases, owners, datanodes), not the data plane; of tenants, their names (internal/tenant, a leaf)",
	},
	{
		pkg:       module + "internal/schema",
		forbidden: []string{module + "internal/manifest"},
		why:       "the manifest records a schema; the schema knows nothing of manifests",
	},
}

// TestForbiddenImports fails when a package links one it must not, and
// names the chain of imports that brings it in. Of the packages a
// forbidden one brings in, only the first is named.
func TestForbiddenImports(t *testing.T) {
	goBin := goTool(t)
	for _, r := range rules {
		// The sets differ with cgo (zstd_cgo.go): check both.
		modes := map[string][]string{} // violation -> the CGO_ENABLED values it shows in
		var order []string
		for _, cgo := range []string{"1", "0"} {
			graph := imports(t, goBin, r.pkg, cgo)
			bad := func(dep string) bool {
				if dep == r.pkg {
					return false
				}
				if r.onlyStrata != nil && strings.HasPrefix(dep, module) && !slices.Contains(r.onlyStrata, dep) {
					return true
				}
				return slices.ContainsFunc(r.forbidden, func(f string) bool {
					return dep == f || strings.HasPrefix(dep, strings.TrimSuffix(f, "/")+"/")
				})
			}
			for dep := range graph {
				if !bad(dep) || r.direct && !slices.Contains(graph[r.pkg], dep) {
					continue
				}
				path := chain(graph, r.pkg, dep)
				if slices.ContainsFunc(path[:len(path)-1], bad) {
					continue // brought in by a forbidden package named on its own
				}
				v := strings.Join(trim(path), " -> ")
				if modes[v] == nil {
					order = append(order, v)
				}
				modes[v] = append(modes[v], cgo)
			}
		}
		slices.Sort(order)
		for _, v := range order {
			t.Errorf("forbidden import %s (CGO_ENABLED=%s): %s", v, strings.Join(modes[v], ","), r.why)
		}
	}
}

// imports returns every package pkg links, with its direct imports.
func imports(t *testing.T, goBin, pkg, cgo string) map[string][]string {
	t.Helper()
	cmd := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr.String())
	}
	graph := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 {
			graph[f[0]] = f[1:]
		}
	}
	if _, ok := graph[pkg]; !ok {
		t.Fatalf("go list -deps %s did not list %s", pkg, pkg)
	}
	return graph
}

// chain is a shortest import path from root to dep, both included.
func chain(graph map[string][]string, root, dep string) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == dep {
			var path []string
			for ; p != ""; p = prev[p] {
				path = append(path, p)
			}
			slices.Reverse(path)
			return path
		}
		for _, q := range graph[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return []string{root, "?", dep}
}

// trim drops the module's prefix from paths, for reading.
func trim(path []string) []string {
	out := make([]string, len(path))
	for i, p := range path {
		out[i] = strings.TrimPrefix(p, module)
	}
	return out
}

// goTool is the go command of the toolchain running the test: go test
// puts its $GOROOT/bin first in the test's PATH.
func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("the go command is needed to list imports: ", err)
	}
	return p
}
