package sklookup_test

import (
	"testing"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/sklookup"
)

// TestProbe: this host's kernel (and the guest's, Linux 6.1) runs the
// steering; the probe attaches in the test's own namespace.
func TestProbe(t *testing.T) { testProbe(t) }

func TestGuestProbe(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	testProbe(t)
}

func testProbe(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	if err := sklookup.Probe(); err != nil {
		t.Fatalf("Probe: %v", err)
	}
}
