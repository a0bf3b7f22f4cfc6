package guest

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// EnvInGuest is set to "1" in the environment of every program the guest
// init starts; nothing on the host sets it.
const EnvInGuest = "KPROXY_GUEST"

// EnvNetfilter is "off" in the environment of the programs a guest without
// netfilter runs (Config.NoNetfilter) and "on" in any other guest's.
// guest-exec reads it on the host too: "off" there boots such a guest.
const EnvNetfilter = "KPROXY_GUEST_NETFILTER"

// WithoutNetfilter reports whether this process runs in a guest booted
// without netfilter: no netfilter module loaded and module loading
// disabled, so no iptables, nf_tables, conntrack, ipset or IPVS.
func WithoutNetfilter() bool { return InGuest() && os.Getenv(EnvNetfilter) == "off" }

// ParseNetfilter reads a value of EnvNetfilter: whether the guest has
// netfilter ("" means it has).
func ParseNetfilter(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "on", "true", "1", "yes":
		return true, nil
	case "off", "false", "0", "no":
		return false, nil
	}
	return false, fmt.Errorf("%s=%q: want on or off", EnvNetfilter, v)
}

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

// SkipWithoutNetfilter skips a guest test that needs netfilter (iptables,
// IPVS, conntrack, ipset) when the guest was booted without it.
func SkipWithoutNetfilter(tb testing.TB) {
	tb.Helper()
	if WithoutNetfilter() {
		tb.Skip("needs netfilter; this guest was booted without it (guest-exec -netfilter=false)")
	}
}

// SkipUnlessWithoutNetfilter skips a test that needs a guest without
// netfilter anywhere else.
func SkipUnlessWithoutNetfilter(tb testing.TB) {
	tb.Helper()
	if !WithoutNetfilter() {
		tb.Skipf("needs a guest kernel without netfilter; runs under %s (go test -exec \"bin/guest-exec -netfilter=false\")", MakeTarget)
	}
}
