// Package modes holds the side-by-side benchmark of every proxy mode
// (`make bench-modes`): kproxy's userspace mode (REDIRECT and
// local portals), its iptables mode on each backend and its nftables mode,
// and kube-proxy v1.36.3's iptables and nftables modes, at a ladder of
// service counts on the host, next to a hand-written DNAT rule measured in
// the same run; and the IPVS modes, kproxy's and kube-proxy's, in the
// user-mode-linux guest kernel, in a section of their own.
//
// results.go is the machine-readable result (results.json); the Markdown
// table, the plots and `make bench-compare` are drawn from it.
package modes
