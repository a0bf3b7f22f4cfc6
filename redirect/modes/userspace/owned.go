package userspace

import (
	"kproxy.dev/kproxy/redirect/cleanup/owned"
	"kproxy.dev/kproxy/redirect/modes/userspace/portal"
)

// Owned lists what the userspace mode creates, for cleanup: the REDIRECT
// portals' chains (kproxy's and kube-proxy's old mode's) and the local
// portals' routes.
func Owned() owned.Objects {
	nat, filter := portal.TableNAT, portal.TableFilter
	return owned.Objects{LocalRoutes: true, Chains: []owned.Chain{
		{Table: nat, Name: portal.ChainPortalsContainer},
		{Table: nat, Name: portal.ChainPortalsHost},
		{Table: nat, Name: portal.ChainNodePortContainer},
		{Table: nat, Name: portal.ChainNodePortHost},
		{Table: filter, Name: portal.ChainNodePortNonLocal},
		{Table: filter, Name: portal.ChainProxyPorts},
		{Table: filter, Name: portal.ChainFirewall},
	}}
}
