package iptables

import (
	"slices"

	"kproxy.dev/kproxy/redirect/cleanup/owned"
	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
)

// Owned lists the chains the iptables mode (kproxy's and kube-proxy's)
// creates, for cleanup. kubelet's chains (KUBE-FIREWALL, KUBE-MARK-DROP,
// KUBE-KUBELET-CANARY) are not here: other components depend on them.
func Owned() owned.Objects {
	nat, filter, mangle := string(rules.NAT), string(rules.Filter), string(rules.Mangle)
	return owned.Objects{Chains: slices.Concat(
		owned.ChainsIn(nat, rules.Services, rules.Postrouting, rules.MarkMasq, rules.NodePorts),
		owned.PrefixesIn(nat, rules.ServicePrefix, rules.LocalServicePrefix, rules.ExternalPrefix, rules.FirewallPrefix, rules.EndpointPrefix,
			"KUBE-XLB-"), // kube-proxy before 1.24
		owned.ChainsIn(nat, rules.Canary),
		owned.ChainsIn(filter, rules.Services, rules.ExternalServices, rules.NodePorts, rules.Forward, rules.ProxyFirewall, rules.Canary),
		owned.ChainsIn(mangle, rules.Canary),
	)}
}
