package lab

import (
	"net"
	"os"
	"strings"
	"testing"
)

func TestInFreshNetnsIsolatesLinks(t *testing.T) {
	if InFreshNetns(t) {
		return
	}
	links := Run(t, "ip", "-o", "link", "show")
	if n := strings.Count(strings.TrimSpace(links), "\n") + 1; n != 1 || !strings.Contains(links, "lo:") {
		t.Fatalf("a fresh namespace should hold only lo, got:\n%s", links)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("loopback should be up: %v", err)
	}
	ln.Close()
	if os.Getenv(innerEnv) != t.Name() {
		t.Fatalf("body ran outside the namespace")
	}
}

func TestRegexpQuoteSubtests(t *testing.T) {
	for in, want := range map[string]string{
		"TestA":          "TestA",
		"TestA/sub.case": `TestA$/^sub\.case`,
		"TestB/x(1)":     `TestB$/^x\(1\)`,
	} {
		if got := regexpQuoteSubtests(in); got != want {
			t.Errorf("regexpQuoteSubtests(%q) = %q, want %q", in, got, want)
		}
	}
}
