package ipvs

import (
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
		Chains: []owned.Chain{
			{Table: nat, Name: desired.ChainServices},
			{Table: nat, Name: desired.ChainPostrouting},
			{Table: nat, Name: desired.ChainMarkMasq},
			{Table: nat, Name: desired.ChainNodePort},
			{Table: nat, Name: desired.ChainLoadBalancer},
			{Table: nat, Name: "KUBE-FIREWALL"}, // older kube-proxy; filter's is kubelet's
			{Table: filter, Name: desired.ChainNodePort},
			{Table: filter, Name: desired.ChainForward},
			{Table: filter, Name: desired.ChainProxyFirewall},
			{Table: filter, Name: desired.ChainSourceRangesFW},
			{Table: filter, Name: desired.ChainIPVSFilter},
			{Table: filter, Name: desired.ChainIPVSOutFilter},
		},
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
