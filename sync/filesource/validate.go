package filesource

import (
	"fmt"
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// With no API server in the loop, this file does the part of its job that
// matters to a proxy: reject what the API would reject and fill in the
// defaults it would have filled in, so that kproxy sees the same objects it
// would have seen from a cluster.

const (
	maxAffinityTimeout    = 86400 // seconds, the API's limit
	maxSliceEndpoints     = 1000
	maxEndpointAddresses  = 100
	maxSlicePorts         = 100
	minPort, maxPort      = 1, 65535
	defaultAffinitySecond = 10800
	// The API server's default --service-node-port-range. kube-proxy has
	// no setting for it, and neither has kproxy: node ports outside it
	// could hide the node's own services (sshd on 22).
	minNodePort, maxNodePort = 30000, 32767
)

// validateName checks metadata.name with one of the apimachinery name
// validators, and defaults metadata.namespace for namespaced objects.
func validateMeta(meta *metav1.ObjectMeta, namespaced bool, nameCheck func(string) []string) errorList {
	var errs errorList
	if meta.Name == "" {
		errs = append(errs, fieldErr(field.NewPath("metadata", "name"), "is required"))
	} else if msgs := nameCheck(meta.Name); len(msgs) > 0 {
		errs = append(errs, fieldErr(field.NewPath("metadata", "name"), "%q is not a valid name: %s", meta.Name, strings.Join(msgs, "; ")))
	}
	// Label values and annotations are bounded as in the API: kproxy
	// reads and logs some of them (the service-name label).
	errs = append(errs, apiFieldErrs(metav1validation.ValidateLabels(meta.Labels, field.NewPath("metadata", "labels")))...)
	errs = append(errs, apiFieldErrs(apivalidation.ValidateAnnotations(meta.Annotations, field.NewPath("metadata", "annotations")))...)
	if !namespaced {
		meta.Namespace = "" // as kubectl does for cluster-scoped objects
		return errs
	}
	if meta.Namespace == "" {
		meta.Namespace = v1.NamespaceDefault
	} else if msgs := validation.IsDNS1123Label(meta.Namespace); len(msgs) > 0 {
		errs = append(errs, fieldErr(field.NewPath("metadata", "namespace"), "%q is not a valid namespace: %s", meta.Namespace, strings.Join(msgs, "; ")))
	}
	return errs
}

// parseIP accepts what the API accepts as an IP: no zones, no leading zeros.
func parseIP(s string) (netip.Addr, error) {
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, err
	}
	if addr.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("zones are not allowed")
	}
	return addr, nil
}

func ipErr(path *field.Path, value string) error {
	return fieldErr(path, "%q is not a valid IP address", value)
}

// specialIP rejects an address no service may send traffic to or take over,
// as the API server's ValidateEndpointIP does for endpoints and external
// IPs: unspecified, loopback, link-local. It rejects every multicast address
// where the API server rejects only link-local multicast (its own comment
// calls allowing the rest probably a bug): nothing proxies to a group.
// kproxy applies it to cluster IPs and load-balancer addresses too, which
// the API server bounds by its service CIDRs and the cloud provider.
//
// It rejects IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) first, as the API
// server does in every address field of a Service and an EndpointSlice:
// kproxy, like kube-proxy, would program one as the IPv4 address, which is
// not what the file says, and other software reads it as IPv6.
func specialIP(path *field.Path, value string, addr netip.Addr) error {
	if err := mappedIP(path, value, addr); err != nil {
		return err
	}
	var why string
	switch {
	case addr.IsUnspecified():
		why = "may not be unspecified (0.0.0.0, ::)"
	case addr.IsLoopback():
		why = "may not be in the loopback range (127.0.0.0/8, ::1/128)"
	case addr.IsLinkLocalUnicast():
		why = "may not be in the link-local range (169.254.0.0/16, fe80::/10)"
	case addr.IsMulticast():
		why = "may not be a multicast address (224.0.0.0/4, ff00::/8)"
	default:
		return nil
	}
	return fieldErr(path, "%q %s", value, why)
}

// mappedIP rejects an IPv4-mapped IPv6 address, naming the IPv4 address to
// write instead.
func mappedIP(path *field.Path, value string, addr netip.Addr) error {
	if addr.Is4In6() {
		return fieldErr(path, "%q must not be an IPv4-mapped IPv6 address (write %s)", value, addr.Unmap())
	}
	return nil
}

// validIP parses an address field and rejects special addresses.
func validIP(path *field.Path, value string) error {
	addr, err := parseIP(value)
	if err != nil {
		return ipErr(path, value)
	}
	return specialIP(path, value, addr)
}

func family(addr netip.Addr) v1.IPFamily {
	if addr.Is4() || addr.Is4In6() {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}

func validPort(path *field.Path, port int32) error {
	if port < minPort || port > maxPort {
		return fieldErr(path, "%d is not a valid port (1-65535)", port)
	}
	return nil
}

// defaultProtocol applies the API default (TCP) and checks the value.
func defaultProtocol(path *field.Path, p *v1.Protocol) error {
	switch *p {
	case "":
		*p = v1.ProtocolTCP
	case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
	default:
		return fieldErr(path, "%q is not a valid protocol (TCP, UDP or SCTP)", *p)
	}
	return nil
}

// defaultAndValidateService applies the API's defaults to svc and returns
// every problem found.
func defaultAndValidateService(svc *v1.Service) errorList {
	errs := validateMeta(&svc.ObjectMeta, true, validation.IsDNS1035Label)
	spec := &svc.Spec

	switch spec.Type {
	case "":
		spec.Type = v1.ServiceTypeClusterIP
	case v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer, v1.ServiceTypeExternalName:
	default:
		errs = append(errs, fieldErr(field.NewPath("spec", "type"), "%q is not a valid type (ClusterIP, NodePort, LoadBalancer or ExternalName)", spec.Type))
	}
	externalName := spec.Type == v1.ServiceTypeExternalName
	externallyAccessible := spec.Type == v1.ServiceTypeNodePort || spec.Type == v1.ServiceTypeLoadBalancer

	if externalName {
		errs = append(errs, validateExternalName(spec)...)
	} else {
		errs = append(errs, defaultAndValidateClusterIPs(spec)...)
	}
	headless := spec.ClusterIP == v1.ClusterIPNone

	for i, ip := range spec.ExternalIPs {
		if err := validIP(field.NewPath("spec", "externalIPs").Index(i), ip); err != nil {
			errs = append(errs, err)
		}
	}
	if spec.LoadBalancerIP != "" {
		if err := validIP(field.NewPath("spec", "loadBalancerIP"), spec.LoadBalancerIP); err != nil {
			errs = append(errs, err)
		}
	}
	for i, r := range spec.LoadBalancerSourceRanges {
		if err := validSourceRange(field.NewPath("spec", "loadBalancerSourceRanges").Index(i), r); err != nil {
			errs = append(errs, err)
		}
	}

	if len(spec.Ports) == 0 && !externalName && !headless {
		errs = append(errs, fieldErr(field.NewPath("spec", "ports"), "at least one port is required"))
	}
	errs = append(errs, defaultAndValidateServicePorts(spec.Ports, externallyAccessible)...)
	errs = append(errs, defaultAndValidateAffinity(spec)...)

	if !externalName && spec.InternalTrafficPolicy == nil {
		cluster := v1.ServiceInternalTrafficPolicyCluster
		spec.InternalTrafficPolicy = &cluster
	}
	if spec.InternalTrafficPolicy != nil {
		errs = append(errs, checkTrafficPolicy(field.NewPath("spec", "internalTrafficPolicy"), string(*spec.InternalTrafficPolicy))...)
	}
	if externallyAccessible && spec.ExternalTrafficPolicy == "" {
		spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
	}
	errs = append(errs, checkTrafficPolicy(field.NewPath("spec", "externalTrafficPolicy"), string(spec.ExternalTrafficPolicy))...)
	if hc := spec.HealthCheckNodePort; hc != 0 {
		hcPath := field.NewPath("spec", "healthCheckNodePort")
		if hc < minNodePort || hc > maxNodePort {
			errs = append(errs, nodePortRangeErr(hcPath, hc))
		}
		// The API server allocates it from the node ports, after the ports'.
		for i, p := range spec.Ports {
			if p.NodePort == hc {
				errs = append(errs, fieldErr(hcPath, "%d is already used by spec.ports[%d].nodePort", hc, i))
				break
			}
		}
	}
	if spec.Type == v1.ServiceTypeLoadBalancer && spec.AllocateLoadBalancerNodePorts == nil {
		allocate := true
		spec.AllocateLoadBalancerNodePorts = &allocate
	}

	ingressPath := field.NewPath("status", "loadBalancer", "ingress")
	for i := range svc.Status.LoadBalancer.Ingress {
		ing := &svc.Status.LoadBalancer.Ingress[i]
		if ing.IP != "" {
			if err := validIP(ingressPath.Index(i).Child("ip"), ing.IP); err != nil {
				errs = append(errs, err)
			}
			if ing.IPMode == nil {
				vip := v1.LoadBalancerIPModeVIP
				ing.IPMode = &vip
			}
		}
		if ing.IPMode != nil && *ing.IPMode != v1.LoadBalancerIPModeVIP && *ing.IPMode != v1.LoadBalancerIPModeProxy {
			errs = append(errs, fieldErr(ingressPath.Index(i).Child("ipMode"), "%q is not valid (VIP or Proxy)", *ing.IPMode))
		}
	}
	return errs
}

// validSourceRange checks a loadBalancerSourceRanges entry as the API
// server does: surrounding spaces are allowed, an IPv4-mapped prefix and
// bits set past the prefix length are not.
func validSourceRange(path *field.Path, value string) error {
	prefix, err := netip.ParsePrefix(strings.TrimSpace(value))
	switch {
	case err != nil:
		return fieldErr(path, "%q is not a valid CIDR", value)
	case prefix.Addr().Is4In6():
		return fieldErr(path, "%q must not have an IPv4-mapped IPv6 address", value)
	case prefix != prefix.Masked():
		return fieldErr(path, "%q must not have bits set beyond the prefix length (write %s)", value, prefix.Masked())
	}
	return nil
}

func validateExternalName(spec *v1.ServiceSpec) errorList {
	var errs errorList
	if spec.ExternalName == "" {
		errs = append(errs, fieldErr(field.NewPath("spec", "externalName"), "is required for an ExternalName service"))
	} else if msgs := validation.IsDNS1123Subdomain(strings.TrimSuffix(spec.ExternalName, ".")); len(msgs) > 0 {
		errs = append(errs, fieldErr(field.NewPath("spec", "externalName"), "%q is not a valid DNS name: %s", spec.ExternalName, strings.Join(msgs, "; ")))
	}
	if spec.ClusterIP != "" || len(spec.ClusterIPs) > 0 {
		errs = append(errs, fieldErr(field.NewPath("spec", "clusterIP"), "may not be set for an ExternalName service"))
	}
	return errs
}

// defaultAndValidateClusterIPs checks clusterIP, clusterIPs and ipFamilies
// against each other and fills in whichever the API would derive.
func defaultAndValidateClusterIPs(spec *v1.ServiceSpec) errorList {
	var errs errorList
	ipsPath := field.NewPath("spec", "clusterIPs")
	if spec.ClusterIP == "" && len(spec.ClusterIPs) > 0 {
		spec.ClusterIP = spec.ClusterIPs[0]
	}
	// When clusterIPs is derived from clusterIP, errors name what the user wrote.
	derived := len(spec.ClusterIPs) == 0
	switch {
	case spec.ClusterIP == "":
		return append(errs, fieldErr(field.NewPath("spec", "clusterIP"),
			"spec.clusterIP is required in a services file: there is no API server to allocate one; use None for headless"))
	case len(spec.ClusterIPs) == 0:
		spec.ClusterIPs = []string{spec.ClusterIP}
	case spec.ClusterIPs[0] != spec.ClusterIP:
		errs = append(errs, fieldErr(ipsPath.Index(0), "%q must equal spec.clusterIP %q", spec.ClusterIPs[0], spec.ClusterIP))
	}

	var families []v1.IPFamily
	if spec.ClusterIP == v1.ClusterIPNone {
		if len(spec.ClusterIPs) != 1 {
			errs = append(errs, fieldErr(ipsPath, "must hold only None for a headless service"))
		}
	} else {
		if len(spec.ClusterIPs) > 2 {
			errs = append(errs, fieldErr(ipsPath, "may hold at most two addresses, one per IP family"))
		}
		for i, s := range spec.ClusterIPs {
			path := ipsPath.Index(i)
			if derived {
				path = field.NewPath("spec", "clusterIP")
			}
			addr, err := parseIP(s)
			if err != nil {
				errs = append(errs, ipErr(path, s))
				continue
			}
			if err := specialIP(path, s, addr); err != nil {
				errs = append(errs, err)
			}
			families = append(families, family(addr))
		}
		if len(families) == 2 && families[0] == families[1] {
			errs = append(errs, fieldErr(ipsPath, "the two addresses must be of different IP families"))
		}
	}

	famPath := field.NewPath("spec", "ipFamilies")
	if len(spec.IPFamilies) == 0 {
		spec.IPFamilies = families
	} else {
		for i, f := range spec.IPFamilies {
			switch {
			case f != v1.IPv4Protocol && f != v1.IPv6Protocol:
				errs = append(errs, fieldErr(famPath.Index(i), "%q is not a valid IP family (IPv4 or IPv6)", f))
			case i < len(families) && f != families[i]:
				errs = append(errs, fieldErr(famPath.Index(i), "%s does not match spec.clusterIPs[%d] %q", f, i, spec.ClusterIPs[i]))
			case i > 0 && f == spec.IPFamilies[0]:
				errs = append(errs, fieldErr(famPath.Index(i), "%s is listed twice", f))
			}
		}
		if len(spec.IPFamilies) > 2 {
			errs = append(errs, fieldErr(famPath, "may hold at most two families"))
		}
	}

	policyPath := field.NewPath("spec", "ipFamilyPolicy")
	if spec.IPFamilyPolicy == nil {
		policy := v1.IPFamilyPolicySingleStack
		if len(spec.IPFamilies) > 1 {
			policy = v1.IPFamilyPolicyRequireDualStack
		}
		spec.IPFamilyPolicy = &policy
	}
	switch *spec.IPFamilyPolicy {
	case v1.IPFamilyPolicySingleStack:
		if len(spec.IPFamilies) > 1 {
			errs = append(errs, fieldErr(policyPath, "SingleStack does not allow two IP families"))
		}
	case v1.IPFamilyPolicyPreferDualStack, v1.IPFamilyPolicyRequireDualStack:
	default:
		errs = append(errs, fieldErr(policyPath, "%q is not valid (SingleStack, PreferDualStack or RequireDualStack)", *spec.IPFamilyPolicy))
	}
	return errs
}

func defaultAndValidateServicePorts(ports []v1.ServicePort, externallyAccessible bool) errorList {
	var errs errorList
	type nameProto struct {
		name  string
		proto v1.Protocol
	}
	type portProto struct {
		port  int32
		proto v1.Protocol
	}
	names := map[nameProto]int{}
	numbers := map[portProto]int{}
	nodePorts := map[portProto]int{}
	for i := range ports {
		p := &ports[i]
		path := field.NewPath("spec", "ports").Index(i)
		if err := defaultProtocol(path.Child("protocol"), &p.Protocol); err != nil {
			errs = append(errs, err)
		}
		switch {
		case p.Name == "" && len(ports) > 1:
			errs = append(errs, fieldErr(path.Child("name"), "is required when a service has more than one port"))
		case p.Name != "":
			if msgs := validation.IsDNS1123Label(p.Name); len(msgs) > 0 {
				errs = append(errs, fieldErr(path.Child("name"), "%q is not a valid port name: %s", p.Name, strings.Join(msgs, "; ")))
			}
			if j, dup := names[nameProto{p.Name, p.Protocol}]; dup {
				errs = append(errs, fieldErr(path.Child("name"), "%q is already used by spec.ports[%d] with protocol %s", p.Name, j, p.Protocol))
			} else {
				names[nameProto{p.Name, p.Protocol}] = i
			}
		}
		if err := validPort(path.Child("port"), p.Port); err != nil {
			errs = append(errs, err)
		} else if j, dup := numbers[portProto{p.Port, p.Protocol}]; dup {
			errs = append(errs, fieldErr(path.Child("port"), "%d/%s is already used by spec.ports[%d]", p.Port, p.Protocol, j))
		} else {
			numbers[portProto{p.Port, p.Protocol}] = i
		}
		switch {
		case p.NodePort == 0:
		case !externallyAccessible:
			errs = append(errs, fieldErr(path.Child("nodePort"), "may only be set on NodePort and LoadBalancer services"))
		case p.NodePort < minNodePort || p.NodePort > maxNodePort:
			errs = append(errs, nodePortRangeErr(path.Child("nodePort"), p.NodePort))
		default:
			if j, dup := nodePorts[portProto{p.NodePort, p.Protocol}]; dup {
				errs = append(errs, fieldErr(path.Child("nodePort"), "%d/%s is already used by spec.ports[%d].nodePort", p.NodePort, p.Protocol, j))
			} else {
				nodePorts[portProto{p.NodePort, p.Protocol}] = i
			}
		}
		errs = append(errs, defaultTargetPort(path.Child("targetPort"), p)...)
	}
	return errs
}

func nodePortRangeErr(path *field.Path, port int32) error {
	return fieldErr(path, "%d is not in the node port range %d-%d (the API server's default; kproxy has no setting for it)",
		port, minNodePort, maxNodePort)
}

// defaultTargetPort sets an unset targetPort to the service port, as the API does.
func defaultTargetPort(path *field.Path, p *v1.ServicePort) errorList {
	tp := p.TargetPort
	switch {
	case tp.Type == intstr.Int && tp.IntVal == 0:
		p.TargetPort = intstr.FromInt32(p.Port)
	case tp.Type == intstr.Int:
		if err := validPort(path, tp.IntVal); err != nil {
			return errorList{err}
		}
	case tp.Type == intstr.String && tp.StrVal == "":
		p.TargetPort = intstr.FromInt32(p.Port)
	case tp.Type == intstr.String:
		if msgs := validation.IsValidPortName(tp.StrVal); len(msgs) > 0 {
			return errorList{fieldErr(path, "%q is not a valid port name: %s", tp.StrVal, strings.Join(msgs, "; "))}
		}
	default:
		return errorList{fieldErr(path, "must be a port number or a port name")}
	}
	return nil
}

func defaultAndValidateAffinity(spec *v1.ServiceSpec) errorList {
	path := field.NewPath("spec", "sessionAffinity")
	switch spec.SessionAffinity {
	case "":
		spec.SessionAffinity = v1.ServiceAffinityNone
	case v1.ServiceAffinityNone, v1.ServiceAffinityClientIP:
	default:
		return errorList{fieldErr(path, "%q is not valid (None or ClientIP)", spec.SessionAffinity)}
	}
	cfgPath := field.NewPath("spec", "sessionAffinityConfig")
	if spec.SessionAffinity == v1.ServiceAffinityNone {
		if spec.SessionAffinityConfig != nil {
			return errorList{fieldErr(cfgPath, "may only be set when sessionAffinity is ClientIP")}
		}
		return nil
	}
	if spec.SessionAffinityConfig == nil {
		spec.SessionAffinityConfig = &v1.SessionAffinityConfig{}
	}
	if spec.SessionAffinityConfig.ClientIP == nil {
		spec.SessionAffinityConfig.ClientIP = &v1.ClientIPConfig{}
	}
	cip := spec.SessionAffinityConfig.ClientIP
	if cip.TimeoutSeconds == nil {
		timeout := int32(defaultAffinitySecond)
		cip.TimeoutSeconds = &timeout
	}
	if t := *cip.TimeoutSeconds; t < 1 || t > maxAffinityTimeout {
		return errorList{fieldErr(cfgPath.Child("clientIP", "timeoutSeconds"), "%d is not valid (1-86400)", t)}
	}
	return nil
}

func checkTrafficPolicy(path *field.Path, p string) errorList {
	switch p {
	case "", "Cluster", "Local":
		return nil
	}
	return errorList{fieldErr(path, "%q is not valid (Cluster or Local)", p)}
}

// defaultAndValidateEndpointSlice applies the API's defaults to slice and
// returns every problem found.
func defaultAndValidateEndpointSlice(slice *discovery.EndpointSlice) errorList {
	errs := validateMeta(&slice.ObjectMeta, true, validation.IsDNS1123Subdomain)
	if slice.Labels[discovery.LabelServiceName] == "" {
		errs = append(errs, fieldErr(field.NewPath("metadata", "labels"),
			"EndpointSlice %s/%s has no %s label; kproxy cannot tell which Service it belongs to",
			slice.Namespace, slice.Name, discovery.LabelServiceName))
	}

	addrType := slice.AddressType
	switch addrType {
	case discovery.AddressTypeIPv4, discovery.AddressTypeIPv6, discovery.AddressTypeFQDN:
	case "":
		errs = append(errs, fieldErr(field.NewPath("addressType"), "is required (IPv4, IPv6 or FQDN)"))
	default:
		errs = append(errs, fieldErr(field.NewPath("addressType"), "%q is not valid (IPv4, IPv6 or FQDN)", addrType))
	}

	epsPath := field.NewPath("endpoints")
	if len(slice.Endpoints) > maxSliceEndpoints {
		errs = append(errs, fieldErr(epsPath, "may hold at most %d endpoints", maxSliceEndpoints))
	}
	for i, ep := range slice.Endpoints {
		addrsPath := epsPath.Index(i).Child("addresses")
		switch {
		case len(ep.Addresses) == 0:
			errs = append(errs, fieldErr(addrsPath, "at least one address is required"))
		case len(ep.Addresses) > maxEndpointAddresses:
			errs = append(errs, fieldErr(addrsPath, "may hold at most %d addresses", maxEndpointAddresses))
		}
		for j, a := range ep.Addresses {
			if err := validateEndpointAddress(addrsPath.Index(j), addrType, a); err != nil {
				errs = append(errs, err)
			}
		}
		if ep.NodeName != nil && *ep.NodeName != "" {
			if msgs := validation.IsDNS1123Subdomain(*ep.NodeName); len(msgs) > 0 {
				errs = append(errs, fieldErr(epsPath.Index(i).Child("nodeName"), "%q is not a valid node name: %s", *ep.NodeName, strings.Join(msgs, "; ")))
			}
		}
	}

	portsPath := field.NewPath("ports")
	if len(slice.Ports) > maxSlicePorts {
		errs = append(errs, fieldErr(portsPath, "may hold at most %d ports", maxSlicePorts))
	}
	names := map[string]int{}
	for i := range slice.Ports {
		p := &slice.Ports[i]
		path := portsPath.Index(i)
		if p.Protocol == nil {
			tcp := v1.ProtocolTCP
			p.Protocol = &tcp
		}
		if err := defaultProtocol(path.Child("protocol"), p.Protocol); err != nil {
			errs = append(errs, err)
		}
		if p.Port != nil {
			if err := validPort(path.Child("port"), *p.Port); err != nil {
				errs = append(errs, err)
			}
		}
		if p.Name == nil {
			empty := ""
			p.Name = &empty
		}
		if *p.Name != "" {
			if msgs := validation.IsDNS1123Label(*p.Name); len(msgs) > 0 {
				errs = append(errs, fieldErr(path.Child("name"), "%q is not a valid port name: %s", *p.Name, strings.Join(msgs, "; ")))
			}
		}
		if j, dup := names[*p.Name]; dup {
			errs = append(errs, fieldErr(path.Child("name"), "%q is already used by ports[%d]", *p.Name, j))
		} else {
			names[*p.Name] = i
		}
	}
	return errs
}

func validateEndpointAddress(path *field.Path, addrType discovery.AddressType, a string) error {
	switch addrType {
	case discovery.AddressTypeFQDN:
		if msgs := validation.IsDNS1123Subdomain(a); len(msgs) > 0 {
			return fieldErr(path, "%q is not a valid FQDN: %s", a, strings.Join(msgs, "; "))
		}
	case discovery.AddressTypeIPv4, discovery.AddressTypeIPv6:
		addr, err := parseIP(a)
		if err != nil {
			return ipErr(path, a)
		}
		if err := mappedIP(path, a, addr); err != nil {
			return err
		}
		switch {
		case addrType == discovery.AddressTypeIPv4 && !addr.Is4():
			return fieldErr(path, "%q is not an IPv4 address (addressType is IPv4)", a)
		case addrType == discovery.AddressTypeIPv6 && !addr.Is6():
			return fieldErr(path, "%q is not an IPv6 address (addressType is IPv6)", a)
		}
		return specialIP(path, a, addr)
	}
	return nil
}

// defaultAndValidateNode checks the few Node fields kproxy reads.
func defaultAndValidateNode(node *v1.Node) errorList {
	errs := validateMeta(&node.ObjectMeta, false, validation.IsDNS1123Subdomain)
	for i, a := range node.Status.Addresses {
		if a.Type == v1.NodeInternalIP || a.Type == v1.NodeExternalIP {
			if _, err := parseIP(a.Address); err != nil {
				errs = append(errs, ipErr(field.NewPath("status", "addresses").Index(i).Child("address"), a.Address))
			}
		}
	}
	return errs
}
