package ipvs

import (
	"slices"

	"kproxy.dev/kproxy/redirect/cleanup/owned"
	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// Owned lists what the IPVS mode (kproxy's and kube-proxy's) creates, for
// cleanup: its iptables chains, its ipsets in both families, and the dummy
// link whose presence marks the IPVS virtual servers as the mode's.
func Owned() owned.Objects {
	const nat, filter = "nat", "filter"
	o := owned.Objects{
		IPVSLink: handles.DummyLink,
		Chains: slices.Concat(
			owned.ChainsIn(nat, desired.ChainServices, desired.ChainPostrouting, desired.ChainMarkMasq, desired.ChainNodePort,
				desired.ChainLoadBalancer,
				"KUBE-FIREWALL"), // older kube-proxy; filter's is kubelet's
			owned.ChainsIn(filter, desired.ChainNodePort, desired.ChainForward, desired.ChainProxyFirewall, desired.ChainSourceRangesFW,
				desired.ChainIPVSFilter, desired.ChainIPVSOutFilter),
		),
	}
	for _, fam := range ipfamily.All() {
		for _, spec := range desired.SetSpecs(fam) {
			o.Sets = append(o.Sets, owned.Set{Name: spec.Name})
		}
		// Names other kube-proxy versions derive from the same families.
		for _, base := range []string{"KUBE-NODE-PORT-", "KUBE-LOAD-BALANCER-", "KUBE-EXTERNAL-IP-"} {
			o.Sets = append(o.Sets, owned.Set{Name: desired.SetName(base, fam), Prefix: true})
		}
	}
	return o
}
