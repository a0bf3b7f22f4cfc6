// Package buildinfo says which kproxy this is: the version string `kproxy
// --version` prints and the labels of kubernetes_build_info. It carries the
// VCS revision the binary was built from, taken from the Makefile's -ldflags
// or, without them, from what the Go toolchain stamped (vcs.revision,
// vcs.modified, vcs.time).
package buildinfo

import (
	"cmp"
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	apiversion "k8s.io/apimachinery/pkg/version"
)

// Set with -ldflags "-X kproxy.dev/kproxy/sync/buildinfo.gitCommit=…" by the
// Makefile. The linker can only write package-level string variables, so
// these are the package's only state and nothing else writes them.
var (
	gitVersion   string // overrides the derived version (VERSION=… make build)
	gitCommit    string // full revision
	gitTreeState string // "clean" or "dirty"
	commitTime   string // RFC 3339, UTC
	buildDate    string // RFC 3339, UTC
)

// Stamp is what the build recorded; Get reads it from the linker flags and
// the binary's build information.
type Stamp struct {
	GitVersion, GitCommit, GitTreeState, CommitTime, BuildDate string
}

// Get returns the build information of the running binary.
func Get() apiversion.Info {
	bi, _ := debug.ReadBuildInfo()
	return FromStamp(Stamp{
		GitVersion: gitVersion, GitCommit: gitCommit, GitTreeState: gitTreeState,
		CommitTime: commitTime, BuildDate: buildDate,
	}, bi)
}

// FromStamp combines the linker flags with the toolchain's build
// information (bi may be nil); the flags win where both say something.
func FromStamp(ld Stamp, bi *debug.BuildInfo) apiversion.Info {
	s := ld
	mainVersion := ""
	if bi != nil {
		mainVersion = bi.Main.Version
		settings := map[string]string{}
		for _, kv := range bi.Settings {
			settings[kv.Key] = kv.Value
		}
		if s.GitCommit == "" {
			s.GitCommit = settings["vcs.revision"]
			if s.GitTreeState == "" && s.GitCommit != "" {
				s.GitTreeState = "clean"
				if settings["vcs.modified"] == "true" {
					s.GitTreeState = "dirty"
				}
			}
		}
		s.CommitTime = cmp.Or(s.CommitTime, settings["vcs.time"])
	}
	info := apiversion.Info{
		GitVersion:   s.GitVersion,
		GitCommit:    s.GitCommit,
		GitTreeState: s.GitTreeState,
		BuildDate:    s.BuildDate,
		GoVersion:    runtime.Version(),
		Compiler:     runtime.Compiler,
		Platform:     runtime.GOOS + "/" + runtime.GOARCH,
	}
	info.GitVersion = cmp.Or(info.GitVersion, derivedVersion(mainVersion, s))
	info.Major, info.Minor = majorMinor(info.GitVersion)
	return info
}

// derivedVersion is the module version when the toolchain knows a real one
// (a tagged or pseudo-version), else a Go pseudo-version made of the commit
// time and revision, as `go build` in a git checkout would stamp it:
// v0.0.0-20261127153612-fb963affdd50, +dirty for a modified tree.
func derivedVersion(mainVersion string, s Stamp) string {
	if mainVersion != "" && mainVersion != "(devel)" {
		return mainVersion
	}
	if s.GitCommit == "" {
		return "v0.0.0-unknown"
	}
	rev := s.GitCommit
	if len(rev) > 12 {
		rev = rev[:12]
	}
	stamp := "00000000000000"
	if t, err := time.Parse(time.RFC3339, s.CommitTime); err == nil {
		stamp = t.UTC().Format("20060102150405")
	}
	v := "v0.0.0-" + stamp + "-" + rev
	if s.GitTreeState == "dirty" {
		v += "+dirty"
	}
	return v
}

var semverPrefix = regexp.MustCompile(`^v?(\d+)\.(\d+)`)

func majorMinor(v string) (string, string) {
	m := semverPrefix.FindStringSubmatch(v)
	if m == nil {
		return "", ""
	}
	return m[1], m[2]
}

// String is the one-line version `kproxy --version` prints after "kproxy
// version ": the version and, when the version does not already hold it, the
// revision.
func String(info apiversion.Info) string {
	v := info.GitVersion
	if info.GitCommit != "" && !strings.Contains(v, shortRev(info.GitCommit)) {
		v = fmt.Sprintf("%s (%s", v, info.GitCommit)
		if info.GitTreeState == "dirty" {
			v += ", dirty"
		}
		v += ")"
	}
	return v
}

func shortRev(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
