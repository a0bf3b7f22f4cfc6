package desired

import (
	"cmp"
	"net/netip"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// Set types, as ipset names them.
const (
	HashIP        = "hash:ip"
	HashIPPort    = "hash:ip,port"
	HashIPPortIP  = "hash:ip,port,ip"
	HashIPPortNet = "hash:ip,port,net"
	BitmapPort    = "bitmap:port"
)

// The sets' IPv4 names, which are kube-proxy's (IPv6 sets get "KUBE-6-").
const (
	SetLoopBack          = "KUBE-LOOP-BACK"
	SetClusterIP         = "KUBE-CLUSTER-IP"
	SetExternalIP        = "KUBE-EXTERNAL-IP"
	SetExternalIPLocal   = "KUBE-EXTERNAL-IP-LOCAL"
	SetLoadBalancer      = "KUBE-LOAD-BALANCER"
	SetLoadBalancerFW    = "KUBE-LOAD-BALANCER-FW"
	SetLoadBalancerLocal = "KUBE-LOAD-BALANCER-LOCAL"
	SetLBSourceIP        = "KUBE-LOAD-BALANCER-SOURCE-IP"
	SetLBSourceCIDR      = "KUBE-LOAD-BALANCER-SOURCE-CIDR"
	SetNodePortTCP       = "KUBE-NODE-PORT-TCP"
	SetNodePortLocalTCP  = "KUBE-NODE-PORT-LOCAL-TCP"
	SetNodePortUDP       = "KUBE-NODE-PORT-UDP"
	SetNodePortLocalUDP  = "KUBE-NODE-PORT-LOCAL-UDP"
	SetNodePortSCTP      = "KUBE-NODE-PORT-SCTP-HASH"
	SetNodePortLocalSCTP = "KUBE-NODE-PORT-LOCAL-SCTP-HASH"
	SetHealthCheckNP     = "KUBE-HEALTH-CHECK-NODE-PORT"
	SetIPVSAddrs         = "KUBE-IPVS-IPS"
)

// maxSetName is the kernel's limit on an ipset name (IPSET_MAXNAMELEN - 1).
const maxSetName = 31

// SetSpec describes one ipset. The comments are kube-proxy's: they appear
// in iptables rule comments, which must read the same as kube-proxy's.
type SetSpec struct {
	// Base is the IPv4 name; Name the family's actual name.
	Base, Name string
	Type       string
	Family     ipfamily.Family
	Comment    string
}

// setSpecs lists the sets in the order kube-proxy declares them.
func setSpecs(fam ipfamily.Family) []SetSpec {
	specs := []SetSpec{
		{Base: SetLoopBack, Type: HashIPPortIP, Comment: "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"},
		{Base: SetClusterIP, Type: HashIPPort, Comment: "Kubernetes service cluster ip + port for masquerade purpose"},
		{Base: SetExternalIP, Type: HashIPPort, Comment: "Kubernetes service external ip + port for masquerade and filter purpose"},
		{Base: SetExternalIPLocal, Type: HashIPPort, Comment: "Kubernetes service external ip + port with externalTrafficPolicy=local"},
		{Base: SetLoadBalancer, Type: HashIPPort, Comment: "Kubernetes service lb portal"},
		{Base: SetLoadBalancerFW, Type: HashIPPort, Comment: "Kubernetes service load balancer ip + port for load balancer with sourceRange"},
		{Base: SetLoadBalancerLocal, Type: HashIPPort, Comment: "Kubernetes service load balancer ip + port with externalTrafficPolicy=local"},
		{Base: SetLBSourceIP, Type: HashIPPortIP, Comment: "Kubernetes service load balancer ip + port + source IP for packet filter purpose"},
		{Base: SetLBSourceCIDR, Type: HashIPPortNet, Comment: "Kubernetes service load balancer ip + port + source cidr for packet filter purpose"},
		{Base: SetNodePortTCP, Type: BitmapPort, Comment: "Kubernetes nodeport TCP port for masquerade purpose"},
		{Base: SetNodePortLocalTCP, Type: BitmapPort, Comment: "Kubernetes nodeport TCP port with externalTrafficPolicy=local"},
		{Base: SetNodePortUDP, Type: BitmapPort, Comment: "Kubernetes nodeport UDP port for masquerade purpose"},
		{Base: SetNodePortLocalUDP, Type: BitmapPort, Comment: "Kubernetes nodeport UDP port with externalTrafficPolicy=local"},
		{Base: SetNodePortSCTP, Type: HashIPPort, Comment: "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'"},
		{Base: SetNodePortLocalSCTP, Type: HashIPPort, Comment: "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'"},
		{Base: SetHealthCheckNP, Type: BitmapPort, Comment: "Kubernetes health check node port"},
		{Base: SetIPVSAddrs, Type: HashIP, Comment: "Addresses bound to kube-ipvs0, refused on ports that are not service ports"},
	}
	for i := range specs {
		specs[i].Family = fam
		specs[i].Name = SetName(specs[i].Base, fam)
	}
	return specs
}

// SetSpecs returns every set the mode owns for fam, in kube-proxy's order.
func SetSpecs(fam ipfamily.Family) []SetSpec { return setSpecs(fam) }

// SetName is a set's name in fam: IPv6 sets are "KUBE-6-...", cut to the
// kernel's 31 characters, so both families' sets can coexist.
func SetName(base string, fam ipfamily.Family) string {
	if fam != ipfamily.IPv6 || !strings.HasPrefix(base, "KUBE-") {
		return base
	}
	name := "KUBE-6-" + strings.TrimPrefix(base, "KUBE-")
	if len(name) > maxSetName {
		name = name[:maxSetName]
	}
	return name
}

// Entry is one set member; which fields count depends on the set type.
type Entry struct {
	IP       netip.Addr   // every type but bitmap:port
	Protocol v1.Protocol  // the ",port" types
	Port     uint16       // the ",port" types and bitmap:port
	IP2      netip.Addr   // hash:ip,port,ip
	Net      netip.Prefix // hash:ip,port,net
}

// String renders the entry the way "ipset save" does:
// "198.18.0.10,tcp:80", "…,tcp:80,198.19.1.12", "…,tcp:443,203.0.113.0/25",
// "30080" (bitmap:port) or "198.18.0.10" (hash:ip).
func (e Entry) String() string {
	if !e.IP.IsValid() {
		return strconv.Itoa(int(e.Port))
	}
	s := e.IP.String()
	if e.Protocol == "" {
		return s
	}
	s += "," + strings.ToLower(string(e.Protocol)) + ":" + strconv.Itoa(int(e.Port))
	switch {
	case e.IP2.IsValid():
		s += "," + e.IP2.String()
	case e.Net.IsValid():
		s += "," + e.Net.String()
	}
	return s
}

// Compare orders entries by address, protocol, port, then the third part.
func (e Entry) Compare(o Entry) int {
	if c := e.IP.Compare(o.IP); c != 0 {
		return c
	}
	if c := cmp.Compare(e.Protocol, o.Protocol); c != 0 {
		return c
	}
	if c := cmp.Compare(e.Port, o.Port); c != 0 {
		return c
	}
	if c := e.IP2.Compare(o.IP2); c != 0 {
		return c
	}
	if c := e.Net.Addr().Compare(o.Net.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(e.Net.Bits(), o.Net.Bits())
}

// Set is one ipset with the members it should hold, sorted.
type Set struct {
	Spec    SetSpec
	Members []Entry
}
