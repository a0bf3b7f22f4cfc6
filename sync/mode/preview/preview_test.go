package preview

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/servicemap"
)

func svc(name, ip string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: v1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip}, Type: v1.ServiceTypeNodePort,
			Ports: []v1.ServicePort{{Name: "http", Port: 80, NodePort: 30080, Protocol: v1.ProtocolTCP}}},
	}
}

func slice(svcName string, ready bool, ips ...string) *discovery.EndpointSlice {
	name, port, proto := "http", int32(8080), v1.ProtocolTCP
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svcName + "-1", Namespace: "ns",
			Labels: map[string]string{discovery.LabelServiceName: svcName}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for _, ip := range ips {
		node := "node-a"
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: []string{ip}, NodeName: &node,
			Conditions: discovery.EndpointConditions{Ready: &ready}})
	}
	return s
}

// TestSyncLogsWhatItWouldProgram drives the preview with real snapshots: a
// full sync logs every port, a partial one only the changed and removed ones.
func TestSyncLogsWhatItWouldProgram(t *testing.T) {
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	m := New(mode.Userspace, logger)
	if m.Name() != mode.Userspace {
		t.Fatalf("Name() = %q", m.Name())
	}
	tr := servicemap.NewTracker("node-a", nil)
	tr.OnServiceUpdate(svc("web", "198.18.0.10"))
	tr.OnServiceUpdate(svc("api", "198.18.0.11"))
	tr.OnEndpointSliceUpdate(slice("web", true, "198.19.1.1", "198.19.2.2"))
	tr.OnSynced()

	sync := func() string {
		lines = nil
		snap, changes := tr.Snapshot()
		if err := m.Sync(context.Background(), snap, changes); err != nil {
			t.Fatalf("Sync: %v", err)
		}
		return strings.Join(lines, "\n")
	}

	steps := []struct {
		name    string
		change  func()
		want    []string
		notWant []string
	}{
		{
			name:   "first sync is full and logs every port",
			change: func() {},
			want: []string{
				`"servicePort"="ns/api:http/TCP" "clusterIPs"="198.18.0.11" "port"=80 "nodePort"=30080 "endpoints"=""`,
				`"servicePort"="ns/web:http/TCP" "clusterIPs"="198.18.0.10" "port"=80 "nodePort"=30080 "endpoints"="198.19.1.1:8080(local) 198.19.2.2:8080(local)"`,
				`"full"=true "logged"=2 "removed"=0`,
				`this mode is not implemented yet`,
			},
		},
		{
			name:    "an endpoint change logs only that port",
			change:  func() { tr.OnEndpointSliceUpdate(slice("web", false, "198.19.1.1")) },
			want:    []string{`"endpoints"="198.19.1.1:8080(not-ready,serving,local)"`, `"full"=false "logged"=1 "removed"=0`},
			notWant: []string{`ns/api:http/TCP`},
		},
		{
			name:    "a deleted service is logged as removed",
			change:  func() { tr.OnServiceDelete(types.NamespacedName{Namespace: "ns", Name: "api"}) },
			want:    []string{`"msg"="Would remove service port" "mode"="userspace" "preview"=true "servicePort"="ns/api:http/TCP"`, `"logged"=0 "removed"=1`},
			notWant: []string{`"Would program service port"`},
		},
	}
	for _, step := range steps {
		step.change()
		out := sync()
		for _, want := range step.want {
			if !strings.Contains(out, want) {
				t.Errorf("%s: log lacks %s\nlog:\n%s", step.name, want, out)
			}
		}
		for _, notWant := range step.notWant {
			if strings.Contains(out, notWant) {
				t.Errorf("%s: log has %s\nlog:\n%s", step.name, notWant, out)
			}
		}
	}
}
