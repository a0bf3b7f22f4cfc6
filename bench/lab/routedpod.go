package lab

import (
	"fmt"
	"net/netip"
)

// AddRoutedPod adds a pod wired as point-to-point pod networks wire them
// (CNI's ptp plugin, Calico): a namespace of its own behind a veth whose
// node side holds gateway as a /32 and a host route to addr, with no subnet
// shared with the node. Such a pod is on none of the node's link prefixes:
// only the node's routes tell it from another node's pod. It goes away with
// the topology.
func (topo *Topology) AddRoutedPod(name string, addr, gateway netip.Addr) (*Host, error) {
	h := &Host{Name: name, Netns: topo.prefix + name, IPv4: addr, topo: topo}
	veth := "veth-" + name
	if len(veth) > 15 {
		return nil, fmt.Errorf("pod name %q makes the link name %q longer than 15 bytes", name, veth)
	}
	var ns, node, pod batch
	ns.add("netns add %s", h.Netns)
	node.add("link add %s type veth peer name eth0 netns %s", veth, h.Netns)
	node.add("addr add %s/32 dev %s", gateway, veth)
	node.add("link set %s up", veth)
	node.add("route add %s/32 dev %s scope host", addr, veth)
	pod.add("link set lo up")
	pod.add("addr add %s/32 dev eth0", addr)
	pod.add("link set eth0 up")
	pod.add("route add %s dev eth0 scope link", gateway)
	pod.add("route add default via %s dev eth0", gateway)
	for _, step := range []struct {
		b  *batch
		on *Host
	}{{&ns, topo.Node}, {&node, topo.Node}, {&pod, h}} {
		if err := step.b.run(step.on); err != nil {
			return nil, fmt.Errorf("adding the routed pod %s: %w", name, err)
		}
	}
	return h, nil
}
