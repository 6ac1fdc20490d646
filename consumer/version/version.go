// Package version reports the version stamped into the operator and consumer
// binaries, which are released together from one tag: both print it for
// --version and export it as a build-info metric, and the operator's default
// consumer image carries it as its tag.
//
// The release build sets it at link time:
//
//	go build -ldflags "-X github.com/idempotency-dev/operator/consumer/version.version=v0.1.0 \
//	    -X github.com/idempotency-dev/operator/consumer/version.revision=$(git rev-parse HEAD)"
//
// (`make build VERSION=v0.1.0` does exactly that). It lives under consumer/
// because the ready-made consumer (consumer/app) registers the metric and
// nothing under consumer/ may import the operator's packages; it imports only
// the standard library and the Prometheus client.
package version

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Dev is the version of a build that was not stamped and whose module
// version the Go toolchain did not record either (go run, go build with
// -buildvcs=false, a build outside a VCS checkout).
const Dev = "dev"

// Set by the linker (-X); package variables because -X can only set those.
var (
	version  string
	revision string
)

// Info describes one build.
type Info struct {
	// Version is the release tag (v0.1.0), a `git describe` string for an
	// unreleased commit (v0.1.0-3-gabc1234-dirty), or Dev.
	Version string
	// Revision is the VCS commit, when known.
	Revision string
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
}

// Get returns this binary's build information: the stamped version, else the
// main module's version as the Go toolchain recorded it, else Dev.
func Get() Info {
	return info(version, revision, debug.ReadBuildInfo)
}

func info(stamped, rev string, read func() (*debug.BuildInfo, bool)) Info {
	i := Info{Version: stamped, Revision: rev, GoVersion: runtime.Version()}
	if bi, ok := read(); ok {
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && i.Revision == "" {
				i.Revision = s.Value
			}
		}
	}
	if i.Version == "" {
		i.Version = Dev
	}
	return i
}

// String is what --version prints: "v0.1.0 (revision 1a2b3c4, go1.26.8)".
func (i Info) String() string {
	parts := []string{}
	if i.Revision != "" {
		parts = append(parts, "revision "+i.Revision)
	}
	parts = append(parts, i.GoVersion)
	return fmt.Sprintf("%s (%s)", i.Version, strings.Join(parts, ", "))
}

// IsRelease reports whether Version is a release tag: vMAJOR.MINOR.PATCH
// with an optional dot-separated pre-release (v0.1.0, v1.2.3-rc.1). Dev, a
// `git describe` string (v0.1.0-3-gabc1234, v0.1.0-dirty) and a Go
// pseudo-version (v0.0.0-20261203093000-abcdef123456, v0.1.0+dirty) are not.
func (i Info) IsRelease() bool {
	re := regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z]+(\.[0-9A-Za-z]+)*)?$`)
	return re.MatchString(i.Version) && !strings.HasSuffix(i.Version, "-dirty")
}

// NewCollector returns the build-info gauge <namespace>_build_info, always 1,
// labelled with the version, the revision and the Go version: the usual way
// to see in Prometheus which build runs where.
func NewCollector(namespace string) prometheus.Collector {
	i := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace:   namespace,
		Name:        "build_info",
		Help:        "Always 1; the labels say which build this process runs.",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}
