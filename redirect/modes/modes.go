// Package modes is the registry of proxy modes: one line per mode, in the
// order they are offered. Adding a mode means writing its package (which
// exports a mode.Definition) and adding it here.
package modes

import (
	"kproxy.dev/kproxy/redirect/cleanup"
	"kproxy.dev/kproxy/redirect/cleanup/owned"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/iptables"
	"kproxy.dev/kproxy/redirect/modes/ipvs"
	"kproxy.dev/kproxy/redirect/modes/nftables"
	"kproxy.dev/kproxy/redirect/modes/userspace"
	"kproxy.dev/kproxy/sync/mode"
)

// All lists every mode kproxy has. Automatic choice takes the first Auto
// one that can run; errors offer the others in this order.
func All() []mode.Definition {
	return []mode.Definition{
		iptables.Definition(),
		ipvs.Definition(),
		nftables.Definition(),
		userspace.Definition(),
	}
}

// Choose picks the mode to run; see mode.Choose.
func Choose(requested string, f kernel.Features) (mode.Definition, string, error) {
	return mode.Choose(requested, f, All())
}

// CleanupScope is what a node running keep ("" for --cleanup) removes: what
// every other mode, and kube-proxy's modes kproxy lacks, leave behind.
func CleanupScope(keep mode.Name) cleanup.Scope {
	scope := cleanup.Scope{Remove: []owned.Objects{cleanup.KubeProxyOnly()}}
	for _, def := range All() {
		if def.Name == keep {
			scope.Keep = def.Owned()
			continue
		}
		scope.Remove = append(scope.Remove, def.Owned())
	}
	return scope
}
