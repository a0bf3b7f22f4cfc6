package modes

import (
	"fmt"
	"slices"

	"kproxy.dev/kproxy/bench/syncscale"
)

// hostMode is how a host mode ID is run: which proxy, in which of
// bench/syncscale's modes (which carry the flags, the kernel checks and
// the one-change probe).
type hostMode struct {
	ID    string
	Proxy syncscale.Proxy
	Mode  syncscale.Mode
}

func hostModeOf(id string) (hostMode, error) {
	kp, kube := syncscale.Kproxy, syncscale.KubeProxy
	switch id {
	case ModeUserspaceRedirect:
		return hostMode{id, kp, syncscale.UserspaceRedirect}, nil
	case ModeUserspaceLocal:
		return hostMode{id, kp, syncscale.UserspaceLocal}, nil
	case ModeUserspaceSKLookup:
		return hostMode{id, kp, syncscale.UserspaceSKLookup}, nil
	case ModeKproxyIPTablesNFT:
		return hostMode{id, kp, syncscale.IPTablesNFT}, nil
	case ModeKproxyIPTablesLegacy:
		return hostMode{id, kp, syncscale.IPTablesLegacy}, nil
	case ModeKproxyNFTables:
		return hostMode{id, kp, syncscale.NFTables}, nil
	case ModeKubeProxyIPTables:
		return hostMode{id, kube, syncscale.IPTablesNFT}, nil
	case ModeKubeProxyIPTablesLegacy:
		return hostMode{id, kube, syncscale.IPTablesLegacy}, nil
	case ModeKubeProxyNFTables:
		return hostMode{id, kube, syncscale.NFTables}, nil
	}
	return hostMode{}, fmt.Errorf("%q is not a host mode", id)
}

// runOrder is the order a size's modes run in: the table's, except that
// the legacy iptables mode goes last, so that if the mark that makes
// kproxy pick that backend (a KUBE-IPTABLES-HINT chain, as kubelet leaves)
// were left behind, no other mode would run on it.
func runOrder(ids []string) []string {
	out := slices.Clone(ids)
	if i := slices.Index(out, ModeKproxyIPTablesLegacy); i >= 0 {
		out = append(slices.Delete(out, i, i+1), ModeKproxyIPTablesLegacy)
	}
	return out
}

// relayDescriptors is how many descriptors kproxy's userspace mode holds
// for ports service ports: a listener and one duplicate per event loop
// (GOMAXPROCS, 2 here) each, as bench/dataplane measured, plus headroom
// for the connections and UDP flows the data-plane runs open.
func relayDescriptors(ports, loops int) int { return ports*(1+loops) + 3000 }

// skipReason says why a mode cannot run at a size on this machine, or "".
// The userspace mode needs descriptors per service port, and RLIMIT_NOFILE
// cannot be raised past its hard limit without CAP_SYS_RESOURCE.
func skipReason(m hostMode, services, noFileLimit, loops int) string {
	if portals, userspace := m.Mode.Portals(); !userspace || portals == "sklookup" {
		// Socket-lookup portals hold a few sockets whatever the number
		// of services.
		return ""
	}
	// The bulk services' one port each, the measured service's two, the
	// new services'.
	need := relayDescriptors(services+2+20, loops)
	if need > noFileLimit {
		return fmt.Sprintf("RLIMIT_NOFILE %d: the relays need about %d descriptors", noFileLimit, need)
	}
	return ""
}
