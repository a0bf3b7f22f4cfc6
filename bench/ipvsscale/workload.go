package ipvsscale

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/bench/benchtable"
	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// EndpointsPerPort is every service port's endpoint count, as the IPVS issue
// asks for.
const EndpointsPerPort = 10

// Address plan: VIPs are 198.18.<i/250>.<1+i%250>, endpoints cycle through
// 198.19.1.1–198.19.250.250 (198.19.0.0/24 holds the node), and the
// one-endpoint change swaps in addresses from 198.19.254.0/24, which no
// other endpoint uses.
const (
	hostsPerOctet = 250
	// MaxPorts is the most service ports the VIP plan has room for.
	MaxPorts = 256 * hostsPerOctet
	// endpointAddrs is how many distinct endpoint addresses the plan has.
	endpointAddrs = 250 * hostsPerOctet

	servicePort  = 80
	endpointPort = 8080
	nodeName     = "node-a"
)

// nodeIP is the node's address in the desired-state config.
func nodeIP() netip.Addr { return netip.AddrFrom4([4]byte{198, 19, 0, 1}) }

// Workload is Ports TCP ClusterIP service ports with Endpoints ready
// endpoints each, on other nodes.
type Workload struct {
	Ports, Endpoints int
}

// Validate rejects workloads the address plan cannot hold.
func (w Workload) Validate() error {
	switch {
	case w.Ports < 1 || w.Ports > MaxPorts:
		return fmt.Errorf("workload: %d service ports, want 1 to %d", w.Ports, MaxPorts)
	case w.Endpoints < 1 || w.Endpoints > endpointAddrs:
		return fmt.Errorf("workload: %d endpoints per port, want 1 to %d", w.Endpoints, endpointAddrs)
	}
	return nil
}

// String is "1,000 ports × 10 endpoints".
func (w Workload) String() string {
	return fmt.Sprintf("%s ports × %d endpoints", benchtable.Thousands(w.Ports), w.Endpoints)
}

// VIP is service port i's cluster IP.
func VIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(i / hostsPerOctet), byte(1 + i%hostsPerOctet)})
}

// endpointAddr is the k-th address of the endpoint cycle.
func endpointAddr(k int) netip.Addr {
	k %= endpointAddrs
	return netip.AddrFrom4([4]byte{198, 19, byte(1 + k/hostsPerOctet), byte(1 + k%hostsPerOctet)})
}

// ChangedEndpoint is the endpoint a change variant (1 or 2) puts in place
// of port 0's last endpoint.
func ChangedEndpoint(variant int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, 254, byte(variant)}), endpointPort)
}

// ChangedKey is the virtual server the one-endpoint change touches.
func ChangedKey() desired.Key {
	return desired.Key{Addr: VIP(0), Protocol: v1.ProtocolTCP, Port: servicePort}
}

// Snapshot is the workload as the service map would hand it over. Variant
// 0 is the base; variants 1 and 2 differ from it, and from each other, in
// port 0's last endpoint only (ChangedEndpoint).
func (w Workload) Snapshot(variant int) (*servicemap.Snapshot, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if variant < 0 || variant > 2 {
		return nil, fmt.Errorf("workload: variant %d, want 0, 1 or 2", variant)
	}
	ports := make([]*servicemap.ServicePort, 0, w.Ports)
	for i := range w.Ports {
		eps := make([]servicemap.Endpoint, 0, w.Endpoints)
		for j := range w.Endpoints {
			ap := netip.AddrPortFrom(endpointAddr(i*w.Endpoints+j), endpointPort)
			if i == 0 && j == w.Endpoints-1 && variant > 0 {
				ap = ChangedEndpoint(variant)
			}
			eps = append(eps, servicemap.Endpoint{Addr: ap.Addr(), Port: ap.Port(), Ready: true, Serving: true, NodeName: "node-b"})
		}
		ports = append(ports, &servicemap.ServicePort{
			Name: servicemap.ServicePortName{
				NamespacedName: types.NamespacedName{Namespace: "bench", Name: fmt.Sprintf("svc-%05d", i)},
				Port:           "http", Protocol: v1.ProtocolTCP,
			},
			ClusterIPs: []netip.Addr{VIP(i)},
			Port:       servicePort,
			Endpoints:  eps,
		})
	}
	return servicemap.NewSnapshot(1, &servicemap.NodeInfo{Name: nodeName}, ports...), nil
}

// Config is the node's IPv4 desired-state configuration.
func Config() desired.Config {
	return desired.Config{
		Family:        ipfamily.IPv4,
		MasqueradeBit: 14,
		LocalAddrs:    []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), nodeIP()},
		NodeIPs:       []netip.Addr{nodeIP()},
		Topology:      servicemap.Topology{NodeName: nodeName},
	}
}

// States are the desired states a sync run applies: the base, then the
// two change variants in turn.
type States struct {
	Base    *desired.State
	Changed [2]*desired.State
}

// BuildStates computes the workload's three desired states.
func (w Workload) BuildStates() (States, error) {
	var out States
	for variant, dst := range []**desired.State{&out.Base, &out.Changed[0], &out.Changed[1]} {
		snap, err := w.Snapshot(variant)
		if err != nil {
			return States{}, err
		}
		if *dst, err = desired.Build(Config(), snap); err != nil {
			return States{}, fmt.Errorf("desired state of %s (variant %d): %w", w, variant, err)
		}
	}
	return out, nil
}
