package modes

import (
	"context"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/mode"
)

// TestChooseOnThisKernel: what the probes find here (iptables, no IPVS, no
// dummy links) picks the iptables mode automatically and refuses the IPVS
// mode with the reason.
func TestChooseOnThisKernel(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	f := kernel.Detect(context.Background(), false)
	if f.IPVS.Present {
		t.Skip("this kernel has IPVS; the guest-kernel tests cover it")
	}
	def, reason, err := Choose("", f)
	if err != nil || def.Name != mode.IPTables {
		t.Errorf("Choose(auto) = %q, %v; want iptables", def.Name, err)
	}
	t.Logf("auto mode: %s (%s)", def.Name, reason)
	if _, _, err := Choose("ipvs", f); err == nil {
		t.Errorf("Choose(ipvs) succeeded on a kernel without IPVS")
	} else {
		t.Logf("ipvs refused: %v", err)
	}
}
