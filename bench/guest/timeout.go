package guest

import (
	"strings"
	"time"
)

// DefaultTimeout bounds a guest run when the test binary was given no
// -test.timeout (go test always passes one, 10m by default).
const DefaultTimeout = 10 * time.Minute

// bootAllowance is added to the test binary's own timeout: booting and
// powering off, plus time for the binary to print its panic and goroutine
// dump when its timeout fires, so that dump rather than a kill ends the run.
const bootAllowance = time.Minute

// TimeoutFor derives the guest run's deadline from a test binary's
// arguments: its -test.timeout plus bootAllowance, or DefaultTimeout plus
// bootAllowance when it has none (or -test.timeout=0, which Go reads as
// "no limit" but a guest run must never hang).
func TimeoutFor(args []string) time.Duration {
	d := DefaultTimeout
	for i := 0; i < len(args); i++ {
		a := strings.TrimPrefix(args[i], "-")
		a = strings.TrimPrefix(a, "-")
		var val string
		switch {
		case strings.HasPrefix(a, "test.timeout="):
			val = strings.TrimPrefix(a, "test.timeout=")
		case a == "test.timeout" && i+1 < len(args):
			i++
			val = args[i]
		default:
			continue
		}
		if v, err := time.ParseDuration(val); err == nil && v > 0 {
			d = v
		}
	}
	return d + bootAllowance
}

// Slowdown is how many times longer a test's wait may take in the guest
// than on the host: UML runs the guest on one CPU, and its syscalls are
// ~60 times slower. Measured: etcd plus kube-apiserver were ready after
// 3.7 s on the host and after 13.6–15.5 s in the guest.
const Slowdown = 4

// Scale returns d on the host and d times Slowdown in the guest, for the
// bounds tests wait within (a first sync, a change taking effect).
func Scale(d time.Duration) time.Duration {
	if InGuest() {
		return d * Slowdown
	}
	return d
}
