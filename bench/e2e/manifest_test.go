package e2e

import (
	"fmt"
	"strings"
)

// Services-file pieces: each helper renders one YAML document; docs joins
// them into the file's stream.

// nodeDoc is the Node kproxy runs as (--hostname-override=node).
const nodeDoc = `apiVersion: v1
kind: Node
metadata: {name: node}
status: {addresses: [{type: InternalIP, address: ` + nodeIP + `}]}
`

// Endpoint conditions, as EndpointSlice flow-mapping contents.
const (
	readyCond       = "ready: true, serving: true, terminating: false"
	terminatingCond = "ready: false, serving: true, terminating: true"
	goneCond        = "ready: false, serving: false, terminating: true"
)

func docs(parts ...string) string { return strings.Join(parts, "---\n") }

// serviceDoc renders a Service in namespace default; spec and status are YAML
// flow mappings' contents (status may be empty).
func serviceDoc(name, spec, status string) string {
	s := fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: default}\nspec: {%s}\n", name, spec)
	if status != "" {
		s += fmt.Sprintf("status: {%s}\n", status)
	}
	return s
}

// httpService renders a ClusterIP service whose port "http" (80) targets
// nginx; extra is more spec contents, may be empty.
func httpService(name, clusterIP, extra string) string {
	spec := "clusterIP: " + clusterIP + ", ports: [{name: http, port: 80, targetPort: 8080}]"
	if extra != "" {
		spec += ", " + extra
	}
	return serviceDoc(name, spec, "")
}

// sliceDoc renders an IPv4 EndpointSlice of service svc; ports is the flow
// sequence's contents, endpoints are endpoint flow mappings' contents.
func sliceDoc(name, svc, ports string, endpoints ...string) string {
	return familySliceDoc("IPv4", name, svc, ports, endpoints...)
}

// familySliceDoc is sliceDoc for addressType family (IPv4, IPv6).
func familySliceDoc(family, name, svc, ports string, endpoints ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %s
  namespace: default
  labels: {kubernetes.io/service-name: %s}
addressType: %s
ports: [%s]
endpoints:
`, name, svc, family, ports)
	if len(endpoints) == 0 {
		b.WriteString("  []\n")
	}
	for _, ep := range endpoints {
		fmt.Fprintf(&b, "- {%s}\n", ep)
	}
	return b.String()
}

// endpoint renders an endpoint's contents: address, node name and, unless
// empty, conditions.
func endpoint(ip, nodeName, conditions string) string {
	s := fmt.Sprintf("addresses: [%s], nodeName: %s", ip, nodeName)
	if conditions != "" {
		s += ", conditions: {" + conditions + "}"
	}
	return s
}

// httpSlice is a slice for a service whose port "http" targets nginx.
func httpSlice(svc string, endpoints ...string) string {
	return sliceDoc(svc+"-1", svc, "{name: http, port: 8080, protocol: TCP}", endpoints...)
}

// remoteEndpoints renders every address as an endpoint on node "other".
func remoteEndpoints(ips []string, conditions string) []string {
	var eps []string
	for _, ip := range ips {
		eps = append(eps, endpoint(ip, "other", conditions))
	}
	return eps
}
