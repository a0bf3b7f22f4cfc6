package fakeiptables

import (
	"strings"
	"testing"

	"kproxy.dev/kproxy/sync/ipfamily"
)

func TestJumpRules(t *testing.T) {
	f := New(ipfamily.IPv4)
	jump := []string{"-m", "comment", "--comment", "a b", "-j", "KUBE-X"}
	if err := f.Insert("nat", "OUTPUT", 1, jump...); err == nil || !strings.Contains(err.Error(), "Chain 'KUBE-X' does not exist") {
		t.Fatalf("inserting a jump to a missing chain: %v, want the tool's complaint", err)
	}
	if ok, err := f.Exists("nat", "KUBE-NONE", "-j", "ACCEPT"); ok || err != nil {
		t.Errorf("Exists in a missing chain = %v, %v; want false, nil as go-iptables answers", ok, err)
	}
	if _, err := f.Exists("nat", "OUTPUT", "-m", "bogus", "-j", "ACCEPT"); err == nil {
		t.Error("Exists accepted a rule the tool cannot parse")
	}
	if err := restoreNoflush(f, "*nat\n:KUBE-X - [0:0]\nCOMMIT\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Append("nat", "OUTPUT", "-j", "ACCEPT"); err != nil {
		t.Fatal(err)
	}
	if err := f.Insert("nat", "OUTPUT", 1, jump...); err != nil {
		t.Fatal(err)
	}
	if err := f.Insert("nat", "OUTPUT", 4, "-j", "RETURN"); err == nil || !strings.Contains(err.Error(), "Index of insertion too big") {
		t.Errorf("inserting past the end: %v", err)
	}
	if ok, err := f.Exists("nat", "OUTPUT", jump...); err != nil || !ok {
		t.Fatalf("Exists = %v, %v", ok, err)
	}
	if got := f.Rules("nat", "OUTPUT"); len(got) != 2 || got[0] != `-A OUTPUT -m comment --comment "a b" -j KUBE-X` {
		t.Errorf("OUTPUT = %q: the insert is not first or not quoted like iptables-save", got)
	}
	if err := f.Delete("nat", "OUTPUT", "-j", "RETURN"); err == nil || !strings.Contains(err.Error(), "Bad rule") {
		t.Errorf("deleting a missing rule: %v", err)
	}
	// The jump keeps its chain: deleting the chain fails until it goes.
	if err := restoreNoflush(f, "*nat\n-X KUBE-X\nCOMMIT\n"); err == nil {
		t.Fatal("deleting a chain a built-in chain jumps to succeeded")
	}
	if err := restoreNoflush(f, "*nat\n-D OUTPUT -m comment --comment \"a b\" -j KUBE-X\n-X KUBE-X\nCOMMIT\n"); err != nil {
		t.Fatalf("deleting by the saved text: %v", err)
	}
	if f.HasChain("nat", "KUBE-X") {
		t.Error("KUBE-X survived -X")
	}
	if err := f.Append("natt", "OUTPUT", "-j", "ACCEPT"); err == nil {
		t.Error("Append to an unknown table succeeded")
	}
}
