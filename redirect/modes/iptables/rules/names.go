package rules

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strings"

	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Chain-name prefixes of the chains one service port owns. The suffix is a
// hash, so kproxy and kube-proxy name a service's chains identically and
// either can take over the other's rules.
const (
	ServicePrefix      = "KUBE-SVC-" // Cluster traffic policy: all usable endpoints
	LocalServicePrefix = "KUBE-SVL-" // Local traffic policy: this node's endpoints
	ExternalPrefix     = "KUBE-EXT-" // external destinations (NodePort, externalIPs, LoadBalancer IPs)
	FirewallPrefix     = "KUBE-FW-"  // LoadBalancer source ranges
	EndpointPrefix     = "KUBE-SEP-" // one endpoint: hairpin masquerade and DNAT
)

// hashLen is how many base32 characters of the hash a chain name keeps:
// iptables limits chain names to 28 characters.
const hashLen = 16

// hashedBytes is how many hash bytes encode to exactly hashLen base32
// characters (5 bits each), so no more is encoded than is kept.
const hashedBytes = hashLen * 5 / 8

// ServiceChain returns the port's KUBE-SVC- chain name.
func ServiceChain(n servicemap.ServicePortName) string { return ServicePrefix + portHash(n) }

// LocalServiceChain returns the port's KUBE-SVL- chain name.
func LocalServiceChain(n servicemap.ServicePortName) string {
	return LocalServicePrefix + portHash(n)
}

// ExternalChain returns the port's KUBE-EXT- chain name.
func ExternalChain(n servicemap.ServicePortName) string { return ExternalPrefix + portHash(n) }

// FirewallChain returns the port's KUBE-FW- chain name.
func FirewallChain(n servicemap.ServicePortName) string { return FirewallPrefix + portHash(n) }

// EndpointChain returns the KUBE-SEP- chain name of one endpoint of the port.
func EndpointChain(n servicemap.ServicePortName, ep netip.AddrPort) string {
	var h [hashLen]byte
	endpointHash(&h, kernelmode.PortName(n), lowerProtocol(n), ep)
	return EndpointPrefix + string(h[:])
}

// IsPortChain says whether a chain name is one of the per-service-port
// chains (KUBE-SVC-, KUBE-SVL-, KUBE-EXT-, KUBE-FW-, KUBE-SEP-): the chains
// a full sync deletes when no service port claims them any more.
func IsPortChain(name string) bool {
	for _, p := range [...]string{ServicePrefix, LocalServicePrefix, ExternalPrefix, FirewallPrefix, EndpointPrefix} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// lowerProtocol is the protocol as kube-proxy hashes it and as iptables
// names it ("tcp", "udp", "sctp").
func lowerProtocol(n servicemap.ServicePortName) string { return strings.ToLower(string(n.Protocol)) }

// portHash is kube-proxy's hash of a service port: base32 of
// sha256(port name + lower-case protocol), cut to 16 characters.
func portHash(n servicemap.ServicePortName) string {
	var h [hashLen]byte
	portHashInto(&h, kernelmode.PortName(n), lowerProtocol(n))
	return string(h[:])
}

func portHashInto(dst *[hashLen]byte, portName, proto string) {
	var stack [128]byte
	in := append(stack[:0], portName...)
	hashInto(dst, append(in, proto...))
}

// endpointHash writes kube-proxy's hash of one endpoint of a port:
// sha256(port name + protocol + "ip:port"), the endpoint written as
// net.JoinHostPort does ("[ip]:port" for IPv6).
func endpointHash(dst *[hashLen]byte, portName, proto string, ep netip.AddrPort) {
	var stack [128]byte
	in := append(stack[:0], portName...)
	in = append(in, proto...)
	in = kernelmode.AppendEndpoint(in, ep)
	hashInto(dst, in)
}

func hashInto(dst *[hashLen]byte, in []byte) {
	sum := sha256.Sum256(in)
	base32.StdEncoding.Encode(dst[:], sum[:hashedBytes])
}
