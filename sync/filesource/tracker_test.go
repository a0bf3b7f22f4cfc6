package filesource

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/sync/servicemap"
)

func portName(ns, name, port string, proto v1.Protocol) servicemap.ServicePortName {
	return servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: port, Protocol: proto}
}

// TestSampleThroughTracker feeds deploy/samples/services.yaml to the real
// servicemap.Tracker and checks the service ports it makes of it, then that
// an edit changes only the edited port and an invalid edit changes nothing.
func TestSampleThroughTracker(t *testing.T) {
	sample, err := os.ReadFile("../../deploy/samples/services.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, dir, "services.yaml", string(sample))
	tracker := servicemap.NewTracker("kproxy-demo", nil)
	src, err := New(filepath.Join(dir, "services.yaml"), "kproxy-demo", tracker, nil)
	if err != nil {
		t.Fatal(err)
	}
	src.reload(klog.Background())
	tracker.OnSynced()
	if errs := src.Errors(); len(errs) > 0 {
		t.Fatalf("sample rejected: %v", errs)
	}
	snap, changes := tracker.Snapshot()
	if !changes.Full {
		t.Error("first change set is not Full")
	}
	if snap.Node == nil || !slices.Contains(snap.Node.Addresses, netip.MustParseAddr("198.19.0.1")) {
		t.Errorf("node %+v, want kproxy-demo with 198.19.0.1", snap.Node)
	}

	cases := []struct {
		name  servicemap.ServicePortName
		check func(t *testing.T, p *servicemap.ServicePort)
	}{{
		name: portName("shop", "web", "http", v1.ProtocolTCP),
		check: func(t *testing.T, p *servicemap.ServicePort) {
			var eps []string
			terminating := 0
			for _, ep := range p.Endpoints {
				eps = append(eps, ep.String())
				if ep.Terminating {
					terminating++
				}
			}
			want := []string{"198.19.1.11:8080", "198.19.1.12:8080", "198.19.2.13:8080"}
			if !slices.Equal(eps, want) || terminating != 1 {
				t.Errorf("endpoints %v (%d terminating), want %v with one terminating", eps, terminating, want)
			}
		},
	}, {
		name: portName("kube-system", "dns", "dns", v1.ProtocolUDP),
		check: func(t *testing.T, p *servicemap.ServicePort) {
			if p.Port != 53 || len(p.Endpoints) != 2 || p.Endpoints[0].Port != 5353 {
				t.Errorf("port %d endpoints %v, want 53 -> two endpoints on 5353", p.Port, p.Endpoints)
			}
		},
	}, {
		name: portName("shop", "cart", "http", v1.ProtocolTCP),
		check: func(t *testing.T, p *servicemap.ServicePort) {
			if p.NodePort != 30080 || p.AffinityTimeout != 600*time.Second {
				t.Errorf("nodePort %d affinity %v, want 30080 and 10m", p.NodePort, p.AffinityTimeout)
			}
		},
	}, {
		name: portName("shop", "frontend", "https", v1.ProtocolTCP),
		check: func(t *testing.T, p *servicemap.ServicePort) {
			if !p.ExternalPolicyLocal || p.HealthCheckNodePort != 32100 ||
				!slices.Equal(p.LoadBalancerIPs, []netip.Addr{netip.MustParseAddr("198.18.100.1")}) ||
				len(p.LoadBalancerSourceRanges) != 2 {
				t.Errorf("got %+v, want a Local LoadBalancer on 198.18.100.1 with health check 32100 and two source ranges", p)
			}
		},
	}, {
		name: portName("default", "api", "http", v1.ProtocolTCP),
		check: func(t *testing.T, p *servicemap.ServicePort) {
			if len(p.ClusterIPs) != 2 || len(p.Endpoints) != 2 {
				t.Errorf("cluster IPs %v endpoints %v, want one of each family", p.ClusterIPs, p.Endpoints)
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name.String(), func(t *testing.T) {
			p, ok := snap.Get(tc.name)
			if !ok {
				t.Fatalf("no service port %s", tc.name)
			}
			tc.check(t, p)
		})
	}

	// Editing one slice changes only its service's port.
	edited := strings.Replace(string(sample), "198.19.1.12", "198.19.1.14", 1)
	replaceFile(t, dir, "services.yaml", edited)
	src.reload(klog.Background())
	_, changes = tracker.Snapshot()
	if want := []servicemap.ServicePortName{portName("shop", "web", "http", v1.ProtocolTCP)}; !slices.Equal(changes.Changed, want) {
		t.Errorf("changed %v after editing web's slice, want %v", changes.Changed, want)
	}

	// An invalid edit keeps the last good state: nothing changes.
	replaceFile(t, dir, "services.yaml", strings.Replace(edited, "port: 8443", "port: 70000", 1))
	src.reload(klog.Background())
	if len(src.Errors()) != 1 {
		t.Errorf("errors %v, want one", src.Errors())
	}
	if _, changes = tracker.Snapshot(); !changes.Empty() {
		t.Errorf("an invalid edit changed %v", changes.Changed)
	}
}
