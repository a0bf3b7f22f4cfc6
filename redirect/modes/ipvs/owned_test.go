package ipvs

import (
	"testing"

	"kproxy.dev/kproxy/redirect/cleanup/owned/ownedtest"
)

// TestOwnedCoversGoldenOutput: every chain and ipset the desired state's
// golden files create is one cleanup removes.
func TestOwnedCoversGoldenOutput(t *testing.T) {
	ownedtest.CheckGolden(t, "desired/testdata", Owned())
}
