package rules

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strconv"
	"strings"

	"kproxy.dev/kproxy/sync/servicemap"
)

// Names of the table's fixed objects, as kube-proxy v1.36 names them.
const (
	FilterPreroutingPreDNATChain = "filter-prerouting-pre-dnat"
	FilterOutputPreDNATChain     = "filter-output-pre-dnat"
	FilterInputChain             = "filter-input"
	FilterForwardChain           = "filter-forward"
	FilterOutputChain            = "filter-output"
	NATPreroutingChain           = "nat-prerouting"
	NATOutputChain               = "nat-output"
	NATPostroutingChain          = "nat-postrouting"

	ServicesChain       = "services"
	ServiceIPsMap       = "service-ips"
	ServiceNodePortsMap = "service-nodeports"
	NodePortIPsSet      = "nodeport-ips"
	ClusterIPsSet       = "cluster-ips"

	ServiceEndpointsCheckChain  = "service-endpoints-check"
	NodePortEndpointsCheckChain = "nodeport-endpoints-check"
	NoEndpointServicesMap       = "no-endpoint-services"
	NoEndpointNodePortsMap      = "no-endpoint-nodeports"
	RejectChain                 = "reject-chain"

	ClusterIPsCheckChain = "cluster-ips-check"

	FirewallIPsMap     = "firewall-ips"
	FirewallCheckChain = "firewall-check"

	MasqueradingChain     = "masquerading"
	HairpinConnectionsSet = "hairpin-connections"
)

// Prefixes of the per-service-port objects. The rest of a name is
// kube-proxy's hash-and-name base, so both proxies name a port's objects
// identically and either can take over the other's table.
const (
	ClusterPolicyPrefix = "service-"
	LocalPolicyPrefix   = "local-"
	ExternalPrefix      = "external-"
	EndpointPrefix      = "endpoint-"
	AffinityPrefix      = "affinity-"
	FirewallPrefix      = "firewall-"
)

// nameLengthMax is nft's limit on object names (knftables.NameLengthMax).
const nameLengthMax = 256

// baseLengthMax is what kube-proxy leaves for the base after the longest
// prefix (16 characters).
const baseLengthMax = nameLengthMax - 16

// hashAndTruncate is kube-proxy's: the first 8 base32 characters of
// sha256(name), a dash, then name, cut to baseLengthMax with "...".
func hashAndTruncate(name string) string {
	sum := sha256.Sum256([]byte(name))
	var enc [8]byte
	// 5 bytes encode to exactly 8 base32 characters.
	base32.StdEncoding.Encode(enc[:], sum[:5])
	out := string(enc[:]) + "-" + name
	if len(out) > baseLengthMax {
		out = out[:baseLengthMax-3] + "..."
	}
	return out
}

// portBase is the base of a port's chain names: "HASH-ns/name/proto/port".
func portBase(n servicemap.ServicePortName, proto string) string {
	return hashAndTruncate(n.Namespace + "/" + n.Name + "/" + proto + "/" + n.Port)
}

// endpointBase is the base of an endpoint's chain and affinity set names:
// "HASH-ns/name/proto/port__ip/port", an IPv6 address with dots for colons.
func endpointBase(n servicemap.ServicePortName, proto string, ep netip.AddrPort) string {
	ip := strings.ReplaceAll(ep.Addr().Unmap().String(), ":", ".")
	return hashAndTruncate(n.Namespace + "/" + n.Name + "/" + proto + "/" + n.Port + "__" + ip + "/" + strconv.Itoa(int(ep.Port())))
}

// IsPortChain says whether a chain is a per-service-port chain: only those
// have a "/" in their names.
func IsPortChain(name string) bool { return strings.Contains(name, "/") }

// IsAffinitySet says whether a set is an endpoint's affinity set.
func IsAffinitySet(name string) bool { return strings.HasPrefix(name, AffinityPrefix) }

// PortOf returns the "ns/name/proto/port" a per-port chain or set belongs
// to, so objects of one service port can be matched whatever their kind
// (their hashes differ). ok is false for other objects and for names cut
// at nft's length limit.
func PortOf(name string) (port string, ok bool) {
	for _, prefix := range []string{ClusterPolicyPrefix, LocalPolicyPrefix, ExternalPrefix, EndpointPrefix, AffinityPrefix, FirewallPrefix} {
		rest, found := strings.CutPrefix(name, prefix)
		if !found {
			continue
		}
		// "HASH8-" then the base.
		if len(rest) < 9 || rest[8] != '-' || strings.HasSuffix(rest, "...") {
			return "", false
		}
		base := rest[9:]
		if i := strings.Index(base, "__"); i >= 0 {
			base = base[:i]
		}
		return base, strings.Count(base, "/") == 3
	}
	return "", false
}

// endpointString is "ip:port" ("[ip]:port" for IPv6).
func endpointString(ep netip.AddrPort) string {
	return netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port()).String()
}
