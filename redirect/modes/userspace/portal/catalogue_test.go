package portal

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/bench/testkit/catalogue"
	"kproxy.dev/kproxy/lb/balancer"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// catalogueNode is the userspace mode's view of testkit's node for the
// shared catalogue: its two addresses are the host IPs, NodePorts open on
// every local address. Change it here when Node changes.
func catalogueNode() Node {
	return Node{
		HostIPs:        testkit.Addrs(testkit.NodeIPv4, testkit.NodeIPv6),
		LocalAddresses: testkit.Addrs("127.0.0.1", testkit.NodeIPv4, "::1", testkit.NodeIPv6),
	}
}

// cataloguePortals is what the userspace mode hands Build for snap in fam:
// every port with sequential proxy ports (a listener per class), and each
// class's endpoint state as the real balancer sees it.
func cataloguePortals(t *testing.T, snap *servicemap.Snapshot, fam ipfamily.Family) []Portal {
	t.Helper()
	bal, err := balancer.New(balancer.Config{NodeName: testkit.NodeName})
	if err != nil {
		t.Fatal(err)
	}
	bal.Update(snap)
	bf := ipfamily.IPv4
	if fam == ipfamily.IPv6 {
		bf = ipfamily.IPv6
	}
	usable := func(sp *servicemap.ServicePort, c balancer.Class) EndpointState {
		picks := bal.Picker(balancer.Key{Port: sp.Name, Class: c, Family: bf}).Pick(netip.Addr{})
		return EndpointStateOf(sp, fam, len(picks) > 0)
	}
	portals := PortalsFrom(snap, sequentialProxyPorts(snap, false))
	for i, p := range portals {
		portals[i].Endpoints = ClassEndpoints{Internal: usable(p.Port, balancer.Internal), External: usable(p.Port, balancer.External)}
	}
	return portals
}

// TestCatalogue renders the portal rules and claims of every scenario of
// the shared catalogue, per family, into testdata/scenarios/<name>.golden;
// the iptables and IPVS modes render the same scenarios beside them. Ports
// Build cannot program are recorded with its error.
func TestCatalogue(t *testing.T) {
	catalogue.RenderEach(t, func(t *testing.T, snap *servicemap.Snapshot, fam ipfamily.Family) string {
		var sb strings.Builder
		fmt.Fprintf(&sb, "# %s restore payload\n", fam)
		rs, err := Build(fam, catalogueNode(), cataloguePortals(t, snap, fam))
		if err != nil {
			fmt.Fprintf(&sb, "error: %v\n", err)
		}
		if rs == nil {
			return sb.String()
		}
		sb.Write(Payload(rs, nil))
		fmt.Fprintf(&sb, "# %s claims\n", fam)
		for _, c := range rs.Claims {
			fmt.Fprintf(&sb, "%s\n", c)
		}
		return sb.String()
	})
}
