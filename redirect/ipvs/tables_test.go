package ipvs

import (
	"os"
	"path/filepath"
	"testing"

	"kproxy.dev/kproxy/redirect/ipvs/desired"
)

func TestRestoreJumpsArePrepended(t *testing.T) {
	js, err := desired.RestoreJumps([]desired.Jump{{Table: "filter", From: "INPUT", Rule: `-m comment --comment "x y" -j KUBE-NODE-PORT`}})
	if err != nil {
		t.Fatal(err)
	}
	if len(js) != 1 || !js[0].First || js[0].Chain != "INPUT" || js[0].Target() != "KUBE-NODE-PORT" || js[0].Args[3] != "x y" {
		t.Errorf("RestoreJumps = %+v", js)
	}
}

func TestProcSysctlsWritesUnderRoot(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "net", "ipv4", "vs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "conntrack"), []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := ProcSysctls{Root: root}
	if err := s.Write("net/ipv4/vs/conntrack", 1); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "conntrack")); string(b) != "1" {
		t.Errorf("conntrack = %q, want 1", b)
	}
	// A name cannot climb out of Root.
	if err := s.Write("../../escape", 1); err == nil {
		t.Error("writing a sysctl outside the root succeeded")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(root), "escape")); err == nil {
		t.Error("a file was written outside the root")
	}
	if err := s.Write("net/ipv4/vs/missing", 1); err == nil {
		t.Error("writing a missing sysctl succeeded")
	}
}
