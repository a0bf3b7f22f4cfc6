package iptables

import (
	"kproxy.dev/kproxy/redirect/cleanup/owned"
	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
)

// Owned lists the chains the iptables mode (kproxy's and kube-proxy's)
// creates, for cleanup. kubelet's chains (KUBE-FIREWALL, KUBE-MARK-DROP,
// KUBE-KUBELET-CANARY) are not here: other components depend on them.
func Owned() owned.Objects {
	nat, filter, mangle := string(rules.NAT), string(rules.Filter), string(rules.Mangle)
	return owned.Objects{Chains: []owned.Chain{
		{Table: nat, Name: rules.Services},
		{Table: nat, Name: rules.Postrouting},
		{Table: nat, Name: rules.MarkMasq},
		{Table: nat, Name: rules.NodePorts},
		{Table: nat, Name: rules.ServicePrefix, Prefix: true},
		{Table: nat, Name: rules.LocalServicePrefix, Prefix: true},
		{Table: nat, Name: rules.ExternalPrefix, Prefix: true},
		{Table: nat, Name: rules.FirewallPrefix, Prefix: true},
		{Table: nat, Name: rules.EndpointPrefix, Prefix: true},
		{Table: nat, Name: "KUBE-XLB-", Prefix: true}, // kube-proxy before 1.24
		{Table: nat, Name: rules.Canary},
		{Table: filter, Name: rules.Services},
		{Table: filter, Name: rules.ExternalServices},
		{Table: filter, Name: rules.NodePorts},
		{Table: filter, Name: rules.Forward},
		{Table: filter, Name: rules.ProxyFirewall},
		{Table: filter, Name: rules.Canary},
		{Table: mangle, Name: rules.Canary},
	}}
}
