package version

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestInfo(t *testing.T) {
	built := func(v string, settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{Main: debug.Module{Version: v}, Settings: settings}, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "feedface"}
	for _, tc := range []struct {
		name              string
		stamped, stampRev string
		read              func() (*debug.BuildInfo, bool)
		want, wantRev     string
	}{
		{"stamped wins", "v0.1.0", "abc", built("v0.0.0-2026-x", rev), "v0.1.0", "abc"},
		{"module version when not stamped", "", "", built("v0.2.0", rev), "v0.2.0", "feedface"},
		{"(devel) is dev", "", "", built("(devel)"), Dev, ""},
		{"no build info", "", "", none, Dev, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := info(tc.stamped, tc.stampRev, tc.read)
			if got.Version != tc.want || got.Revision != tc.wantRev || got.GoVersion == "" {
				t.Errorf("info = %+v, want version %q revision %q", got, tc.want, tc.wantRev)
			}
		})
	}
}

func TestIsRelease(t *testing.T) {
	for v, want := range map[string]bool{
		"v0.1.0":                             true,
		"v1.22.333":                          true,
		"v1.2.3-rc.1":                        true,
		"v1.2.3-alpha":                       true,
		Dev:                                  false,
		"":                                   false,
		"0.1.0":                              false,
		"v0.1":                               false,
		"v0.1.0-dirty":                       false,
		"v0.1.0-3-gabc1234":                  false,
		"v0.1.0-3-gabc1234-dirty":            false,
		"v0.0.0-20261203093000-abcdef123456": false,
		"v0.1.0+dirty":                       false,
		"v01.1.0":                            false,
		"1a2b3c4":                            false, // git describe --always without a tag
	} {
		if got := (Info{Version: v}).IsRelease(); got != want {
			t.Errorf("IsRelease(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestString(t *testing.T) {
	s := Info{Version: "v0.1.0", Revision: "abc", GoVersion: "go1.26.8"}.String()
	if s != "v0.1.0 (revision abc, go1.26.8)" {
		t.Errorf("String() = %q", s)
	}
	if s := (Info{Version: Dev, GoVersion: "go1.26.8"}).String(); s != "dev (go1.26.8)" {
		t.Errorf("String() = %q", s)
	}
}

func TestCollector(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector("test"))
	i := Get()
	want := `# HELP test_build_info Always 1; the labels say which build this process runs.
# TYPE test_build_info gauge
test_build_info{goversion="` + i.GoVersion + `",revision="` + i.Revision + `",version="` + i.Version + `"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "test_build_info"); err != nil {
		t.Error(err)
	}
}
