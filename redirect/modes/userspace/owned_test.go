package userspace

import (
	"testing"

	"kproxy.dev/kproxy/redirect/cleanup/owned/ownedtest"
)

// TestOwnedCoversGoldenOutput: every chain the portal rules' golden files
// declare is one cleanup removes.
func TestOwnedCoversGoldenOutput(t *testing.T) {
	ownedtest.CheckGolden(t, "portal/testdata", Owned())
}
