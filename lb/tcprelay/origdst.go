package tcprelay

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/eventloop"
)

// soOriginalDst is SO_ORIGINAL_DST (IPv4, level SOL_IP) and also
// IP6T_SO_ORIGINAL_DST (IPv6, level SOL_IPV6); x/sys/unix defines neither.
const soOriginalDst = 80

// originalDestination asks conntrack for the address the client originally
// connected to, before a REDIRECT or DNAT rewrote it. ipv6 says whether the
// connection is IPv6 (an IPv4 client of a dual-stack listener is not). It
// fails (ENOENT) when conntrack has no entry for the connection.
func originalDestination(fd int, ipv6 bool) (netip.AddrPort, error) {
	level := unix.SOL_IP
	if ipv6 {
		level = unix.SOL_IPV6
	}
	var sa eventloop.Sockaddr
	if err := eventloop.GetsockoptSockaddr(fd, level, soOriginalDst, &sa); err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockopt SO_ORIGINAL_DST: %w", err)
	}
	return sa.AddrPort()
}
