package filesource

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"kproxy.dev/kproxy/sync/servicemap/sinktest"
)

// contents renders what the sink holds, one line per object, sorted:
// services with their first port, slices with their addresses.
func contents(sink *sinktest.Recorder) []string {
	st := sink.State()
	var out []string
	for key, svc := range st.Services {
		out = append(out, fmt.Sprintf("Service %s %s:%d", key, svc.Spec.ClusterIP, svc.Spec.Ports[0].Port))
	}
	for key, s := range st.Slices {
		var addrs []string
		for _, ep := range s.Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
		out = append(out, fmt.Sprintf("EndpointSlice %s %s", key, strings.Join(addrs, ",")))
	}
	if st.Node != nil {
		out = append(out, "Node "+st.Node.Name)
	}
	slices.Sort(out)
	return out
}

// Builders for the real API objects the tests write as manifests.

func service(ns, name, ip string, port int32) *v1.Service {
	return &v1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			ClusterIP: ip,
			Ports:     []v1.ServicePort{{Name: "http", Port: port}},
		},
	}
}

func endpointSlice(ns, name, serviceName string, addrs ...string) *discovery.EndpointSlice {
	port := int32(8080)
	s := &discovery.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{discovery.LabelServiceName: serviceName}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr("http"), Port: &port}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: []string{a}})
	}
	return s
}

func node(name, ip string) *v1.Node {
	return &v1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status:     v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}}},
	}
}

func ptr[T any](v T) *T { return &v }

// yamlDocs renders objects as one multi-document YAML manifest.
func yamlDocs(t testing.TB, objs ...runtime.Object) string {
	t.Helper()
	var docs []string
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	return strings.Join(docs, "---\n")
}

// jsonList renders objects as one JSON `kind: List`.
func jsonList(t *testing.T, objs ...runtime.Object) string {
	t.Helper()
	list := &v1.List{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}}
	for _, o := range objs {
		list.Items = append(list.Items, runtime.RawExtension{Object: o})
	}
	b, err := yaml.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(j)
}

func writeFile(t testing.TB, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceFile saves like an editor: write a temporary file, rename it over.
func replaceFile(t *testing.T, dir, name, content string) {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func removeFile(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}
