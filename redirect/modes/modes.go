// Package modes is the registry of proxy modes: one line per mode, in the
// order they are offered. Adding a mode means writing its package under
// redirect/modes (which exports a contract.Definition, from
// redirect/modes/contract) and adding it here; a mode with settings of its
// own also adds a section to contract.Settings and its flags in
// cmd/kproxy/options. Nothing on the ground floor (sync/) changes: the
// engine sees only the sync/mode.Mode a Definition builds, and the mode's
// mode.Name may be a constant of its own package.
package modes

import (
	"kproxy.dev/kproxy/redirect/cleanup"
	"kproxy.dev/kproxy/redirect/cleanup/owned"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/redirect/modes/iptables"
	"kproxy.dev/kproxy/redirect/modes/ipvs"
	"kproxy.dev/kproxy/redirect/modes/nftables"
	"kproxy.dev/kproxy/redirect/modes/userspace"
	"kproxy.dev/kproxy/sync/mode"
)

// All lists every mode kproxy has. Automatic choice takes the first Auto
// one that can run; errors offer the others in this order.
func All() []contract.Definition {
	return []contract.Definition{
		iptables.Definition(),
		ipvs.Definition(),
		nftables.Definition(),
		userspace.Definition(),
	}
}

// Choose picks the mode to run; see contract.Choose.
func Choose(requested string, f kernel.Features) (contract.Definition, string, error) {
	return contract.Choose(requested, f, All())
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
