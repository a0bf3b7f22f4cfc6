package guest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSpecRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := runSpec{
		// Arguments a kernel command line could never carry.
		Argv:    []string{"/tmp/go-build1/b001/x.test", "-test.run=^TestA$|B", "two words", "", "new\nline", `quote"s`, "ünïcode"},
		Env:     []string{"A=1", "B=with space", EnvInGuest + "=1"},
		Dir:     "/work/main/lb/sctprelay",
		Modules: []string{"ip_vs", "sctp"},
	}
	if err := writeSpec(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := readSpec(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spec after a round trip (-want +got):\n%s", diff)
	}
	if err := writeSpec(dir, runSpec{}); err == nil {
		t.Error("writeSpec accepted a spec without a program")
	}
}

func TestReadSpecRejectsBadFiles(t *testing.T) {
	for _, tc := range []struct {
		name, content, wantErr string
	}{
		{"missing", "", "reading the run spec"},
		{"not JSON", "{", "decoding the run spec"},
		{"no program", `{"argv":[]}`, "names no program"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.content != "" {
				if err := os.WriteFile(filepath.Join(dir, specFile), []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := readSpec(dir)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("readSpec error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestResultFiles(t *testing.T) {
	for _, tc := range []struct {
		name     string
		write    func(dir string) error
		wantCode int
		wantErr  string
	}{
		{"exit 0", func(d string) error { return writeResult(d, 0, nil) }, 0, ""},
		{"killed by SIGKILL", func(d string) error { return writeResult(d, 137, nil) }, 137, ""},
		{"init failed", func(d string) error { return writeResult(d, -1, errors.New("mounting overlay: ENODEV")) },
			0, "guest init failed: mounting overlay: ENODEV"},
		{"nothing reported", func(string) error { return nil }, 0, "reported no exit code"},
		{"garbage", func(d string) error { return os.WriteFile(filepath.Join(d, exitCodeFile), []byte("x\n"), 0o600) },
			0, `exit code "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tc.write(dir); err != nil {
				t.Fatal(err)
			}
			code, err := readResult(dir)
			if tc.wantErr == "" {
				if err != nil || code != tc.wantCode {
					t.Errorf("readResult = %d, %v; want %d", code, err, tc.wantCode)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("readResult error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestWithLogsQuotesTheEnds(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("x", 2*logTail) + "\nKernel panic - not syncing: Attempted to kill init!\n"
	if err := os.WriteFile(filepath.Join(dir, "console.log"), []byte(long), 0o600); err != nil {
		t.Fatal(err)
	}
	err := withLogs(errors.New("the guest reported no exit code"), dir)
	msg := err.Error()
	if !strings.HasPrefix(msg, "the guest reported no exit code\n--- end of console.log ---\n") ||
		!strings.HasSuffix(msg, "Attempted to kill init!") || len(msg) > logTail+200 {
		t.Errorf("withLogs gave %d bytes: %.200q...", len(msg), msg)
	}
	if strings.Contains(msg, "uml.log") {
		t.Error("withLogs quoted a log that does not exist")
	}
}

func TestResultReported(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  bool
	}{
		{name: "nothing yet", want: false},
		{name: "exit code being written", files: map[string]string{exitCodeFile: "1"}, want: false},
		{name: "empty exit code file", files: map[string]string{exitCodeFile: ""}, want: false},
		{name: "exit code written", files: map[string]string{exitCodeFile: "0\n"}, want: true},
		{name: "init error written", files: map[string]string{initErrorFile: "mounting /proc: EPERM\n"}, want: true},
		{name: "unrelated file", files: map[string]string{specFile: "{}\n"}, want: false},
	} {
		dir := t.TempDir()
		for name, content := range tc.files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if got := resultReported(dir); got != tc.want {
			t.Errorf("%s: resultReported = %v, want %v", tc.name, got, tc.want)
		}
	}
}
