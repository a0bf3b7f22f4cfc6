package userspace

import (
	"kproxy.dev/kproxy/redirect/cleanup/owned"
	"kproxy.dev/kproxy/redirect/modes/userspace/portal"
)

// Owned lists the portal chains the userspace mode (kproxy's and kube-proxy's
// old one) creates, for cleanup.
func Owned() owned.Objects {
	nat, filter := portal.TableNAT, portal.TableFilter
	return owned.Objects{Chains: []owned.Chain{
		{Table: nat, Name: portal.ChainPortalsContainer},
		{Table: nat, Name: portal.ChainPortalsHost},
		{Table: nat, Name: portal.ChainNodePortContainer},
		{Table: nat, Name: portal.ChainNodePortHost},
		{Table: filter, Name: portal.ChainNodePortNonLocal},
		{Table: filter, Name: portal.ChainProxyPorts},
		{Table: filter, Name: portal.ChainFirewall},
	}}
}
