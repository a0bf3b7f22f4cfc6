package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
	iptrules "kproxy.dev/kproxy/redirect/modes/iptables/rules"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/serve/serviceview"
	"kproxy.dev/kproxy/sync/servicemap"
)

// servicesFile is what the end-to-end tests of /services give kproxy: the
// lab's node, a TCP service with a node port, affinity and one endpoint of
// each state, a UDP service on an unnamed port, and one with no endpoints.
const servicesFile = `apiVersion: v1
kind: Node
metadata: {name: node, labels: {topology.kubernetes.io/zone: zone-a}}
status:
  addresses: [{type: InternalIP, address: 198.19.0.1}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: demo}
spec:
  type: NodePort
  clusterIP: 198.18.0.10
  sessionAffinity: ClientIP
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: demo
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [198.19.1.11], nodeName: node, zone: zone-a, hints: {forZones: [{name: zone-a}]}}
- {addresses: [198.19.1.12], nodeName: elsewhere, conditions: {ready: false, serving: true, terminating: true}}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: demo}
spec:
  clusterIP: 198.18.0.53
  ports: [{port: 53, protocol: UDP, targetPort: 9000}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-1
  namespace: demo
  labels: {kubernetes.io/service-name: echo}
addressType: IPv4
ports: [{port: 9000, protocol: UDP}]
endpoints:
- {addresses: [198.19.1.11], nodeName: elsewhere}
---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: other}
spec:
  clusterIP: 198.18.0.60
  ports: [{name: http, port: 80, targetPort: 8080}]
`

// wantPorts is the service map part of the page for servicesFile, one line
// per service port, in the page's order.
var wantPorts = []string{
	"demo/echo: UDP 53 [198.18.0.53] nodePort=0 policy=Cluster/ affinity=None/0 endpoints=[198.19.1.11:9000 ready=true serving=true terminating=false local=false node=elsewhere zone= hints=[]]",
	"demo/web:http TCP 80 [198.18.0.10] nodePort=30080 policy=Cluster/Cluster affinity=ClientIP/10800 endpoints=[" +
		"198.19.1.11:8080 ready=true serving=true terminating=false local=true node=node zone=zone-a hints=[zone-a] " +
		"198.19.1.12:8080 ready=false serving=true terminating=true local=false node=elsewhere zone= hints=[]]",
	"other/empty:http TCP 80 [198.18.0.60] nodePort=0 policy=Cluster/ affinity=None/0 endpoints=[]",
}

func portLine(sp serviceview.ServicePort) string {
	var eps []string
	for _, ep := range sp.Endpoints {
		eps = append(eps, fmt.Sprintf("%s ready=%t serving=%t terminating=%t local=%t node=%s zone=%s hints=%v",
			ep.Address, ep.Ready, ep.Serving, ep.Terminating, ep.Local, ep.Node, ep.Zone, ep.ZoneHints))
	}
	return fmt.Sprintf("%s/%s:%s %s %d %v nodePort=%d policy=%s/%s affinity=%s/%d endpoints=[%s]",
		sp.Namespace, sp.Name, sp.PortName, sp.Protocol, sp.Port, sp.ClusterIPs, sp.NodePort,
		sp.InternalTrafficPolicy, sp.ExternalTrafficPolicy, sp.SessionAffinity, sp.AffinityTimeoutSeconds, strings.Join(eps, " "))
}

func TestBinaryServicesIPTables(t *testing.T) {
	runServicesCase(t, "iptables", nil, func(t *testing.T, topo *lab.Topology, page serviceview.Page) {
		web := portOf(t, page, "web")
		name := servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "demo", Name: "web"}, Port: "http", Protocol: v1.ProtocolTCP}
		var chains []string
		for _, c := range web.Programmed.Chains {
			chains = append(chains, c.Table+" "+c.Name)
			// Every chain named is in the kernel.
			topo.Node.MustExec("iptables", "-t", c.Table, "-S", c.Name)
		}
		noChainsFor(t, page, "empty")
		for _, want := range []string{"nat " + iptrules.ServiceChain(name), "nat " + iptrules.EndpointChain(name, mustAddrPort("198.19.1.11:8080"))} {
			if !slices.Contains(chains, want) {
				t.Errorf("demo/web's chains %q lack %q", chains, want)
			}
		}
	})
}

func TestBinaryServicesNFTables(t *testing.T) {
	runServicesCase(t, "nftables", nil, func(t *testing.T, topo *lab.Topology, page serviceview.Page) {
		noChainsFor(t, page, "empty")
		web := portOf(t, page, "web")
		found := false
		for _, c := range web.Programmed.Chains {
			if c.Table != "ip kube-proxy" {
				t.Errorf("chain %+v is not in table ip kube-proxy", c)
			}
			topo.Node.MustExec("nft", "list", "chain", "ip", "kube-proxy", c.Name)
			found = found || strings.HasPrefix(c.Name, "service-") && strings.HasSuffix(c.Name, "-demo/web/tcp/http")
		}
		if !found {
			t.Errorf("demo/web's chains %+v lack its service- chain", web.Programmed.Chains)
		}
	})
}

func TestBinaryServicesUserspace(t *testing.T) {
	runServicesCase(t, "userspace", nil, checkUserspaceServices(""))
}

// TestBinaryServicesUserspaceSKLookup: socket-lookup portals share their
// relay sockets among all service ports, and still count each apart.
func TestBinaryServicesUserspaceSKLookup(t *testing.T) {
	runServicesCase(t, "userspace", []string{"--userspace-portals=sklookup"}, checkUserspaceServices("sklookup"))
}

// checkUserspaceServices checks the userspace mode's part of the page, its
// relays all of portal kind portal ("": any), and that demo/web's
// counters move with a request.
func checkUserspaceServices(portal string) func(*testing.T, *lab.Topology, serviceview.Page) {
	return func(t *testing.T, topo *lab.Topology, page serviceview.Page) {
		web := portOf(t, page, "web")
		var classes []string
		for _, r := range web.Programmed.Relays {
			classes = append(classes, fmt.Sprintf("%s/%s/%s", r.Family, r.Class, r.Portal))
			if r.Portal == "redirect" && r.ProxyPort == 0 {
				t.Errorf("REDIRECT relay %+v has no proxy port", r)
			}
			if portal != "" && r.Portal != portal {
				t.Errorf("relay %+v, want %s portals", r, portal)
			}
		}
		if web.Programmed.Note != "" {
			t.Errorf("demo/web's note %q, want none", web.Programmed.Note)
		}
		// A port without endpoints has a relay too: it refuses clients.
		if empty := portOf(t, page, "empty").Programmed; len(empty.Relays) != 1 || empty.Counters == nil {
			t.Errorf("other/empty programmed %+v; want one relay, with counters", empty)
		}
		if len(classes) != 2 || web.Programmed.Counters == nil {
			t.Fatalf("demo/web's relays %v (want internal and external) and counters %+v", classes, web.Programmed.Counters)
		}
		if greeting, err := lab.HTTPGet(topo.Client, "http://198.18.0.10/"); err != nil {
			t.Fatalf("demo/web through its cluster IP: %q, %v", greeting, err)
		}
		lab.Eventually(t, "the connection to be counted for demo/web", func() (bool, string) {
			page, err := servicesPage()
			if err != nil {
				return false, err.Error()
			}
			c := portOf(t, page, "web").Programmed.Counters
			return c != nil && c.Connections >= 1 && c.BytesToClient > 0, fmt.Sprintf("%+v", c)
		})
		lab.Eventually(t, "the per-service series", func() (bool, string) {
			samples, err := lab.MetricSamples("kproxy_userspace_service_connections_total")
			joined := strings.Join(samples, "\n")
			return err == nil && strings.Contains(joined, `service="demo/web:http"`) && !strings.Contains(joined, `service="demo/web:http"} 0`), joined
		})
	}
}

// TestGuestBinaryServicesIPVS is the IPVS mode's case. It runs in the guest
// kernel (make test-guest-pkgs): this host has no IPVS.
func TestGuestBinaryServicesIPVS(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	runServicesCase(t, "ipvs", nil, func(t *testing.T, topo *lab.Topology, page serviceview.Page) {
		web := portOf(t, page, "web")
		var clusterIP *mode.VirtualServer
		for i, vs := range web.Programmed.VirtualServers {
			// Every virtual server named is in the kernel.
			proto, addr, _ := strings.Cut(vs.Address, "/")
			flag := map[string]string{"TCP": "-t", "UDP": "-u", "SCTP": "--sctp-service"}[proto]
			topo.Node.MustExec("ipvsadm", "-L", "-n", flag, addr)
			if vs.Address == "TCP/198.18.0.10:80" {
				clusterIP = &web.Programmed.VirtualServers[i]
			}
		}
		if clusterIP == nil {
			t.Fatalf("demo/web's virtual servers %+v lack TCP/198.18.0.10:80", web.Programmed.VirtualServers)
		}
		want := mode.VirtualServer{Family: ipfamily.IPv4, Address: "TCP/198.18.0.10:80", Scheduler: "rr", PersistenceSeconds: 10800,
			RealServers: []mode.RealServer{{Address: "198.19.1.11:8080", Weight: 1}}}
		if got := fmt.Sprintf("%+v", *clusterIP); got != fmt.Sprintf("%+v", want) {
			t.Errorf("demo/web's cluster IP virtual server:\n got %s\nwant %s", got, fmt.Sprintf("%+v", want))
		}
	})
}

// runServicesCase runs kproxy in mode, with flags, on servicesFile in the
// lab, checks the service map part of /services against the file, then the
// mode's part with check, and `kproxy services` against the page.
func runServicesCase(t *testing.T, proxyMode string, flags []string, check func(*testing.T, *lab.Topology, serviceview.Page)) {
	bin := lab.KproxyBinary(t)
	if lab.InFreshNetns(t, lab.KproxyBinaryEnv+"="+bin) {
		return
	}
	file := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(servicesFile), 0o644); err != nil {
		t.Fatal(err)
	}
	topo := lab.NewTopology(t, lab.TopologyOptions{Backends: 2})
	lab.StartServers(t, topo, lab.ServerOptions{NoIperf: true})
	args := []string{"--proxy-mode=" + proxyMode, "--services-file=" + file, "--hostname-override=node"}
	if proxyMode == "userspace" {
		args = append(args, "--userspace-service-metrics")
	}
	args = append(args, flags...)
	kp := topo.Node.Start(bin, args...)
	lab.WaitSynced(t, kp, 1)

	var page serviceview.Page
	lab.Eventually(t, "/services to list the file's service ports", func() (bool, string) {
		var err error
		if page, err = servicesPage(); err != nil {
			return false, err.Error()
		}
		return len(page.ServicePorts) == len(wantPorts), fmt.Sprintf("%+v", page)
	})
	if page.Mode != proxyMode || page.Node != "node" || page.Generation == 0 {
		t.Errorf("page header: mode %q node %q generation %d; want %s, node, > 0", page.Mode, page.Node, page.Generation, proxyMode)
	}
	for i, sp := range page.ServicePorts {
		if got := portLine(sp); got != wantPorts[i] {
			t.Errorf("service port %d:\n got %s\nwant %s", i, got, wantPorts[i])
		}
	}
	check(t, topo, page)
	checkServicesCommand(t, bin)
}

// checkServicesCommand runs `kproxy services` as an operator would.
func checkServicesCommand(t *testing.T, bin string) {
	t.Helper()
	text, err := exec.Command(bin, "services").CombinedOutput()
	if err != nil {
		t.Fatalf("kproxy services: %v\n%s", err, text)
	}
	t.Logf("kproxy services:\n%s", text)
	for _, want := range []string{"demo/web:http/TCP", "demo/echo/UDP", "other/empty:http/TCP",
		"198.18.0.10:80", "30080", "ClientIP for 10800s", "198.19.1.12:8080  not-ready,serving,terminating  remote  node=elsewhere"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("kproxy services lacks %q:\n%s", want, text)
		}
	}
	one, err := exec.Command(bin, "services", "demo/echo").CombinedOutput()
	if err != nil || !strings.Contains(string(one), "demo/echo/UDP") || strings.Contains(string(one), "demo/web") {
		t.Errorf("kproxy services demo/echo (%v):\n%s", err, one)
	}
	asJSON, err := exec.Command(bin, "services", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kproxy services -o json: %v", err)
	}
	var fromCommand serviceview.Page
	if err := json.Unmarshal(asJSON, &fromCommand); err != nil {
		t.Fatalf("kproxy services -o json is not the page: %v\n%s", err, asJSON)
	}
	var got []string
	for _, sp := range fromCommand.ServicePorts {
		got = append(got, portLine(sp))
	}
	if !slices.Equal(got, wantPorts) {
		t.Errorf("kproxy services -o json:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantPorts, "\n"))
	}
	out, err := exec.Command(bin, "services", "--address", "127.0.0.1:1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "nothing listens at 127.0.0.1:1") {
		t.Errorf("kproxy services with nothing listening: %v\n%s", err, out)
	}
}

// noChainsFor checks that a kernel mode wrote no chain of its own for a
// service without endpoints, and says why.
func noChainsFor(t *testing.T, page serviceview.Page, name string) {
	t.Helper()
	if p := portOf(t, page, name).Programmed; p.Note == "" || len(p.Chains) != 0 {
		t.Errorf("%s, which has no endpoints, programmed %+v; want a note only", name, p)
	}
}

func servicesPage() (serviceview.Page, error) {
	var page serviceview.Page
	resp, err := http.Get(defaultMetricsURL + "/services")
	if err != nil {
		return page, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return page, fmt.Errorf("GET /services: %s %v: %s", resp.Status, err, body)
	}
	return page, json.Unmarshal(body, &page)
}

func portOf(t *testing.T, page serviceview.Page, name string) serviceview.ServicePort {
	t.Helper()
	for _, sp := range page.ServicePorts {
		if sp.Name == name {
			return sp
		}
	}
	t.Fatalf("no service %s on the page: %+v", name, page)
	return serviceview.ServicePort{}
}

func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
