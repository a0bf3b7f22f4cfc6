package servicemap

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// LabelServiceProxyName marks Services and EndpointSlices handled by some
// other proxy; kube-proxy's informers exclude them, whatever the value.
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// SkipServiceReason says why kube-proxy would not program svc, or "" if it
// would. It is exported so sources and validators can explain the decision.
func SkipServiceReason(svc *v1.Service) string {
	switch {
	case svc == nil:
		return "nil service"
	case hasLabel(svc.Labels, LabelServiceProxyName):
		return "labelled " + LabelServiceProxyName
	case hasLabel(svc.Labels, v1.IsHeadlessService):
		return "labelled " + v1.IsHeadlessService
	case svc.Spec.Type == v1.ServiceTypeExternalName:
		return "type ExternalName"
	case svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == v1.ClusterIPNone:
		return "headless (no cluster IP)"
	}
	return ""
}

func hasLabel(labels map[string]string, key string) bool {
	_, ok := labels[key]
	return ok
}

// ServicePortsOf converts a Service into its service ports, without
// endpoints, exactly as the map interprets it. It returns nil for a service
// kube-proxy skips (see SkipServiceReason). Bad external IPs, ingress IPs and
// source ranges are skipped with a warning rather than failing the service.
// The returned ports share read-only slices with each other.
func ServicePortsOf(svc *v1.Service) []*ServicePort {
	if reason := SkipServiceReason(svc); reason != "" {
		if svc != nil {
			klog.V(4).InfoS("Skipping service", "service", klog.KObj(svc), "reason", reason)
		}
		return nil
	}
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	shared := ServicePort{
		ClusterIPs:               clusterIPsOf(svc),
		ExternalIPs:              parseIPList(svc, "spec.externalIPs", svc.Spec.ExternalIPs),
		LoadBalancerIPs:          loadBalancerVIPs(svc),
		LoadBalancerSourceRanges: sourceRangesOf(svc),
		AffinityTimeout:          affinityTimeout(svc),
		InternalPolicyLocal:      svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal,
		ExternalPolicyLocal:      externalPolicyLocal(svc),
	}
	if len(shared.ClusterIPs) == 0 {
		klog.InfoS("Warning: skipping service whose cluster IPs do not parse", "service", klog.KObj(svc),
			"clusterIP", svc.Spec.ClusterIP, "clusterIPs", svc.Spec.ClusterIPs)
		return nil
	}
	// Only a LoadBalancer with external policy Local gets a health check
	// node port, as in kube-proxy (apiservice.NeedsHealthCheck).
	if svc.Spec.Type == v1.ServiceTypeLoadBalancer && shared.ExternalPolicyLocal {
		if p, ok := portNumber(svc.Spec.HealthCheckNodePort); ok && p != 0 {
			shared.HealthCheckNodePort = p
		} else {
			klog.InfoS("Warning: service needs a health check node port but has none", "service", klog.KObj(svc),
				"healthCheckNodePort", svc.Spec.HealthCheckNodePort)
		}
	}

	ports := make([]*ServicePort, 0, len(svc.Spec.Ports))
	seen := make(map[ServicePortName]bool, len(svc.Spec.Ports))
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		name := ServicePortName{NamespacedName: key, Port: sp.Name, Protocol: sp.Protocol}
		if name.Protocol == "" {
			name.Protocol = v1.ProtocolTCP // the API default
		}
		port, okPort := portNumber(sp.Port)
		nodePort, okNode := portNumber(sp.NodePort)
		if !okPort || port == 0 || !okNode {
			klog.InfoS("Warning: skipping service port with an invalid number", "servicePort", name.String(),
				"port", sp.Port, "nodePort", sp.NodePort)
			continue
		}
		if seen[name] {
			klog.InfoS("Warning: skipping duplicate service port", "servicePort", name.String())
			continue
		}
		seen[name] = true
		p := shared
		p.Name, p.Port, p.NodePort = name, port, nodePort
		ports = append(ports, &p)
	}
	return ports
}

// portNumber converts an API port number, refusing values a port cannot hold.
func portNumber(n int32) (uint16, bool) {
	if n < 0 || n > 65535 {
		return 0, false
	}
	return uint16(n), true
}

// clusterIPsOf returns at most one cluster IP per family, primary first.
func clusterIPsOf(svc *v1.Service) []netip.Addr {
	raw, field := svc.Spec.ClusterIPs, "spec.clusterIPs"
	if len(raw) == 0 {
		raw, field = []string{svc.Spec.ClusterIP}, "spec.clusterIP"
	}
	var out []netip.Addr
	for i, s := range raw {
		ip, ok := parseIPSloppy(s)
		if !ok {
			klog.InfoS("Warning: ignoring unparseable cluster IP", "service", klog.KObj(svc), "ip", s)
			continue
		}
		warnIfIPv4Mapped("service", klog.KObj(svc), indexed(field, i, len(svc.Spec.ClusterIPs) > 0), s)
		if len(out) == 1 && out[0].Is4() == ip.Is4() {
			continue // a second IP of the same family is not a dual-stack IP
		}
		out = append(out, ip)
		if len(out) == 2 {
			break
		}
	}
	return out
}

func parseIPList(svc *v1.Service, field string, raw []string) []netip.Addr {
	var out []netip.Addr
	for i, s := range raw {
		ip, ok := parseIPSloppy(s)
		if !ok {
			klog.InfoS("Warning: ignoring unparseable IP", "service", klog.KObj(svc), "field", field, "ip", s)
			continue
		}
		warnIfIPv4Mapped("service", klog.KObj(svc), indexed(field, i, true), s)
		out = append(out, ip)
	}
	return out
}

// loadBalancerVIPs keeps ingress IPs in VIP mode; Proxy-mode load balancers
// deliver to the node themselves, so kube-proxy must not capture their IPs.
func loadBalancerVIPs(svc *v1.Service) []netip.Addr {
	var out []netip.Addr
	for i, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" || (ing.IPMode != nil && *ing.IPMode != v1.LoadBalancerIPModeVIP) {
			continue
		}
		ip, ok := parseIPSloppy(ing.IP)
		if !ok {
			klog.InfoS("Warning: ignoring unparseable load balancer ingress IP", "service", klog.KObj(svc), "ip", ing.IP)
			continue
		}
		warnIfIPv4Mapped("service", klog.KObj(svc), fmt.Sprintf("status.loadBalancer.ingress[%d].ip", i), ing.IP)
		out = append(out, ip)
	}
	return out
}

// sourceRangesOf parses loadBalancerSourceRanges; validation lets whitespace
// through, so it is trimmed, and ranges are masked to their network as
// net.ParseCIDR would.
func sourceRangesOf(svc *v1.Service) []netip.Prefix {
	var out []netip.Prefix
	for i, raw := range svc.Spec.LoadBalancerSourceRanges {
		s := strings.TrimSpace(raw)
		pfx, ok := parseCIDRSloppy(s)
		if !ok {
			klog.InfoS("Warning: ignoring unparseable loadBalancerSourceRange", "service", klog.KObj(svc), "range", raw)
			continue
		}
		warnIfIPv4Mapped("service", klog.KObj(svc), indexed("spec.loadBalancerSourceRanges", i, true), s)
		out = append(out, pfx)
	}
	return out
}

func affinityTimeout(svc *v1.Service) time.Duration {
	if svc.Spec.SessionAffinity != v1.ServiceAffinityClientIP {
		return 0
	}
	if cfg := svc.Spec.SessionAffinityConfig; cfg != nil && cfg.ClientIP != nil && cfg.ClientIP.TimeoutSeconds != nil &&
		*cfg.ClientIP.TimeoutSeconds > 0 {
		return time.Duration(*cfg.ClientIP.TimeoutSeconds) * time.Second
	}
	return DefaultAffinityTimeout
}

// externalPolicyLocal follows apiservice.ExternalPolicyLocal: the policy only
// matters for a service reachable from outside the cluster.
func externalPolicyLocal(svc *v1.Service) bool {
	if svc.Spec.ExternalTrafficPolicy != v1.ServiceExternalTrafficPolicyLocal {
		return false
	}
	switch svc.Spec.Type {
	case v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer:
		return true
	case v1.ServiceTypeClusterIP, "":
		return len(svc.Spec.ExternalIPs) > 0
	}
	return false
}

// parseIPSloppy parses an IP the way Kubernetes' ParseIPSloppy does: IPv4
// octets may carry leading zeros (read as decimal), which older API servers
// accepted. IPv4-mapped IPv6 addresses are treated as IPv4.
func parseIPSloppy(s string) (netip.Addr, bool) {
	if ip, err := netip.ParseAddr(s); err == nil {
		if ip.Zone() != "" {
			return netip.Addr{}, false
		}
		return ip.Unmap(), true
	}
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return netip.Addr{}, false
	}
	var b [4]byte
	for i, p := range parts {
		if p == "" || len(p) > 3 {
			return netip.Addr{}, false
		}
		n, err := strconv.ParseUint(p, 10, 8)
		if err != nil {
			return netip.Addr{}, false
		}
		b[i] = byte(n)
	}
	return netip.AddrFrom4(b), true
}

// warnIfIPv4Mapped logs that an object's field holds an IPv4-mapped IPv6
// address (::ffff:a.b.c.d, or a CIDR of one). The API server refuses them
// now (StrictIPCIDRValidation); an older one, or one with that gate off,
// accepted them as IPv4 (a cluster IP so written is allocated from the IPv4
// range), and kube-proxy reads them as IPv4. The map does too, so as not to
// drop what the cluster allocated, but never silently: the address is
// programmed as an IPv4 address the object does not spell.
func warnIfIPv4Mapped(kind string, obj klog.ObjectRef, field, value string) {
	addr, _, _ := strings.Cut(value, "/")
	if ip, err := netip.ParseAddr(addr); err != nil || !ip.Is4In6() {
		return
	}
	klog.InfoS("Warning: an IPv4-mapped IPv6 address, which the API server now refuses, is read as IPv4", kind, obj,
		"field", field, "value", value)
}

// indexed is field with [i] appended when it is a list.
func indexed(field string, i int, list bool) string {
	if !list {
		return field
	}
	return field + "[" + strconv.Itoa(i) + "]"
}

// parseCIDRSloppy parses a CIDR as Kubernetes' ParseCIDRSloppy does, with
// parseIPSloppy's addresses. A prefix of an IPv4-mapped address
// (::ffff:198.19.0.0/120) is the IPv4 prefix it covers (198.19.0.0/24), as
// net.IPNet matches IPv4 addresses against it in kube-proxy.
func parseCIDRSloppy(s string) (netip.Prefix, bool) {
	addr, bits, found := strings.Cut(s, "/")
	if !found {
		return netip.Prefix{}, false
	}
	ip, ok := parseIPSloppy(addr)
	if !ok {
		return netip.Prefix{}, false
	}
	maxBits := ip.BitLen()
	if parsed, err := netip.ParseAddr(addr); err == nil && parsed.Is4In6() {
		maxBits = 128
	}
	n, err := strconv.Atoi(bits)
	if err != nil || n < 0 || n > maxBits || strings.HasPrefix(bits, "+") {
		return netip.Prefix{}, false
	}
	n = max(n-(maxBits-ip.BitLen()), 0)
	return netip.PrefixFrom(ip, n).Masked(), true
}

// sliceEntry is the part of an EndpointSlice the map needs, parsed once when
// the slice arrives. It is immutable once stored.
type sliceEntry struct {
	service     types.NamespacedName
	name        string
	ports       []slicePort
	triggerTime time.Time // zero when the annotation is absent or bad
}

// slicePort is one port of a slice with the slice's endpoints resolved to
// it, sorted and de-duplicated. When a service port is served by a single
// slice port (the usual case) snapshots share this list as is.
type slicePort struct {
	name      string
	protocol  v1.Protocol
	endpoints []Endpoint
}

// SkipEndpointSliceReason says why the map ignores slice, or "" if it uses it.
func SkipEndpointSliceReason(slice *discovery.EndpointSlice) string {
	switch {
	case slice == nil:
		return "nil slice"
	case hasLabel(slice.Labels, LabelServiceProxyName):
		return "labelled " + LabelServiceProxyName
	case hasLabel(slice.Labels, v1.IsHeadlessService):
		return "labelled " + v1.IsHeadlessService
	case slice.AddressType != discovery.AddressTypeIPv4 && slice.AddressType != discovery.AddressTypeIPv6:
		return "address type " + string(slice.AddressType)
	case slice.Labels[discovery.LabelServiceName] == "":
		return "no " + discovery.LabelServiceName + " label"
	}
	return ""
}

// parseSlice returns nil for a slice the map ignores. nodeName decides IsLocal.
func parseSlice(slice *discovery.EndpointSlice, nodeName string) *sliceEntry {
	if reason := SkipEndpointSliceReason(slice); reason != "" {
		if slice != nil {
			klog.V(4).InfoS("Ignoring EndpointSlice", "endpointSlice", klog.KObj(slice), "reason", reason)
		}
		return nil
	}
	e := &sliceEntry{
		service: types.NamespacedName{Namespace: slice.Namespace, Name: slice.Labels[discovery.LabelServiceName]},
		name:    slice.Name,
	}
	if s, ok := slice.Annotations[v1.EndpointsLastChangeTriggerTime]; ok {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			e.triggerTime = t
		}
	}
	base := slicesEndpoints(slice, nodeName)
	for _, p := range slice.Ports {
		if p.Name == nil || p.Port == nil || p.Protocol == nil {
			klog.V(2).InfoS("Ignoring EndpointSlice port without name, number or protocol", "endpointSlice", klog.KObj(slice))
			continue
		}
		n, ok := portNumber(*p.Port)
		if !ok || n == 0 {
			klog.V(2).InfoS("Ignoring invalid EndpointSlice port", "endpointSlice", klog.KObj(slice), "port", *p.Port)
			continue
		}
		e.ports = append(e.ports, slicePort{name: *p.Name, protocol: *p.Protocol, endpoints: resolvedEndpoints(base, n)})
	}
	return e
}

// resolveEndpoints returns base with each endpoint's port set to port,
// sorted and de-duplicated; nil when empty.
func resolvedEndpoints(base []Endpoint, port uint16) []Endpoint {
	if len(base) == 0 {
		return nil
	}
	eps := slices.Clone(base)
	for i := range eps {
		eps[i].Port = port
	}
	return sortAndDedup(eps)
}

// slicesEndpoints parses a slice's endpoints, with Port left zero.
func slicesEndpoints(slice *discovery.EndpointSlice, nodeName string) []Endpoint {
	base := make([]Endpoint, 0, len(slice.Endpoints))
	for i := range slice.Endpoints {
		ep := &slice.Endpoints[i]
		if len(ep.Addresses) == 0 {
			klog.V(2).InfoS("Ignoring endpoint without addresses", "endpointSlice", klog.KObj(slice))
			continue
		}
		ip, ok := parseIPSloppy(ep.Addresses[0])
		if !ok {
			klog.InfoS("Warning: ignoring endpoint with an unparseable address", "endpointSlice", klog.KObj(slice),
				"address", ep.Addresses[0])
			continue
		}
		warnIfIPv4Mapped("endpointSlice", klog.KObj(slice), fmt.Sprintf("endpoints[%d].addresses[0]", i), ep.Addresses[0])
		out := Endpoint{
			Addr:        ip,
			Ready:       ep.Conditions.Ready == nil || *ep.Conditions.Ready,
			Serving:     ep.Conditions.Serving == nil || *ep.Conditions.Serving,
			Terminating: ep.Conditions.Terminating != nil && *ep.Conditions.Terminating,
		}
		if ep.NodeName != nil {
			out.NodeName = *ep.NodeName
			out.IsLocal = nodeName != "" && out.NodeName == nodeName
		}
		if ep.Zone != nil {
			out.Zone = *ep.Zone
		}
		if ep.Hints != nil {
			for _, z := range ep.Hints.ForZones {
				out.ZoneHints = append(out.ZoneHints, z.Name)
			}
			for _, n := range ep.Hints.ForNodes {
				out.NodeHints = append(out.NodeHints, n.Name)
			}
		}
		base = append(base, out)
	}
	return base
}
