package main

import (
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// Bad flags and input stop the program before it touches the kernel, with
// the usage exit status.
func TestRunRefusesBadInput(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no flags", nil, "-services-file and -hostname-override are required"},
		{"no node name", []string{"-services-file", missing}, "are required"},
		{"unknown flag", []string{"-proxy-mode", "ipvs"}, "flag provided but not defined"},
		{"missing file", []string{"-services-file", missing, "-hostname-override", "node"}, "reading the services file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args, io.Discard)
			var usage usageError
			if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("run(%q) = %v, want a usage error containing %q", tc.args, err, tc.wantErr)
			}
		})
	}
}
