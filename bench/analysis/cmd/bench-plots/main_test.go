package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// results is the fixture bench/modes keeps: a results file as the
// benchmark writes it.
const results = "../../../modes/testdata/results.json"

func TestBenchPlots(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	badJSON := filepath.Join(dir, "bad.json")
	for path, content := range map[string]string{notDir: "", badJSON: "{not json"} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outDir := filepath.Join(dir, "out")
	allPlots := []string{"latency.png", "latency.svg", "newconn.png", "newconn.svg",
		"ratios-guest.png", "ratios-guest.svg", "ratios.png", "ratios.svg"}

	tests := []struct {
		name       string
		args       []string
		wantStatus int
		wantStderr string
		wantFiles  []string // in outDir
	}{
		{name: "draw", args: []string{"-out", outDir, results}, wantFiles: allPlots},
		{name: "no arguments", wantStatus: 2, wantStderr: "want one results file, got 0 arguments"},
		{name: "two files", args: []string{results, results}, wantStatus: 2, wantStderr: "got 2 arguments"},
		{name: "flag after the file", args: []string{results, "-out", outDir}, wantStatus: 2, wantStderr: "got 3 arguments"},
		{name: "unknown flag", args: []string{"-x", results}, wantStatus: 2, wantStderr: "flag provided but not defined"},
		{name: "help", args: []string{"-h"}, wantStatus: 2, wantStderr: "usage:"},
		{name: "missing file", args: []string{filepath.Join(dir, "none.json")}, wantStatus: 2, wantStderr: "reading results"},
		{name: "bad JSON", args: []string{badJSON}, wantStatus: 2, wantStderr: "decoding results"},
		{name: "into a file", args: []string{"-out", notDir, results}, wantStatus: 1, wantStderr: "creating the output directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if status := run(tt.args, &stdout, &stderr); status != tt.wantStatus {
				t.Errorf("exit status %d, want %d; stderr:\n%s", status, tt.wantStatus, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.wantStderr, stderr.String())
			}
			if tt.wantStatus == 0 && stderr.Len() > 0 {
				t.Errorf("stderr on success:\n%s", stderr.String())
			}
			if tt.wantFiles == nil {
				return
			}
			entries, err := os.ReadDir(outDir)
			if err != nil {
				t.Fatal(err)
			}
			var got, printed []string
			for _, e := range entries {
				got = append(got, e.Name())
			}
			for _, line := range strings.Fields(stdout.String()) {
				printed = append(printed, filepath.Base(line))
			}
			slices.Sort(printed)
			if !slices.Equal(got, tt.wantFiles) || !slices.Equal(printed, tt.wantFiles) {
				t.Errorf("wrote %q and printed %q, want %q", got, printed, tt.wantFiles)
			}
		})
	}
}
