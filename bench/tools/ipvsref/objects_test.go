package main

import (
	"errors"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const manifests = `apiVersion: v1
kind: Node
metadata:
  name: node
  labels: {topology.kubernetes.io/zone: zone-a, other: x}
status:
  addresses:
  - {type: ExternalIP, address: 198.19.9.9}
  - {type: InternalIP, address: 198.19.0.1}
  - {type: InternalIP, address: "fd00:19::1"}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 198.18.0.10
  sessionAffinity: ClientIP
  ports:
  - {name: http, port: 80}
---
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: headless, namespace: shop}
  spec: {clusterIP: None, ports: [{port: 80}]}
- apiVersion: v1
  kind: Service
  metadata: {name: elsewhere, namespace: shop, labels: {service.kubernetes.io/service-proxy-name: other}}
  spec: {clusterIP: 198.18.0.11, ports: [{port: 80}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: web-1, labels: {kubernetes.io/service-name: web}}
  addressType: IPv4
  ports: [{name: http, port: 8080}]
  endpoints: [{addresses: [198.19.1.11]}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: headless-1, namespace: shop, labels: {kubernetes.io/service-name: headless, service.kubernetes.io/headless: ""}}
  addressType: IPv4
  endpoints: [{addresses: [198.19.1.12]}]
`

func TestDecodeObjects(t *testing.T) {
	objs, err := decodeObjects([]byte(manifests))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs.nodes) != 1 || len(objs.services) != 3 || len(objs.slices) != 2 {
		t.Fatalf("decoded %d nodes, %d services, %d slices; want 1, 3, 2", len(objs.nodes), len(objs.services), len(objs.slices))
	}

	// The API server's defaults and derived fields, which the proxier reads.
	web := objs.services[0]
	for _, check := range []struct {
		what      string
		got, want any
	}{
		{"namespace", web.Namespace, "default"},
		{"type", web.Spec.Type, v1.ServiceTypeClusterIP},
		{"protocol", web.Spec.Ports[0].Protocol, v1.ProtocolTCP},
		{"targetPort", web.Spec.Ports[0].TargetPort, intstr.FromInt32(80)},
		{"clusterIPs", strings.Join(web.Spec.ClusterIPs, ","), "198.18.0.10"},
		{"ipFamilies", len(web.Spec.IPFamilies) == 1 && web.Spec.IPFamilies[0] == v1.IPv4Protocol, true},
		{"affinity timeout", *web.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds, int32(10800)},
		{"slice port protocol", *objs.slices[0].Ports[0].Protocol, v1.ProtocolTCP},
	} {
		if check.got != check.want {
			t.Errorf("web %s = %v, want %v", check.what, check.got, check.want)
		}
	}

	// What kube-proxy's informers would never deliver.
	proxied := objs.proxied()
	var names []string
	for _, s := range proxied.services {
		names = append(names, s.Name)
	}
	for _, s := range proxied.slices {
		names = append(names, s.Name)
	}
	if want := []string{"web", "web-1"}; !slices.Equal(names, want) {
		t.Errorf("proxied objects %v, want %v", names, want)
	}
}

func TestDecodeObjectsRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, doc, wantErr string
	}{
		{"unsupported kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", "document 1: unsupported kind"},
		{"not an object", "apiVersion: v1\nkind: Service\nspec: [1\n", "document 1"},
		{"unknown kind", "apiVersion: example.com/v1\nkind: Widget\n", "document 1: decoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeObjects([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestDetectNodeIPs(t *testing.T) {
	objs, err := decodeObjects([]byte(manifests))
	if err != nil {
		t.Fatal(err)
	}
	node := objs.node("node")
	for _, tc := range []struct {
		name     string
		node     *v1.Node
		override string
		v4, v6   string
		wantErr  bool
	}{
		{name: "InternalIPs before ExternalIPs", node: node, v4: "198.19.0.1", v6: "fd00:19::1"},
		{name: "no node: loopback", v4: "127.0.0.1", v6: "::1"},
		{name: "an explicit address wins for its family", node: node, override: "198.19.0.7", v4: "198.19.0.7", v6: "fd00:19::1"},
		{name: "not an address", override: "node", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ips, err := detectNodeIPs(tc.node, tc.override)
			if tc.wantErr {
				if err == nil {
					t.Errorf("no error for %q", tc.override)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !ips[v1.IPv4Protocol].Equal(net.ParseIP(tc.v4)) || !ips[v1.IPv6Protocol].Equal(net.ParseIP(tc.v6)) {
				t.Errorf("node IPs %v, want %s and %s", ips, tc.v4, tc.v6)
			}
		})
	}
	if got := topologyLabels(node); len(got) != 1 || got[v1.LabelTopologyZone] != "zone-a" {
		t.Errorf("topology labels %v, want only the zone", got)
	}
}

func TestRecordingLoggerKeepsErrors(t *testing.T) {
	var printed []string
	base := funcr.New(func(prefix, args string) { printed = append(printed, args) }, funcr.Options{})
	errs := &errorLog{}
	logger := newRecordingLogger(base, errs).WithValues("ipFamily", "IPv4").WithName("proxier")
	logger.Info("fine")
	logger.Error(errors.New("EEXIST"), "Failed to add IPVS service", "service", "shop/web")
	want := []string{"Failed to add IPVS service: EEXIST ipFamily=IPv4 service=shop/web"}
	if got := errs.Errors(); !slices.Equal(got, want) {
		t.Errorf("recorded %q, want %q", got, want)
	}
	if len(printed) != 2 {
		t.Errorf("the base logger printed %d lines, want both: %q", len(printed), printed)
	}
}
