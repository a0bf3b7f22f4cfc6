package ipvs

// requiredSysctl says whether the mode cannot work without name: IPVS
// traffic must be forwarded, and must go through conntrack to be
// masqueraded. Any other one failing is a warning.
func requiredSysctl(name string) bool {
	return name == "net/ipv4/ip_forward" || name == "net/ipv4/vs/conntrack"
}
