package userspace

import (
	"kproxy.dev/kproxy/redirect/cleanup/owned"
	"kproxy.dev/kproxy/redirect/modes/userspace/portal"
	"kproxy.dev/kproxy/redirect/replyroute"
)

// Owned lists what the userspace mode creates, for cleanup: the REDIRECT
// portals' chains (kproxy's and kube-proxy's old mode's), the local
// portals' routes, and what steers the replies to dials from clients'
// addresses: the reply rules and table (LocalRoutes) and the socket
// match's nftables table.
func Owned() owned.Objects {
	nat, filter := portal.TableNAT, portal.TableFilter
	return owned.Objects{LocalRoutes: true, NFTables: []string{replyroute.NFTable}, Chains: []owned.Chain{
		{Table: nat, Name: portal.ChainPortalsContainer},
		{Table: nat, Name: portal.ChainPortalsHost},
		{Table: nat, Name: portal.ChainNodePortContainer},
		{Table: nat, Name: portal.ChainNodePortHost},
		{Table: filter, Name: portal.ChainNodePortNonLocal},
		{Table: filter, Name: portal.ChainProxyPorts},
		{Table: filter, Name: portal.ChainNoLocalEndpoints},
		{Table: filter, Name: portal.ChainFirewall},
	}}
}
