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
	// Config, when set, is a KubeProxyConfiguration given to both proxies
	// with --config instead of the common flags; {{kubeconfig}} and {{node}}
	// in it become the lab's kubeconfig path and the node name. (kube-proxy
	// v1.36 takes the nftables settings from a config file only: it has no
	// --nftables-* flags.)
	Config string `json:"config"`
	// Control, when set, adds a kube-proxy run with these flags instead of
	// Flags, whose tables must differ from kube-proxy's in both families:
	// a live check that the comparison sees a difference at all (that the
	// tables are read from the right namespaces, for one). Not with Config.
	Control *Control `json:"control"`
	// Node is the Node object both proxies run as.
	Node NodeSpec `json:"node"`
	// HostAddresses are the addresses (with prefix length) put on a dummy
	// interface in each proxy's namespace: --nodeport-addresses with CIDRs
	// selects among the node's local addresses.
	HostAddresses []string `json:"hostAddresses"`

	Services       []*v1.Service              `json:"-"`
	EndpointSlices []*discovery.EndpointSlice `json:"-"`

	// Then, when the file has a `kind: Then` document, are changes made
	// once the first tables are compared; the tables are compared again
	// after them (the proxies' partial syncs must end where kube-proxy's do).
	Then *Changes `json:"-"`
}

// Changes is the `kind: Then` document and the Service and EndpointSlice
// documents after it: each is created, or replaces the object of the same
// name; Delete lists objects to delete as "Service ns/name" or
// "EndpointSlice ns/name".
type Changes struct {
	Description    string                     `json:"description"`
	Delete         []string                   `json:"delete"`
	Services       []*v1.Service              `json:"-"`
	EndpointSlices []*discovery.EndpointSlice `json:"-"`
}

// Deleted says whether the changes delete the object.
func (c *Changes) Deleted(kind, namespace, name string) bool {
	return slices.Contains(c.Delete, kind+" "+namespace+"/"+name)
}

// AllServicesThen are the scenario's services after its changes.
func (s *Scenario) AllServicesThen() []*v1.Service {
	if s.Then == nil {
		return s.Services
	}
	var out []*v1.Service
	replaced := map[string]bool{}
	for _, svc := range s.Then.Services {
		replaced[svc.Namespace+"/"+svc.Name] = true
	}
	for _, svc := range s.Services {
		if !s.Then.Deleted("Service", svc.Namespace, svc.Name) && !replaced[svc.Namespace+"/"+svc.Name] {
			out = append(out, svc)
		}
	}
	return append(out, s.Then.Services...)
}

// Control is the control run's settings.
type Control struct {
	Flags []string `json:"flags"`
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
	if s.Control != nil && s.Config != "" {
		return nil, fmt.Errorf("control runs take flags, not a config file")
	}
	for _, a := range s.HostAddresses {
		if _, err := netip.ParsePrefix(a); err != nil {
			return nil, fmt.Errorf("hostAddresses: %w", err)
		}
	}
	decode := scheme.Codecs.UniversalDeserializer().Decode
	services, epSlices := &s.Services, &s.EndpointSlices
	for i, doc := range docs[1:] {
		var kind struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &kind); err == nil && kind.Kind == "Then" {
			if s.Then != nil {
				return nil, fmt.Errorf("document %d: a second Then", i+2)
			}
			var then struct {
				Kind string `json:"kind"`
				Changes
			}
			if err := yaml.UnmarshalStrict(doc, &then); err != nil {
				return nil, fmt.Errorf("document %d: %w", i+2, err)
			}
			for _, d := range then.Delete {
				if k, _, _ := strings.Cut(d, " "); k != "Service" && k != "EndpointSlice" || !strings.Contains(d, "/") {
					return nil, fmt.Errorf("document %d: delete %q: want \"Service ns/name\" or \"EndpointSlice ns/name\"", i+2, d)
				}
			}
			s.Then = &then.Changes
			services, epSlices = &s.Then.Services, &s.Then.EndpointSlices
			continue
		}
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
			*services = append(*services, o)
		case *discovery.EndpointSlice:
			if o.Namespace == "" {
				o.Namespace = "default"
			}
			*epSlices = append(*epSlices, o)
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

// ExpectedNames returns, per family ("ip", "ip6"), the "namespace/name" of
// the services a synced table must mention: every service with a cluster IP
// of that family and at least one port. Headless and ExternalName services
// are left out (neither proxy programs them).
func ExpectedNames(services []*v1.Service) map[string][]string {
	out := map[string][]string{}
	for _, svc := range services {
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

// HealthCheckNodePorts are the health-check node ports of the services
// (LoadBalancer with externalTrafficPolicy Local), which kube-proxy serves
// whether or not it has local endpoints.
func HealthCheckNodePorts(services []*v1.Service) []int {
	var out []int
	for _, svc := range services {
		if svc.Spec.HealthCheckNodePort != 0 {
			out = append(out, int(svc.Spec.HealthCheckNodePort))
		}
	}
	return out
}
