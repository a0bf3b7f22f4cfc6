package userspace

import (
	"slices"

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
	return owned.Objects{LocalRoutes: true, NFTables: []string{replyroute.NFTable}, Chains: slices.Concat(
		owned.ChainsIn(nat, portal.ChainPortalsContainer, portal.ChainPortalsHost, portal.ChainNodePortContainer, portal.ChainNodePortHost),
		owned.ChainsIn(filter, portal.ChainNodePortNonLocal, portal.ChainProxyPorts, portal.ChainNoLocalEndpoints, portal.ChainFirewall),
	)}
}
