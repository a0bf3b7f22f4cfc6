package guest

import (
	"os"
	"testing"
)

// EnvInGuest is set to "1" in the environment of every program the guest
// init starts; nothing on the host sets it.
const EnvInGuest = "KPROXY_GUEST"

// MakeTarget is the make target that runs the guest tests.
const MakeTarget = "make test-guest"

// InGuest reports whether this process runs inside the guest kernel.
func InGuest() bool { return os.Getenv(EnvInGuest) == "1" }

// SkipUnlessInGuest skips a test that needs the guest kernel (IPVS, SCTP)
// when it runs on the host, naming the make target that runs it there.
func SkipUnlessInGuest(tb testing.TB) {
	tb.Helper()
	if !InGuest() {
		tb.Skipf("needs the guest kernel (IPVS, SCTP); runs under %s (go test -exec bin/guest-exec)", MakeTarget)
	}
}
