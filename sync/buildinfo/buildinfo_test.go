package buildinfo

import (
	"runtime/debug"
	"testing"
)

func vcs(rev, modified, at string) *debug.BuildInfo {
	return &debug.BuildInfo{Main: debug.Module{Path: "kproxy.dev/kproxy", Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}, {Key: "vcs.time", Value: at},
	}}
}

const rev = "fb963affdd50b2d23e924dc3f0500f8ccdaceb24"

func TestFromStamp(t *testing.T) {
	tests := []struct {
		name                           string
		ld                             Stamp
		bi                             *debug.BuildInfo
		wantVersion, wantCommit, state string
		wantString                     string
	}{
		{name: "toolchain VCS stamp, clean", bi: vcs(rev, "false", "2026-11-27T15:36:12Z"),
			wantVersion: "v0.0.0-20261127153612-fb963affdd50", wantCommit: rev, state: "clean",
			wantString: "v0.0.0-20261127153612-fb963affdd50"},
		{name: "toolchain VCS stamp, modified", bi: vcs(rev, "true", "2026-11-27T15:36:12Z"),
			wantVersion: "v0.0.0-20261127153612-fb963affdd50+dirty", wantCommit: rev, state: "dirty",
			wantString: "v0.0.0-20261127153612-fb963affdd50+dirty"},
		{name: "module version stamped by Go 1.24+", bi: func() *debug.BuildInfo {
			b := vcs(rev, "false", "2026-11-27T15:36:12Z")
			b.Main.Version = "v0.0.0-20261127153612-fb963affdd50"
			return b
		}(), wantVersion: "v0.0.0-20261127153612-fb963affdd50", wantCommit: rev, state: "clean",
			wantString: "v0.0.0-20261127153612-fb963affdd50"},
		{name: "ldflags win over the toolchain", ld: Stamp{GitCommit: "0123456789abcdef0123456789abcdef01234567", GitTreeState: "dirty", CommitTime: "2026-01-02T03:04:05Z"},
			bi:          vcs(rev, "false", "2026-11-27T15:36:12Z"),
			wantVersion: "v0.0.0-20260102030405-0123456789ab+dirty", wantCommit: "0123456789abcdef0123456789abcdef01234567", state: "dirty",
			wantString: "v0.0.0-20260102030405-0123456789ab+dirty"},
		{name: "explicit version keeps the revision visible", ld: Stamp{GitVersion: "v1.2.3", GitCommit: rev, GitTreeState: "clean"},
			wantVersion: "v1.2.3", wantCommit: rev, state: "clean",
			wantString: "v1.2.3 (" + rev + ")"},
		{name: "no VCS information at all", bi: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			wantVersion: "v0.0.0-unknown", wantString: "v0.0.0-unknown"},
		{name: "no build information", wantVersion: "v0.0.0-unknown", wantString: "v0.0.0-unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := FromStamp(tt.ld, tt.bi)
			if info.GitVersion != tt.wantVersion || info.GitCommit != tt.wantCommit || info.GitTreeState != tt.state {
				t.Errorf("FromStamp = version %q commit %q state %q, want %q %q %q",
					info.GitVersion, info.GitCommit, info.GitTreeState, tt.wantVersion, tt.wantCommit, tt.state)
			}
			if got := String(info); got != tt.wantString {
				t.Errorf("String = %q, want %q", got, tt.wantString)
			}
			if info.GoVersion == "" || info.Platform == "" || info.Compiler == "" {
				t.Errorf("Go version, platform or compiler missing: %+v", info)
			}
		})
	}
}

func TestMajorMinor(t *testing.T) {
	for v, want := range map[string][2]string{"v1.36.3": {"1", "36"}, "v0.0.0-2026-ab": {"0", "0"}, "unknown": {"", ""}} {
		if ma, mi := majorMinor(v); ma != want[0] || mi != want[1] {
			t.Errorf("majorMinor(%q) = %q, %q, want %q", v, ma, mi, want)
		}
	}
}
