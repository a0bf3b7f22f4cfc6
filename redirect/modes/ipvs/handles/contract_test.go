package handles_test

import (
	"testing"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
)

// The contracts of the mode's three kernel handles. Each runs its table
// on the fake (redirect/modes/ipvs/fakeipvs) everywhere; the kernel variants run
// the same table on the real handle in a network namespace of their own
// and on the fake side by side, and fail where the two differ. The host
// kernel has ipsets (and perhaps dummy links) but no IPVS: TestGuest* run
// in the guest kernel (make test-guest), which has all three.

func TestIPSetsContract(t *testing.T) { runContract(t, setsCases(), fakeSets()) }

func TestLinkContract(t *testing.T) { runContract(t, linkCases(), fakeLink()) }

func TestIPVSContract(t *testing.T) { runContract(t, ipvsCases(), fakeIPVS()) }

func TestIPSetsContractKernel(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	runContract(t, setsCases(), fakeSets(), kernelSets())
}

func TestLinkContractKernel(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	runContract(t, linkCases(), fakeLink(), kernelLink(t))
}

func TestGuestIPVSContract(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	if lab.InFreshNetns(t) {
		return
	}
	runContract(t, ipvsCases(), fakeIPVS(), kernelIPVS(t))
}

func TestGuestIPSetsContract(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	if lab.InFreshNetns(t) {
		return
	}
	runContract(t, setsCases(), fakeSets(), kernelSets())
}

func TestGuestLinkContract(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	if lab.InFreshNetns(t) {
		return
	}
	runContract(t, linkCases(), fakeLink(), kernelLink(t))
}
