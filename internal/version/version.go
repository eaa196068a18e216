// Package version says which build of Strata a process is: a version set
// at build time, and the revision and Go version from the binary's build
// information.
//
// Release and image builds set the version with
//
//	go build -ldflags "-X github.com/stratadb/strata/internal/version.Version=v0.2.0" ./cmd/...
//
// A plain `go build` or `go run` reports "0.1.0-dev".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is the release version, set at build time with -ldflags -X.
var Version = "0.1.0-dev"

// Info is one build.
type Info struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"` // VCS revision, with "-dirty" if modified; "unknown" without VCS stamping
	GoVersion string `json:"go_version"`
}

var (
	once sync.Once
	info Info
)

// Get returns this binary's build.
func Get() Info {
	once.Do(func() {
		info = Info{Version: Version, Revision: "unknown", GoVersion: runtime.Version()}
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			return
		}
		var rev string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if dirty {
				rev += "-dirty"
			}
			info.Revision = rev
		}
	})
	return info
}

// String is the line `strata version` prints.
func (i Info) String() string {
	return fmt.Sprintf("%s (revision %s, %s, %s/%s)", i.Version, i.Revision, i.GoVersion, runtime.GOOS, runtime.GOARCH)
}

// NewCollector is the strata_build_info gauge of build i: always 1,
// labelled with the build, so dashboards can show (and alert on) mixed
// versions.
func NewCollector(i Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "strata_build_info",
		Help:        "The build of this Strata process: always 1, labelled with its version, revision and Go version.",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}
