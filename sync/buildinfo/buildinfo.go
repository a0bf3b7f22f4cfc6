// Package buildinfo says which kproxy this is: the version string `kproxy
// --version` prints and the labels of kubernetes_build_info. It carries the
// VCS revision the binary was built from, taken from the Makefile's -ldflags
// or, without them, from what the Go toolchain stamped (vcs.revision,
// vcs.modified, vcs.time), or, when neither says anything (a plain `go
// build` in a git worktree, with -buildvcs=false, or outside git), from the
// Go build ID of the executable.
package buildinfo

import (
	"cmp"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
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
	// BuildID is the Go build ID of the executable: the last resort, as it
	// tells builds of different sources apart where nothing else does.
	BuildID string
}

// Get returns the build information of the running binary.
func Get() apiversion.Info {
	bi, _ := debug.ReadBuildInfo()
	s := Stamp{
		GitVersion: gitVersion, GitCommit: gitCommit, GitTreeState: gitTreeState,
		CommitTime: commitTime, BuildDate: buildDate,
	}
	if s.GitVersion == "" && s.GitCommit == "" && !hasVCS(bi) && (bi == nil || bi.Main.Version == "" || bi.Main.Version == "(devel)") {
		s.BuildID = executableBuildID()
	}
	return FromStamp(s, bi)
}

func hasVCS(bi *debug.BuildInfo) bool {
	if bi == nil {
		return false
	}
	for _, kv := range bi.Settings {
		if kv.Key == "vcs.revision" && kv.Value != "" {
			return true
		}
	}
	return false
}

// executableBuildID reads the Go build ID note of the running executable
// ("" when it cannot). Go builds are reproducible, so the same source,
// toolchain and flags give the same ID.
func executableBuildID() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	f, err := elf.Open(exe)
	if err != nil {
		return ""
	}
	defer f.Close()
	id, _ := goBuildID(f)
	return id
}

// goBuildID parses the .note.go.buildid section: an ELF note whose name is
// "Go" and whose descriptor is the build ID.
func goBuildID(f *elf.File) (string, error) {
	s := f.Section(".note.go.buildid")
	if s == nil {
		return "", errors.New("no .note.go.buildid section")
	}
	data, err := s.Data()
	if err != nil {
		return "", fmt.Errorf("reading .note.go.buildid: %w", err)
	}
	if len(data) < 16 || string(data[12:14]) != "Go" {
		return "", errors.New("malformed .note.go.buildid")
	}
	descSize := int(f.ByteOrder.Uint32(data[4:8]))
	if 16+descSize > len(data) {
		return "", errors.New("malformed .note.go.buildid")
	}
	return string(data[16 : 16+descSize]), nil
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
// v0.0.0-20261127153612-fb963affdd50, +dirty for a modified tree. Without a
// revision it is v0.0.0-devel (Go's word for an unversioned build) with a
// digest of the build ID as build metadata, which at least tells two
// builds apart: v0.0.0-devel+1a2b3c4d5e6f.
func derivedVersion(mainVersion string, s Stamp) string {
	if mainVersion != "" && mainVersion != "(devel)" {
		return mainVersion
	}
	if s.GitCommit == "" {
		if s.BuildID == "" {
			return "v0.0.0-devel"
		}
		sum := sha256.Sum256([]byte(s.BuildID))
		return "v0.0.0-devel+" + hex.EncodeToString(sum[:6])
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

// WithVersion returns info reporting version v instead, as kube-proxy's
// --version=vX.Y.Z does: v must be a semantic version with the same major,
// minor and patch as the built one (or be the built one).
func WithVersion(info apiversion.Info, v string) (apiversion.Info, error) {
	if v == "" {
		return info, errors.New("version must not be empty")
	}
	if v != info.GitVersion {
		want, err := utilversion.ParseSemantic(info.GitVersion)
		if err != nil {
			return info, fmt.Errorf("the built version %q is not a semantic version: %w", info.GitVersion, err)
		}
		got, err := utilversion.ParseSemantic(v)
		if err != nil {
			return info, fmt.Errorf("version %q: %w", v, err)
		}
		if got.Major() != want.Major() || got.Minor() != want.Minor() || got.Patch() != want.Patch() {
			return info, fmt.Errorf("version %q must match major/minor/patch of default version %q", v, info.GitVersion)
		}
	}
	info.GitVersion = v
	info.Major, info.Minor = majorMinor(v)
	return info, nil
}
