package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionCarriesRevision builds kproxy as `make build` does and checks
// that --version names the revision checked out, not "(devel)".
func TestVersionCarriesRevision(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	rev := strings.TrimSpace(string(head))
	ldflags, err := exec.Command("make", "-s", "-C", root, "print-version-ldflags").Output()
	if err != nil {
		t.Fatalf("make print-version-ldflags: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "kproxy")
	build := exec.Command("go", "build", "-ldflags", strings.TrimSpace(string(ldflags)), "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build with the Makefile's flags: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("kproxy --version: %v\n%s", err, out)
	}
	got := strings.TrimSpace(string(out))
	if !strings.HasPrefix(got, "kproxy version v0.0.0-") || !strings.Contains(got, rev[:12]) || strings.Contains(got, "devel") {
		t.Errorf("kproxy --version = %q, want a pseudo-version carrying revision %s", got, rev[:12])
	}
}
