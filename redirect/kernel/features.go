package kernel

import (
	"fmt"
	"strings"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// Backend is an iptables implementation: the nf_tables one or the legacy
// x_tables one. Both can be present; rules live in one or the other.
type Backend string

const (
	NFT    Backend = "nft"
	Legacy Backend = "legacy"
)

// Backends lists the iptables backends in preference order.
func Backends() []Backend { return []Backend{NFT, Legacy} }

// Command is the iptables binary of this backend for fam, e.g. "ip6tables-nft".
func (b Backend) Command(fam ipfamily.Family) string {
	if fam == ipfamily.IPv6 {
		return "ip6tables-" + string(b)
	}
	return "iptables-" + string(b)
}

// SaveCommand is the iptables-save binary of this backend for fam.
func (b Backend) SaveCommand(fam ipfamily.Family) string { return b.Command(fam) + "-save" }

// RestoreCommand is the iptables-restore binary of this backend for fam.
func (b Backend) RestoreCommand(fam ipfamily.Family) string { return b.Command(fam) + "-restore" }

// IPTables is what one backend can do for one family.
type IPTables struct {
	// Usable: the backend can list and create chains in the nat and filter tables.
	Usable bool
	// DNAT and Redirect: those targets load in the nat table.
	DNAT, Redirect bool
	// RandomFully: MASQUERADE accepts --random-fully.
	RandomFully bool
	// KubeRules counts the lines of this backend's iptables-save that mention
	// KUBE-/KPROXY- chains: rules kubelet, kube-proxy or kproxy left there.
	KubeRules int
	// Problem says why the first failed probe failed ("" when all passed),
	// or why the backend was not probed.
	Problem string
	// NotProbed: only the read-only iptables-save ran, which showed no
	// tables, and the backend was not needed, so nothing that would create
	// its tables was run (see Detector.Detect). Usable is then false, but
	// unlike an unusable backend its save command works.
	NotProbed bool
}

// FamilyIPTables holds both backends' abilities for one family.
type FamilyIPTables struct {
	NFT, Legacy IPTables
}

// Get returns the abilities of backend b.
func (f FamilyIPTables) Get(b Backend) IPTables {
	if b == Legacy {
		return f.Legacy
	}
	return f.NFT
}

// Support is the result of one yes/no probe.
type Support struct {
	Present bool
	// Detail says what the probe saw, chiefly why a feature is absent.
	Detail string
}

func (s Support) String() string {
	word := "absent"
	if s.Present {
		word = "present"
	}
	if s.Detail == "" {
		return word
	}
	return word + " (" + s.Detail + ")"
}

// Features is what this node's kernel and tools support. Probe it once with
// Detect at start; it does not change while the process runs.
type Features struct {
	IPv4, IPv6 FamilyIPTables
	// Backend is the iptables backend to use; "" when none is usable for IPv4.
	Backend Backend
	// BackendReason says why Backend was chosen, for the log.
	BackendReason string

	Conntrack  Support // conntrack reachable over netlink
	IPVS       Support // generic netlink family "IPVS"
	IPSet      Support // ip_set can create and destroy a set (over netlink)
	DummyLinks Support // a dummy link can be created (kube-ipvs0 is one)
	SCTP       Support // SCTP sockets can be opened
	// SKLookup: a socket-lookup (BPF sk_lookup) program and its maps load
	// and attach to a network namespace, and sockets go into its SOCKMAP
	// (Linux 5.9+, CAP_BPF and CAP_NET_ADMIN; see redirect/sklookup).
	SKLookup Support
	// NFTables: what the nftables mode needs (nft, kernel, tables).
	NFTables NFTablesSupport

	// ProbeNetns: the probes that create chains, sets and links ran in a
	// throwaway network namespace, leaving the node's untouched. Absent, the
	// Detail says why they ran in the node's own namespace instead.
	ProbeNetns Support
}

// Family returns the iptables abilities for fam.
func (f Features) Family(fam ipfamily.Family) FamilyIPTables {
	if fam == ipfamily.IPv6 {
		return f.IPv6
	}
	return f.IPv4
}

// family returns the iptables abilities for fam, for filling in.
func (f *Features) family(fam ipfamily.Family) *FamilyIPTables {
	if fam == ipfamily.IPv6 {
		return &f.IPv6
	}
	return &f.IPv4
}

// Chosen returns the abilities of the chosen backend for fam (the zero value
// when no backend was chosen).
func (f Features) Chosen(fam ipfamily.Family) IPTables {
	if f.Backend == "" {
		return IPTables{Problem: "no usable iptables backend"}
	}
	return f.Family(fam).Get(f.Backend)
}

func (t IPTables) String() string {
	if t.NotProbed {
		if t.Problem == "" {
			return "not probed"
		}
		return t.Problem // LegacyNotProbed says "not probed" and why
	}
	if !t.Usable {
		return "unusable (" + t.Problem + ")"
	}
	s := fmt.Sprintf("usable dnat=%t redirect=%t random-fully=%t kube-rules=%d", t.DNAT, t.Redirect, t.RandomFully, t.KubeRules)
	if t.Problem != "" {
		s += " (" + t.Problem + ")"
	}
	return s
}

// String renders every probe result, one per line, for logs.
func (f Features) String() string {
	var b strings.Builder
	for _, fam := range ipfamily.All() {
		for _, be := range Backends() {
			fmt.Fprintf(&b, "%s: %s\n", be.Command(fam), f.Family(fam).Get(be))
		}
	}
	fmt.Fprintf(&b, "iptables backend: %q (%s)\n", f.Backend, f.BackendReason)
	fmt.Fprintf(&b, "conntrack: %s\n", f.Conntrack)
	fmt.Fprintf(&b, "ipvs: %s\n", f.IPVS)
	fmt.Fprintf(&b, "ipset: %s\n", f.IPSet)
	fmt.Fprintf(&b, "dummy links: %s\n", f.DummyLinks)
	fmt.Fprintf(&b, "sctp: %s\n", f.SCTP)
	fmt.Fprintf(&b, "sk_lookup: %s\n", f.SKLookup)
	fmt.Fprintf(&b, "nftables: %s\n", f.NFTables)
	fmt.Fprintf(&b, "probes in a throwaway netns: %s", f.ProbeNetns)
	return b.String()
}

// NoBackend returns, for a mode's list of missing features, the phrase for
// a node with no usable iptables backend; nil when there is one.
func (f Features) NoBackend() []string {
	if f.Backend != "" {
		return nil
	}
	return []string{"no iptables backend is usable (" + f.BackendReason + ")"}
}

// WithDetail appends detail to a missing-feature phrase in parentheses.
func WithDetail(phrase, detail string) string {
	if detail == "" {
		return phrase
	}
	return phrase + " (" + detail + ")"
}
