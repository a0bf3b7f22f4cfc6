package rulespec

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// ParsePrefix reads an -s/-d style address of family fam: an address with
// an optional /len or dotted IPv4 mask, masked to its network as
// iptables-save prints it.
func ParsePrefix(s string, fam ipfamily.Family) (netip.Prefix, error) {
	bad := errorf("host/network `%s' not found", s)
	addrText, bits, hasBits := strings.Cut(s, "/")
	addr, err := netip.ParseAddr(addrText)
	if err != nil || !inFamily(addr, fam) {
		return netip.Prefix{}, bad
	}
	n := addr.BitLen()
	if hasBits {
		if n, err = prefixLen(bits, fam); err != nil {
			return netip.Prefix{}, err
		}
	}
	p, err := addr.Prefix(n)
	if err != nil {
		return netip.Prefix{}, bad
	}
	return p, nil
}

func prefixLen(s string, fam ipfamily.Family) (int, error) {
	if fam == ipfamily.IPv4 && strings.Contains(s, ".") {
		mask, err := netip.ParseAddr(s)
		if err != nil || !mask.Is4() {
			return 0, errorf("invalid mask `%s' specified", s)
		}
		return maskLen(mask)
	}
	n, err := strconv.Atoi(s)
	max := 32
	if fam == ipfamily.IPv6 {
		max = 128
	}
	if err != nil || n < 0 || n > max {
		return 0, errorf("invalid mask `%s' specified", s)
	}
	return n, nil
}

// maskLen converts a contiguous address mask to its prefix length.
func maskLen(mask netip.Addr) (int, error) {
	b := mask.AsSlice()
	n, ended := 0, false
	for _, octet := range b {
		for bit := 7; bit >= 0; bit-- {
			set := octet&(1<<bit) != 0
			if set && ended {
				return 0, errorf("non-contiguous mask `%s'", mask)
			}
			if set {
				n++
			} else {
				ended = true
			}
		}
	}
	return n, nil
}

func inFamily(a netip.Addr, fam ipfamily.Family) bool {
	if fam == ipfamily.IPv6 {
		return a.Is6() && !a.Is4In6()
	}
	return a.Is4()
}

// ParsePortRange reads a port or a "lo:hi" range.
func ParsePortRange(s string) (lo, hi uint16, err error) {
	first, last, isRange := strings.Cut(s, ":")
	if lo, err = parsePort(first); err != nil {
		return 0, 0, err
	}
	if !isRange {
		return lo, lo, nil
	}
	if hi, err = parsePort(last); err != nil {
		return 0, 0, err
	}
	if hi < lo {
		return 0, 0, errorf("invalid portrange specified")
	}
	return lo, hi, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, errorf("invalid port/service `%s' specified", s)
	}
	return uint16(n), nil
}

// ParseMark reads "value[/mask]" (hex or decimal, 32 bits); the mask is
// all ones when absent.
func ParseMark(s string) (value, mask uint32, err error) {
	v, m, hasMask := strings.Cut(s, "/")
	value, err = parseUint32(v)
	if err != nil {
		return 0, 0, errorf("bad MARK value \"%s\"", s)
	}
	mask = ^uint32(0)
	if hasMask {
		if mask, err = parseUint32(m); err != nil {
			return 0, 0, errorf("bad MARK value \"%s\"", s)
		}
	}
	return value, mask, nil
}

func parseUint32(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 0, 32)
	return uint32(n), err
}

// ParseProbability reads statistic's --probability.
func ParseProbability(s string) (float64, error) {
	p, err := strconv.ParseFloat(s, 64)
	if err != nil || p < 0 || p > 1 {
		return 0, errorf("--probability must be between 0 and 1")
	}
	return p, nil
}

// ParseNATAddr reads DNAT's --to-destination or SNAT's --to-source of family
// fam: "address", "address:port", and for IPv6 "[address]:port". Port is 0
// when absent (the original port is kept). Ranges, which kproxy never
// writes, are refused.
func ParseNATAddr(s string, fam ipfamily.Family) (netip.Addr, uint16, error) {
	bad := errorf("bad NAT address `%s' (ranges are not modelled)", s)
	addrText, portText := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return netip.Addr{}, 0, bad
		}
		addrText, portText = s[1:end], strings.TrimPrefix(s[end+1:], ":")
		if portText == "" && end+1 != len(s) {
			return netip.Addr{}, 0, bad
		}
	case fam == ipfamily.IPv4:
		addrText, portText, _ = strings.Cut(s, ":")
	}
	addr, err := netip.ParseAddr(addrText)
	if err != nil || !inFamily(addr, fam) {
		return netip.Addr{}, 0, bad
	}
	if portText == "" {
		return addr, 0, nil
	}
	port, err := parsePort(portText)
	if err != nil || port == 0 {
		return netip.Addr{}, 0, bad
	}
	return addr, port, nil
}

// ParseToPort reads REDIRECT's or MASQUERADE's --to-ports: one port (a
// range is not modelled).
func ParseToPort(s string) (uint16, error) {
	port, err := parsePort(s)
	if err != nil || port == 0 {
		return 0, errorf("invalid port/service `%s' specified (ranges are not modelled)", s)
	}
	return port, nil
}

// Lists of the names an option accepts, upper case as iptables-save prints
// them.
func ctStates() []string {
	return []string{"INVALID", "NEW", "RELATED", "ESTABLISHED", "UNTRACKED", "SNAT", "DNAT"}
}

func states() []string { return []string{"INVALID", "NEW", "RELATED", "ESTABLISHED", "UNTRACKED"} }

func addrTypes() []string {
	return []string{"UNSPEC", "UNICAST", "LOCAL", "BROADCAST", "ANYCAST", "MULTICAST", "BLACKHOLE",
		"UNREACHABLE", "PROHIBIT", "THROW", "NAT", "XRESOLVE"}
}

func rejectTypes(fam ipfamily.Family) []string {
	if fam == ipfamily.IPv6 {
		return []string{"icmp6-no-route", "no-route", "icmp6-adm-prohibited", "adm-prohibited",
			"icmp6-addr-unreachable", "addr-unreach", "icmp6-port-unreachable", "port-unreach",
			"icmp6-policy-fail", "policy-fail", "icmp6-reject-route", "reject-route", "tcp-reset"}
	}
	return []string{"icmp-net-unreachable", "net-unreach", "icmp-host-unreachable", "host-unreach",
		"icmp-proto-unreachable", "proto-unreach", "icmp-port-unreachable", "port-unreach",
		"icmp-net-prohibited", "net-prohib", "icmp-host-prohibited", "host-prohib", "tcp-reset",
		"icmp-admin-prohibited", "admin-prohib"}
}

// checkList checks a comma-separated list against the names allowed.
func checkList(s, what string, allowed []string) error {
	for _, item := range strings.Split(s, ",") {
		found := false
		for _, a := range allowed {
			if item == a {
				found = true
				break
			}
		}
		if !found {
			return errorf("Bad %s \"%s\"", what, item)
		}
	}
	return nil
}

// InterfaceMatches says whether iface matches an -i/-o pattern: a name
// ending in "+" matches as a prefix, as in iptables.
func InterfaceMatches(pattern, iface string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "+"); ok {
		return strings.HasPrefix(iface, prefix)
	}
	return pattern == iface
}

// ListContains says whether s is one of the items of a comma-separated list.
func ListContains(list, s string) bool { return slices.Contains(strings.Split(list, ","), s) }
