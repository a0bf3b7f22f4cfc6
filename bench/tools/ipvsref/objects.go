package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	corev1defaults "k8s.io/kubernetes/pkg/apis/core/v1"
	discoverydefaults "k8s.io/kubernetes/pkg/apis/discovery/v1"
	"k8s.io/kubernetes/pkg/proxy/apis"
	netutils "k8s.io/utils/net"
)

// objects are the API objects of one services file, defaulted as the API
// server would have stored them.
type objects struct {
	nodes    []*v1.Node
	services []*v1.Service
	slices   []*discovery.EndpointSlice
}

// readObjects reads a services file: YAML documents (or JSON), each a Node,
// Service, EndpointSlice or a List of them.
func readObjects(path string) (*objects, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the services file: %w", err)
	}
	objs, err := decodeObjects(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objs, nil
}

// decodeObjects decodes and defaults every document of data.
func decodeObjects(data []byte) (*objects, error) {
	objs := &objects{}
	reader := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for doc := 1; ; doc++ {
		var raw runtime.RawExtension
		err := reader.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if len(bytes.TrimSpace(raw.Raw)) == 0 || string(bytes.TrimSpace(raw.Raw)) == "null" {
			continue // an empty document, as between two separators
		}
		if err := objs.add(raw.Raw); err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
	}
}

// add decodes one JSON document and files it by kind.
func (o *objects) add(doc []byte) error {
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
	if err != nil {
		return fmt.Errorf("decoding: %w", err)
	}
	switch obj := obj.(type) {
	case *v1.List:
		for i, item := range obj.Items {
			if err := o.add(item.Raw); err != nil {
				return fmt.Errorf("list item %d: %w", i, err)
			}
		}
	case *v1.Node:
		o.nodes = append(o.nodes, obj)
	case *v1.Service:
		if obj.Namespace == "" {
			obj.Namespace = v1.NamespaceDefault
		}
		corev1defaults.SetObjectDefaults_Service(obj)
		deriveClusterIPs(&obj.Spec)
		o.services = append(o.services, obj)
	case *discovery.EndpointSlice:
		if obj.Namespace == "" {
			obj.Namespace = v1.NamespaceDefault
		}
		discoverydefaults.SetObjectDefaults_EndpointSlice(obj)
		o.slices = append(o.slices, obj)
	default:
		return fmt.Errorf("unsupported kind %T (want Node, Service, EndpointSlice or List)", obj)
	}
	return nil
}

// deriveClusterIPs fills in clusterIPs and ipFamilies from clusterIP, as
// the API server stores a Service whose manifest gives only clusterIP (the
// proxier reads the per-family address from them).
func deriveClusterIPs(spec *v1.ServiceSpec) {
	if spec.ClusterIP == "" && len(spec.ClusterIPs) > 0 {
		spec.ClusterIP = spec.ClusterIPs[0]
	}
	if spec.ClusterIP == "" || spec.ClusterIP == v1.ClusterIPNone {
		return
	}
	if len(spec.ClusterIPs) == 0 {
		spec.ClusterIPs = []string{spec.ClusterIP}
	}
	if len(spec.IPFamilies) == 0 {
		for _, ip := range spec.ClusterIPs {
			family := v1.IPv4Protocol
			if netutils.IsIPv6String(ip) {
				family = v1.IPv6Protocol
			}
			spec.IPFamilies = append(spec.IPFamilies, family)
		}
	}
}

// proxied keeps what kube-proxy's informers would deliver: no headless
// services or their slices, nothing another service proxy claims.
func (o *objects) proxied() *objects {
	out := &objects{nodes: o.nodes}
	for _, svc := range o.services {
		if _, other := svc.Labels[apis.LabelServiceProxyName]; other || svc.Spec.ClusterIP == v1.ClusterIPNone {
			continue
		}
		out.services = append(out.services, svc)
	}
	for _, slice := range o.slices {
		if _, headless := slice.Labels[v1.IsHeadlessService]; headless {
			continue
		}
		out.slices = append(out.slices, slice)
	}
	return out
}

// node returns the Node object named name, or nil.
func (o *objects) node(name string) *v1.Node {
	for _, n := range o.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}
