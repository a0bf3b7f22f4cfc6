package nftcompare

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// Scenario is one scenario file: a header document (kind: Scenario) and the
// Services and EndpointSlices both proxies see, as YAML documents separated
// by `---`. Services may carry a status (load-balancer ingress), which the
// test writes through the status subresource.
type Scenario struct {
	// Name is the file's base name without .yaml.
	Name string `json:"-"`
	// Description says what the scenario covers.
	Description string `json:"description"`
	// Flags are given to both proxies after the common ones (the node name,
	// kubeconfig, --proxy-mode=nftables, conntrack settings).
	Flags []string `json:"flags"`
	// Node is the Node object both proxies run as.
	Node NodeSpec `json:"node"`
	// HostAddresses are the addresses (with prefix length) put on a dummy
	// interface in each proxy's namespace: --nodeport-addresses with CIDRs
	// selects among the node's local addresses.
	HostAddresses []string `json:"hostAddresses"`

	Services       []*v1.Service              `json:"-"`
	EndpointSlices []*discovery.EndpointSlice `json:"-"`
}

// NodeSpec is what the scenario's Node object holds.
type NodeSpec struct {
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels"`
	Addresses []string          `json:"addresses"` // InternalIP status addresses
	PodCIDRs  []string          `json:"podCIDRs"`
}

// LoadScenarios reads every *.yaml file of dir, sorted by name.
func LoadScenarios(dir string) ([]*Scenario, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	var out []*Scenario
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		s, err := ParseScenario(strings.TrimSuffix(filepath.Base(p), ".yaml"), data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scenario files (*.yaml) in %s", dir)
	}
	return out, nil
}

// ParseScenario reads one scenario file's contents.
func ParseScenario(name string, data []byte) (*Scenario, error) {
	docs := splitDocuments(data)
	if len(docs) == 0 {
		return nil, fmt.Errorf("empty scenario")
	}
	var head struct {
		Kind string `json:"kind"`
		Scenario
	}
	if err := yaml.UnmarshalStrict(docs[0], &head); err != nil {
		return nil, fmt.Errorf("the header document: %w", err)
	}
	if head.Kind != "Scenario" {
		return nil, fmt.Errorf("the first document has kind %q, want Scenario", head.Kind)
	}
	s := head.Scenario
	s.Name = name
	if s.Node.Name == "" || len(s.Node.Addresses) == 0 {
		return nil, fmt.Errorf("the node needs a name and addresses (kube-proxy waits for them)")
	}
	for _, a := range s.HostAddresses {
		if _, err := netip.ParsePrefix(a); err != nil {
			return nil, fmt.Errorf("hostAddresses: %w", err)
		}
	}
	decode := scheme.Codecs.UniversalDeserializer().Decode
	for i, doc := range docs[1:] {
		obj, gvk, err := decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+2, err)
		}
		switch o := obj.(type) {
		case *v1.Service:
			if o.Namespace == "" {
				o.Namespace = "default"
			}
			// The API server wants the primary cluster IP in both fields.
			if o.Spec.ClusterIP == "" && len(o.Spec.ClusterIPs) > 0 {
				o.Spec.ClusterIP = o.Spec.ClusterIPs[0]
			}
			s.Services = append(s.Services, o)
		case *discovery.EndpointSlice:
			if o.Namespace == "" {
				o.Namespace = "default"
			}
			s.EndpointSlices = append(s.EndpointSlices, o)
		default:
			return nil, fmt.Errorf("document %d: %v is neither a Service nor an EndpointSlice", i+2, gvk)
		}
	}
	return &s, nil
}

// splitDocuments splits a YAML stream on `---` lines, dropping empty ones.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(d []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(d, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// ExpectedNames returns, per family ("ip", "ip6"), the "namespace/name" of the services whose chains a synced table must hold: every
// service with a cluster IP of that family and at least one port. Headless
// and ExternalName services are left out (neither proxy programs them).
func (s *Scenario) ExpectedNames() map[string][]string {
	out := map[string][]string{}
	for _, svc := range s.Services {
		if svc.Spec.Type == v1.ServiceTypeExternalName || len(svc.Spec.Ports) == 0 {
			continue
		}
		ips := svc.Spec.ClusterIPs
		if len(ips) == 0 && svc.Spec.ClusterIP != "" {
			ips = []string{svc.Spec.ClusterIP}
		}
		for _, ip := range ips {
			a, err := netip.ParseAddr(ip)
			if err != nil {
				continue // "None" or empty
			}
			fam := "ip"
			if a.Is6() {
				fam = "ip6"
			}
			out[fam] = append(out[fam], svc.Namespace+"/"+svc.Name)
		}
	}
	return out
}
