package e2e

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"kproxy.dev/kproxy/bench/lab"
)

// The API server case runs the core cases with kproxy watching a real
// kube-apiserver (backed by etcd) on the node, and adds an outage.

const (
	apiGoneVIP = "198.18.0.90"
	apiLateVIP = "198.18.0.91"
	// reconnectBound is how long kproxy may take to see changes after an
	// API server restart. client-go's reflectors (as in kube-proxy) retry a
	// failed list or watch with a jittered backoff that grows to between 30
	// and 60 s and is reset only after two healthy minutes, so one informer
	// may take up to a minute to reconnect.
	reconnectBound = 2 * time.Minute
)

// apiSlice builds an EndpointSlice for service svc with one port and ready
// endpoints on another node.
func apiSlice(svc, portName string, port int32, proto v1.Protocol, backends []string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc + "-1", Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To(port), Protocol: ptr.To(proto)}},
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for _, ip := range backends {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr.To("other"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

func apiService(name, clusterIP, portName string, port, target int32, proto v1.Protocol) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: v1.ServiceSpec{ClusterIP: clusterIP, Ports: []v1.ServicePort{{
			Name: portName, Port: port, Protocol: proto, TargetPort: intstr.FromInt32(target)}}},
	}
}

func TestAPIServer(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := newLab(t, m, nil)
		if l == nil {
			return
		}
		api := lab.StartAPIServer(t)
		lab.CreateNode(t, api.Client, "node", nodeIP)

		// Bounded by the test's own timeout only: in a busy guest kernel
		// the case takes more than ten minutes.
		ctx := t.Context()
		must := func(_ any, err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		services := api.Client.CoreV1().Services(metav1.NamespaceDefault)
		endpointSlices := api.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault)
		createHTTP := func(name, vip string, ips []string) {
			t.Helper()
			must(services.Create(ctx, apiService(name, vip, "http", 80, 8080, v1.ProtocolTCP), metav1.CreateOptions{}))
			must(endpointSlices.Create(ctx, apiSlice(name, "http", 8080, v1.ProtocolTCP, ips), metav1.CreateOptions{}))
		}
		createHTTP("web", webVIP, l.backends)
		createHTTP("gone", apiGoneVIP, l.backends)
		must(services.Create(ctx, apiService("echo", echoVIP, "dns", 53, 9000, v1.ProtocolUDP), metav1.CreateOptions{}))
		must(endpointSlices.Create(ctx, apiSlice("echo", "dns", 9000, v1.ProtocolUDP, l.backends), metav1.CreateOptions{}))

		l.runKproxyOn(t, "--kubeconfig="+api.KubeconfigPath, nil)
		client := l.topo.Client
		askWeb, askGone, askLate := askHTTP(client, "http://"+webVIP+"/"), askHTTP(client, "http://"+apiGoneVIP+"/"), askHTTP(client, "http://"+apiLateVIP+"/")
		askEcho := l.askUDPNewFlows(t, client, echoVIP+":53")
		lab.Eventually(t, "kproxy to serve the services from the API server", func() (bool, string) {
			l.alive(t)
			web, err := trySpread(3, askWeb)
			if err != nil {
				return false, fmt.Sprint(web, err)
			}
			gone, err := trySpread(3, askGone)
			return err == nil && len(gone) > 0, fmt.Sprint(web, gone, err)
		})

		t.Run("TCP and UDP spread over the endpoints", func(t *testing.T) {
			l.wantBalanced(t, "TCP ClusterIP", askWeb)
			l.wantBalanced(t, "UDP ClusterIP", askEcho)
		})

		setWebBackends := func(t *testing.T, ips []string) {
			t.Helper()
			cur, err := endpointSlices.Get(ctx, "web-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			next := apiSlice("web", "http", 8080, v1.ProtocolTCP, ips)
			next.ResourceVersion = cur.ResourceVersion
			must(endpointSlices.Update(ctx, next, metav1.UpdateOptions{}))
		}
		twoBackends := l.backendsExcept("backend-3")
		wantTwo := func(t *testing.T, when string) {
			t.Helper()
			seen, err := spreadOver(2, askWeb)
			if err != nil || len(seen) != 2 || seen["backend-3"] != 0 {
				t.Fatalf("web %s reached %v (%v), want backend-1 and backend-2", when, seen, err)
			}
		}

		t.Run("an endpoint removal takes effect within seconds", func(t *testing.T) {
			setWebBackends(t, twoBackends)
			lab.Within(t, changeBound, "backend-3 leaving the rotation", func() (bool, string) {
				seen, err := spreadOver(2, askWeb)
				return err == nil && len(seen) == 2 && seen["backend-3"] == 0, fmt.Sprint(seen, err)
			})
		})

		t.Run("a deleted service stops answering", func(t *testing.T) {
			if err := services.Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := endpointSlices.Delete(ctx, "gone-1", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			lab.Within(t, changeBound, "the deleted service's rules going away", func() (bool, string) {
				programmed, state := l.programs(t, apiGoneVIP)
				return !programmed, state
			})
			wantNotServed(t, client, "the deleted service", apiGoneVIP+":80")
			wantTwo(t, "after another service's deletion")
		})

		t.Run("an API server outage keeps traffic flowing", func(t *testing.T) {
			before := l.programmedState(t)
			api.Stop()
			if _, err := services.Get(ctx, "web", metav1.GetOptions{}); err == nil {
				t.Fatal("the API server still answers after Stop")
			}
			// Meanwhile kproxy's watches fail and retry; what it programmed
			// stays.
			for range 3 {
				time.Sleep(time.Second)
				l.alive(t)
				wantTwo(t, "during the outage")
				l.wantBalanced(t, "UDP during the outage", askEcho)
			}
			if after := l.programmedState(t); after != before {
				t.Errorf("what kproxy programmed changed during the outage.\nbefore:\n%s\nafter:\n%s", before, after)
			}
			api.Start()
			// kproxy's Service and EndpointSlice watches both resume:
			// changes made after the restart arrive.
			setWebBackends(t, l.backends)
			createHTTP("late", apiLateVIP, l.backendsExcept("backend-1", "backend-2"))
			changed := time.Now()
			lab.Within(t, reconnectBound, "an endpoint addition and a new service after the API server came back", func() (bool, string) {
				l.alive(t)
				web, err := spreadOver(3, askWeb)
				if err != nil {
					return false, fmt.Sprint(web, err)
				}
				late, err := trySpread(2, askLate)
				return err == nil && len(web) == 3 && late["backend-3"] == 2, fmt.Sprint(web, late, err)
			})
			took := time.Since(changed)
			t.Logf("the changes made after the restart took effect after %v", took)
			if took > 30*time.Second {
				t.Logf("kproxy's log:\n%s", l.kproxy.Log())
			}
			l.alive(t)
		})
	})
}
