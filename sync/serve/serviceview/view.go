// Package serviceview is the /services page: per service port what the
// service map says (addresses, traffic policies, affinity, endpoints and
// their state) and what the mode programmed for it (mode.Describer), as
// JSON or as a text table. It is built on request from the snapshot in
// force, which is immutable, so building it never holds up a sync.
package serviceview

import (
	"net/netip"
	"strings"

	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Page is the JSON document /services serves.
type Page struct {
	Mode string `json:"mode"`
	Node string `json:"node,omitempty"`
	// Generation is the service map's snapshot the page shows, the last
	// the mode fully programmed.
	Generation   uint64        `json:"generation"`
	ServicePorts []ServicePort `json:"servicePorts"`
}

// ServicePort is one port of one Service.
type ServicePort struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// PortName is "" for a Service's single unnamed port.
	PortName string `json:"portName"`
	Protocol string `json:"protocol"`
	Port     uint16 `json:"port"`

	ClusterIPs  []string `json:"clusterIPs,omitempty"`
	NodePort    uint16   `json:"nodePort,omitempty"`
	ExternalIPs []string `json:"externalIPs,omitempty"`
	// HiddenExternalIPs are external IPs not programmed because the
	// AllowServiceExternalIPs feature gate is off.
	HiddenExternalIPs        []string `json:"hiddenExternalIPs,omitempty"`
	LoadBalancerIPs          []string `json:"loadBalancerIPs,omitempty"`
	LoadBalancerSourceRanges []string `json:"loadBalancerSourceRanges,omitempty"`
	HealthCheckNodePort      uint16   `json:"healthCheckNodePort,omitempty"`
	// InternalTrafficPolicy and ExternalTrafficPolicy are Cluster or
	// Local; the external one only for externally accessible ports.
	InternalTrafficPolicy string `json:"internalTrafficPolicy"`
	ExternalTrafficPolicy string `json:"externalTrafficPolicy,omitempty"`
	// SessionAffinity is None or ClientIP (with its timeout).
	SessionAffinity        string `json:"sessionAffinity"`
	AffinityTimeoutSeconds int64  `json:"affinityTimeoutSeconds,omitempty"`

	Endpoints  []Endpoint      `json:"endpoints"`
	Programmed mode.Programmed `json:"programmed"`
}

// Endpoint is one endpoint of a service port with its EndpointSlice
// conditions (API defaults applied) and topology.
type Endpoint struct {
	Address     string   `json:"address"`
	Ready       bool     `json:"ready"`
	Serving     bool     `json:"serving"`
	Terminating bool     `json:"terminating"`
	Local       bool     `json:"local"`
	Node        string   `json:"node,omitempty"`
	Zone        string   `json:"zone,omitempty"`
	ZoneHints   []string `json:"zoneHints,omitempty"`
	NodeHints   []string `json:"nodeHints,omitempty"`
}

// Filter selects service ports: by namespace, and by Service name within
// it. The zero Filter selects every port.
type Filter struct {
	Namespace, Name string
}

// ParseFilter reads "namespace" or "namespace/name".
func ParseFilter(s string) Filter {
	ns, name, _ := strings.Cut(s, "/")
	return Filter{Namespace: ns, Name: name}
}

func (f Filter) matches(n servicemap.ServicePortName) bool {
	return (f.Namespace == "" || f.Namespace == n.Namespace) && (f.Name == "" || f.Name == n.Name)
}

// Build makes the page of snap. programmed, when not nil, is the mode's
// reader (mode.Describer); snap may be nil (nothing synced yet).
func Build(m mode.Name, node string, snap *servicemap.Snapshot, programmed func(servicemap.ServicePortName) mode.Programmed, f Filter) Page {
	p := Page{Mode: string(m), Node: node, ServicePorts: []ServicePort{}}
	if snap == nil {
		return p
	}
	p.Generation = snap.Generation
	for name, sp := range snap.All() {
		if !f.matches(name) {
			continue
		}
		out := convert(sp)
		if programmed != nil {
			out.Programmed = programmed(name)
		}
		p.ServicePorts = append(p.ServicePorts, out)
	}
	return p
}

func convert(sp *servicemap.ServicePort) ServicePort {
	out := ServicePort{
		Namespace: sp.Name.Namespace, Name: sp.Name.Name, PortName: sp.Name.Port, Protocol: string(sp.Name.Protocol),
		Port: sp.Port, NodePort: sp.NodePort, HealthCheckNodePort: sp.HealthCheckNodePort,
		ClusterIPs: addrs(sp.ClusterIPs), ExternalIPs: addrs(sp.ExternalIPs), HiddenExternalIPs: addrs(sp.HiddenExternalIPs),
		LoadBalancerIPs:       addrs(sp.LoadBalancerIPs),
		InternalTrafficPolicy: policy(sp.InternalPolicyLocal),
		SessionAffinity:       "None",
		Endpoints:             make([]Endpoint, 0, len(sp.Endpoints)),
	}
	for _, r := range sp.LoadBalancerSourceRanges {
		out.LoadBalancerSourceRanges = append(out.LoadBalancerSourceRanges, r.String())
	}
	if sp.NodePort != 0 || len(sp.ExternalIPs) > 0 || len(sp.HiddenExternalIPs) > 0 || len(sp.LoadBalancerIPs) > 0 {
		out.ExternalTrafficPolicy = policy(sp.ExternalPolicyLocal)
	}
	if sp.AffinityTimeout > 0 {
		out.SessionAffinity = "ClientIP"
		out.AffinityTimeoutSeconds = int64(sp.AffinityTimeout.Seconds())
	}
	for _, ep := range sp.Endpoints {
		out.Endpoints = append(out.Endpoints, Endpoint{
			Address: ep.String(), Ready: ep.Ready, Serving: ep.Serving, Terminating: ep.Terminating, Local: ep.IsLocal,
			Node: ep.NodeName, Zone: ep.Zone, ZoneHints: ep.ZoneHints, NodeHints: ep.NodeHints,
		})
	}
	return out
}

func policy(local bool) string {
	if local {
		return "Local"
	}
	return "Cluster"
}

func addrs(in []netip.Addr) []string {
	if len(in) == 0 {
		return nil
	}
	out := make([]string, len(in))
	for i, a := range in {
		out[i] = a.String()
	}
	return out
}
