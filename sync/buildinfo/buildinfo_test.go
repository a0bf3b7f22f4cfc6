package buildinfo

import (
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
)

func vcs(rev, modified, at string) *debug.BuildInfo {
	return &debug.BuildInfo{Main: debug.Module{Path: "kproxy.dev/kproxy", Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}, {Key: "vcs.time", Value: at},
	}}
}

const rev = "fb963affdd50b2d23e924dc3f0500f8ccdaceb24"

// buildIDDigest is the first 6 bytes of sha256("a/b/c/d"), in hex.
const buildIDDigest = "69b3db0fc351"

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
		{name: "no VCS information, a build ID", ld: Stamp{BuildID: "a/b/c/d"}, bi: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			wantVersion: "v0.0.0-devel+" + buildIDDigest, wantString: "v0.0.0-devel+" + buildIDDigest},
		{name: "no VCS information, no build ID", bi: &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			wantVersion: "v0.0.0-devel", wantString: "v0.0.0-devel"},
		{name: "no build information", wantVersion: "v0.0.0-devel", wantString: "v0.0.0-devel"},
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

// TestExecutableBuildID: the build ID read from the running executable is
// the one the Go toolchain reports for it.
func TestExecutableBuildID(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "buildid", exe).Output()
	if err != nil {
		t.Fatalf("go tool buildid: %v", err)
	}
	if got, want := executableBuildID(), strings.TrimSpace(string(out)); got != want {
		t.Errorf("executableBuildID() = %q, go tool buildid says %q", got, want)
	}
}

func TestWithVersion(t *testing.T) {
	tests := []struct {
		built, set string
		wantErr    string // "" when accepted
		wantMinor  string
	}{
		{built: "v1.36.3", set: "v1.36.3-custom.1", wantMinor: "36"},
		{built: "v1.36.3", set: "v1.36.3", wantMinor: "36"},
		{built: "v0.0.0-devel+69b3db0fc351", set: "v0.0.0-node7", wantMinor: "0"},
		{built: "v0.0.0-20261127153612-fb963affdd50", set: "v0.0.0-20261127153612-fb963affdd50", wantMinor: "0"},
		{built: "v1.36.3", set: "v1.37.0", wantErr: `must match major/minor/patch of default version "v1.36.3"`},
		{built: "v1.36.3", set: "v1.36", wantErr: `version "v1.36"`},
		{built: "v1.36.3", set: "", wantErr: "must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.built+" "+tt.set, func(t *testing.T) {
			got, err := WithVersion(FromStamp(Stamp{GitVersion: tt.built}, nil), tt.set)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("WithVersion: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("WithVersion error = %v, want one containing %q", err, tt.wantErr)
			case tt.wantErr == "" && (got.GitVersion != tt.set || got.Minor != tt.wantMinor):
				t.Errorf("WithVersion = version %q minor %q, want %q %q", got.GitVersion, got.Minor, tt.set, tt.wantMinor)
			}
		})
	}
}
