package version

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestBuildInfo(t *testing.T) {
	i := Get()
	if i.Version != Version || i.GoVersion != runtime.Version() || i.Revision == "" {
		t.Fatalf("build %+v", i)
	}
	if s := i.String(); !strings.HasPrefix(s, Version+" (revision "+i.Revision+", "+runtime.Version()) {
		t.Fatalf("String() = %q", s)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(Info{Version: "v1.2.3", Revision: "abc", GoVersion: "go1.99"}))
	want := `# HELP strata_build_info The build of this Strata process: always 1, labelled with its version, revision and Go version.
# TYPE strata_build_info gauge
strata_build_info{goversion="go1.99",revision="abc",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "strata_build_info"); err != nil {
		t.Fatal(err)
	}
}
