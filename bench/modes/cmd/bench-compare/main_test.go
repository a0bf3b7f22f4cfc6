package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
)

const testdata = "../../testdata"

// TestBenchCompare builds the command and runs it as a user would, on the
// fixtures in bench/modes/testdata.
func TestBenchCompare(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bench-compare")
	// go test puts its own toolchain first on PATH for the tests it runs.
	if out, err := exec.Command("go", "build", "-o", bin, "kproxy.dev/kproxy/bench/modes/cmd/bench-compare").CombinedOutput(); err != nil {
		t.Fatalf("building bench-compare: %v\n%s", err, out)
	}
	badJSON := filepath.Join(dir, "bad.json")
	otherVersion := filepath.Join(dir, "v99.json")
	for path, content := range map[string]string{badJSON: "{not json", otherVersion: `{"version": 99}`} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := filepath.Join(testdata, "results.json")
	moved := filepath.Join(testdata, "results-new.json")
	outDir := filepath.Join(dir, "out")

	tests := []struct {
		name       string
		args       []string
		wantStatus int
		golden     string // stdout, compared as text
		wantStdout string
		wantStderr string
		wantFiles  []string // in outDir
	}{
		{name: "moved figures", args: []string{old, moved}, golden: "compare.golden"},
		{name: "same run", args: []string{old, old}, wantStdout: "No figure moved beyond its noise."},
		{name: "no arguments", args: nil, wantStatus: 2, wantStderr: "want OLD.json NEW.json, got 0 arguments"},
		{name: "one argument", args: []string{old}, wantStatus: 2, wantStderr: "usage:"},
		{name: "three arguments", args: []string{old, old, old}, wantStatus: 2, wantStderr: "got 3 arguments"},
		{name: "missing file", args: []string{old, filepath.Join(dir, "none.json")}, wantStatus: 2, wantStderr: "new run: reading results"},
		{name: "bad JSON", args: []string{badJSON, old}, wantStatus: 2, wantStderr: "old run: decoding results"},
		{name: "other schema version", args: []string{old, otherVersion}, wantStatus: 2, wantStderr: "schema version 99"},
		{name: "unknown flag", args: []string{"-x", old, old}, wantStatus: 2, wantStderr: "flag provided but not defined"},
		{name: "help", args: []string{"-h"}, wantStatus: 2, wantStderr: "usage:"},
		{
			name: "render", args: []string{"-render", old, "-out", outDir},
			wantStdout: filepath.Join(outDir, MarkdownFile),
			wantFiles:  []string{MarkdownFile},
		},
		{name: "render with extra arguments", args: []string{"-render", old, old}, wantStatus: 2, wantStderr: "-render takes no other arguments"},
		{name: "out without render", args: []string{"-out", outDir, old, old}, wantStatus: 2, wantStderr: "-out goes with -render"},
		{name: "render a missing file", args: []string{"-render", filepath.Join(dir, "none.json"), "-out", outDir}, wantStatus: 2, wantStderr: "reading results"},
		{name: "render into a file", args: []string{"-render", old, "-out", badJSON}, wantStatus: 1, wantStderr: "creating the output directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, tt.args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			status := 0
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				status = exitErr.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if status != tt.wantStatus {
				t.Errorf("exit status %d, want %d; stderr:\n%s", status, tt.wantStatus, stderr.String())
			}
			if tt.golden != "" {
				testkit.Golden(t, filepath.Join(testdata, tt.golden), stdout.String())
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("stdout lacks %q:\n%s", tt.wantStdout, stdout.String())
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.wantStderr, stderr.String())
			}
			if tt.wantStatus == 0 && stderr.Len() > 0 {
				t.Errorf("stderr on success:\n%s", stderr.String())
			}
			if len(tt.wantFiles) > 0 {
				entries, err := os.ReadDir(outDir)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, e := range entries {
					got = append(got, e.Name())
				}
				slices.Sort(got)
				want := slices.Sorted(slices.Values(tt.wantFiles))
				if !slices.Equal(got, want) {
					t.Errorf("-render wrote %q, want %q", got, want)
				}
				md, err := os.ReadFile(filepath.Join(outDir, MarkdownFile))
				if err != nil {
					t.Fatal(err)
				}
				testkit.Golden(t, filepath.Join(testdata, "bench-modes.md.golden"), string(md))
			}
		})
	}
}
