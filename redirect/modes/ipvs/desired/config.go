package desired

import (
	"errors"
	"fmt"
	"net/netip"

	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// DefaultScheduler is --ipvs-scheduler's default, round robin.
const DefaultScheduler = "rr"

// Config is what the desired state depends on besides the snapshot, for one
// family. Its fields mirror kube-proxy's flags and the node's addresses.
type Config struct {
	Family ipfamily.Family
	// Scheduler is --ipvs-scheduler; "" means DefaultScheduler. Any name
	// the kernel accepts works; the kernel refuses unknown ones.
	Scheduler string
	// LocalAddrs are this node's addresses of this family on every
	// interface but kube-ipvs0. NodePorts are served on them (but loopback
	// and IPv6 link-local ones) when NodePortAddresses is empty, and an
	// external or load-balancer IP among them is not bound to kube-ipvs0.
	LocalAddrs []netip.Addr
	// NodePortAddresses is --nodeport-addresses for this family; empty
	// means every local address. With it set, NodePorts are served on the
	// non-loopback LocalAddrs inside these prefixes ("primary" has been
	// resolved by the caller).
	NodePortAddresses []netip.Prefix
	// NodeIPs are the node's primary addresses of this family: a
	// load-balancer source range holding one lets the node reach the VIP.
	NodeIPs []netip.Addr
	// MasqueradeAll is --masquerade-all; MasqueradeBit --iptables-masquerade-bit.
	MasqueradeAll bool
	MasqueradeBit int
	// ClusterCIDRs is --cluster-cidr for this family; the first range tells
	// pod traffic from outside traffic.
	ClusterCIDRs []netip.Prefix
	// BridgeInterface and InterfaceNamePrefix are the other local-traffic
	// detectors (--detect-local-mode): pod traffic is what comes in on this
	// interface, or on interfaces with this prefix. At most one is set;
	// either replaces ClusterCIDRs. (NodeCIDR is ClusterCIDRs set to the
	// Node's pod CIDRs by the mode.)
	BridgeInterface, InterfaceNamePrefix string
	// RandomFully adds --random-fully to MASQUERADE (detected support).
	RandomFully bool
	// StrictARP is --ipvs-strict-arp: answer ARP only for addresses on the
	// receiving interface, so kube-ipvs0's VIPs are not announced.
	StrictARP bool
	// Topology is this node's name and zone, for topology hints.
	Topology servicemap.Topology
}

func (c Config) scheduler() string {
	if c.Scheduler == "" {
		return DefaultScheduler
	}
	return c.Scheduler
}

// Validate checks a Config; the error names every bad field.
func Validate(c Config) error {
	if c.Family != ipfamily.IPv4 && c.Family != ipfamily.IPv6 {
		return fmt.Errorf("unknown Family %q (want %s or %s)", c.Family, ipfamily.IPv4, ipfamily.IPv6)
	}
	var errs []error
	if c.MasqueradeBit < 0 || c.MasqueradeBit > 31 {
		errs = append(errs, fmt.Errorf("MasqueradeBit: %d is outside 0-31", c.MasqueradeBit))
	}
	errs = append(errs, checkAddrs("LocalAddrs", c.LocalAddrs, c.Family)...)
	errs = append(errs, checkAddrs("NodeIPs", c.NodeIPs, c.Family)...)
	errs = append(errs, checkPrefixes("NodePortAddresses", c.NodePortAddresses, c.Family)...)
	errs = append(errs, checkPrefixes("ClusterCIDRs", c.ClusterCIDRs, c.Family)...)
	if c.BridgeInterface != "" && c.InterfaceNamePrefix != "" {
		errs = append(errs, errors.New("BridgeInterface and InterfaceNamePrefix are two detectors; set one"))
	}
	for field, name := range map[string]string{"BridgeInterface": c.BridgeInterface, "InterfaceNamePrefix": c.InterfaceNamePrefix} {
		if len(name) >= 16 || kernelmode.NeedsQuotes(name) {
			errs = append(errs, fmt.Errorf("%s: %q cannot be an interface name in a rule", field, name))
		}
	}
	return errors.Join(errs...)
}

func checkAddrs(field string, as []netip.Addr, fam ipfamily.Family) []error {
	var errs []error
	for i, a := range as {
		if !a.IsValid() || ipfamily.Of(a) != fam {
			errs = append(errs, fmt.Errorf("%s[%d]: %v is not an %s address", field, i, a, fam))
		}
	}
	return errs
}

func checkPrefixes(field string, ps []netip.Prefix, fam ipfamily.Family) []error {
	var errs []error
	for i, p := range ps {
		if !p.IsValid() || ipfamily.Of(p.Addr()) != fam {
			errs = append(errs, fmt.Errorf("%s[%d]: %v is not an %s prefix", field, i, p, fam))
		}
	}
	return errs
}

// familyOf treats IPv4-mapped IPv6 addresses as IPv4, as the service map does.
