package userspace

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/localroute/fakeroutes"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
	"kproxy.dev/kproxy/sync/sysctl/fakesysctl"
)

func TestPortalsFor(t *testing.T) {
	works := kernel.IPTables{Usable: true, DNAT: true, Redirect: true}
	noNAT := kernel.IPTables{Problem: "can't initialize iptables table `nat'"}
	sk := kernel.Support{Present: true}
	noSK := kernel.Support{Detail: "BPF_PROG_TYPE_SK_LOOKUP: operation not permitted"}
	for _, tc := range []struct {
		asked contract.Portals
		ipt   kernel.IPTables
		sk    kernel.Support
		want  contract.Portals
	}{
		{contract.PortalsAuto, works, sk, contract.PortalsRedirect},
		{"", works, noSK, contract.PortalsRedirect},
		{contract.PortalsAuto, noNAT, sk, contract.PortalsSKLookup},
		{contract.PortalsAuto, noNAT, noSK, contract.PortalsLocal},
		{contract.PortalsRedirect, works, sk, contract.PortalsRedirect},
		{contract.PortalsRedirect, noNAT, sk, ""},
		{contract.PortalsLocal, works, sk, contract.PortalsLocal},
		{contract.PortalsLocal, noNAT, noSK, contract.PortalsLocal},
		{contract.PortalsSKLookup, works, sk, contract.PortalsSKLookup},
		{contract.PortalsSKLookup, noNAT, noSK, ""},
	} {
		got, reason := portalsFor(tc.asked, tc.ipt, tc.sk)
		if got != tc.want || reason == "" {
			t.Errorf("portalsFor(%q, %s, %s) = %q (%q), want %q with a reason", tc.asked, tc.ipt, tc.sk, got, reason, tc.want)
		}
	}
}

// TestLocalPortals drives the mode on a node without netfilter: no
// iptables backend at all, fake routes, real sockets in a fresh namespace.
func TestLocalPortals(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	nodeIP := netip.MustParseAddr("198.19.0.1")
	routes := fakeroutes.New(nodeIP)
	sysctls := fakesysctl.New(map[string]string{"net/ipv4/conf/all/arp_ignore": "0", "net/ipv4/conf/all/arp_announce": "0"})
	reg := prometheus.NewRegistry()
	f := kernel.Features{SCTP: kernel.Support{Detail: "EPROTONOSUPPORT"}}
	m, err := New(context.Background(), Config{
		Features: f, NodeName: "node-a", Registerer: reg, Routes: routes, Sysctls: sysctls, LocalhostNodePorts: true,
		LocalAddresses: func() ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1"), nodeIP}, nil
		},
		Applier: func(ipfamily.Family) (Applier, error) {
			t.Fatal("local portals asked for an iptables applier")
			return nil, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got := testutil.ToFloat64(m.portalKinds.WithLabelValues("IPv4", "local")); got != 1 {
		t.Errorf(`kproxy_userspace_portals{family="IPv4",portals="local"} = %v, want 1`, got)
	}
	for name, want := range map[string]string{"net/ipv4/conf/all/arp_ignore": "1", "net/ipv4/conf/all/arp_announce": "2"} {
		if got, _ := sysctls.Read(name); got != want {
			t.Errorf("%s = %q, want %q (strict ARP)", name, got, want)
		}
	}

	tr := servicemap.NewTracker("node-a", nil)
	web := service("web", "198.18.0.10", v1.ProtocolTCP, 30080)
	web.Spec.ExternalIPs = []string{"198.18.5.10", nodeIP.String()}
	tr.OnServiceUpdate(web)
	tr.OnServiceUpdate(service("dns", "198.18.0.53", v1.ProtocolUDP, 0))
	tr.OnServiceUpdate(service("empty", "198.18.0.99", v1.ProtocolTCP, 0))
	tr.OnEndpointSliceUpdate(slice("web", v1.ProtocolTCP, "198.19.1.11"))
	tr.OnEndpointSliceUpdate(slice("dns", v1.ProtocolUDP, "198.19.1.11"))
	tr.OnSynced()
	sync := func() {
		t.Helper()
		snap, changes := tr.Snapshot()
		if err := m.Sync(context.Background(), snap, changes); err != nil {
			t.Fatalf("sync: %v", err)
		}
	}
	sync()

	wantRoutes := []netip.Addr{
		netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("198.18.0.53"),
		netip.MustParseAddr("198.18.0.99"), netip.MustParseAddr("198.18.5.10"),
	}
	if got := routes.Ours(); !slices.Equal(got, wantRoutes) {
		t.Errorf("routes = %v, want %v (not the node's own address)", got, wantRoutes)
	}
	listening := func(network, addr string) bool {
		var err error
		if network == "tcp" {
			var ln net.Listener
			if ln, err = localPortalListenConfig().Listen(context.Background(), "tcp4", addr); err == nil {
				ln.Close()
			}
		} else {
			var pc net.PacketConn
			if pc, err = localPortalListenConfig().ListenPacket(context.Background(), "udp4", addr); err == nil {
				pc.Close()
			}
		}
		return err != nil && errorIsInUse(err)
	}
	for _, tc := range []struct {
		network, addr string
		want          bool
	}{
		{"tcp", "198.18.0.10:80", true},   // cluster IP
		{"tcp", "198.18.5.10:80", true},   // externalIP
		{"tcp", "198.19.0.1:80", true},    // externalIP that is the node's
		{"tcp", "198.19.0.1:30080", true}, // NodePort on the node address
		{"tcp", "127.0.0.1:30080", true},  // and on localhost
		{"udp", "198.18.0.53:80", true},   // UDP cluster IP
		{"tcp", "198.18.0.99:80", false},  // no endpoints: refused by the kernel
	} {
		if got := listening(tc.network, tc.addr); got != tc.want {
			t.Errorf("%s %s listening = %t, want %t", tc.network, tc.addr, got, tc.want)
		}
	}
	for key, r := range m.relays {
		for ap := range r.servers {
			if ap.Addr().IsUnspecified() {
				t.Errorf("%s listens on the wildcard address %s", key, ap)
			}
		}
	}

	// Endpoints arriving open the port; the service going removes its
	// sockets and routes.
	tr.OnEndpointSliceUpdate(slice("empty", v1.ProtocolTCP, "198.19.1.12"))
	tr.OnServiceDelete(types.NamespacedName{Namespace: "ns", Name: "web"})
	sync()
	if !listening("tcp", "198.18.0.99:80") {
		t.Error("the service that got an endpoint does not listen")
	}
	for _, addr := range []string{"198.18.0.10:80", "198.19.0.1:30080", "198.18.5.10:80"} {
		if listening("tcp", addr) {
			t.Errorf("the deleted service still listens on %s", addr)
		}
	}
	if got := routes.Ours(); slices.Contains(got, netip.MustParseAddr("198.18.0.10")) || slices.Contains(got, netip.MustParseAddr("198.18.5.10")) {
		t.Errorf("the deleted service's routes stay: %v", got)
	}

	// A route deleted behind kproxy's back: a change's sync writes only
	// what changed; the periodic sync reads the routes back and restores it.
	vip := netip.MustParseAddr("198.18.0.99")
	if err := routes.Delete(vip); err != nil {
		t.Fatal(err)
	}
	tr.OnServiceUpdate(service("other", "198.18.0.30", v1.ProtocolTCP, 0))
	sync()
	if slices.Contains(routes.Ours(), vip) {
		t.Fatalf("a change's sync listed the routes (expected only at full and periodic syncs)")
	}
	snap, changes := tr.Snapshot()
	changes.Periodic = true
	if err := m.Sync(context.Background(), snap, changes); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(routes.Ours(), vip) {
		t.Errorf("the periodic sync did not restore the route deleted behind kproxy's back: %v", routes.Ours())
	}

	// A route that cannot be added fails the sync, naming the address, and
	// leaves the other services served.
	routes.FailAdd(netip.MustParseAddr("198.18.0.20"), syscall.ENOBUFS)
	tr.OnServiceUpdate(service("late", "198.18.0.20", v1.ProtocolTCP, 0))
	snap, changes = tr.Snapshot()
	if err := m.Sync(context.Background(), snap, changes); err == nil || !errorMentions(err, "198.18.0.20") {
		t.Errorf("sync with a failing route = %v, want an error naming 198.18.0.20", err)
	}
	if !listening("tcp", "198.18.0.99:80") {
		t.Error("another service stopped listening after a route failure")
	}
}

func errorIsInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }

func errorMentions(err error, s string) bool { return strings.Contains(err.Error(), s) }

func TestRedirectPortalsWithoutNetfilterIsAClearError(t *testing.T) {
	_, err := New(context.Background(), Config{Features: kernel.Features{}, Portals: contract.PortalsRedirect, Routes: fakeroutes.New()})
	if err == nil || !strings.Contains(err.Error(), "--userspace-portals=redirect") || !strings.Contains(err.Error(), "local portals need no netfilter") {
		t.Fatalf("New with REDIRECT portals and no iptables = %v; want an error naming the flag and the way out", err)
	}
}

func TestNarrowPods(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		name        string
		pods, links []netip.Prefix
		want        []netip.Prefix
	}{
		{"point-to-point pods: a route each, and another node's pods behind a gateway are not listed", []netip.Prefix{p("198.19.16.0/20")},
			[]netip.Prefix{p("198.19.0.11/24"), p("198.19.16.1/32"), p("198.19.16.7/32"), p("198.19.16.5/32"), p("198.19.0.0/24")},
			[]netip.Prefix{p("198.19.16.1/32"), p("198.19.16.5/32"), p("198.19.16.7/32")}},
		{"a bridge of pods inside the cluster CIDR", []netip.Prefix{p("198.19.16.0/20")}, []netip.Prefix{p("198.19.0.11/24"), p("198.19.16.1/24")}, []netip.Prefix{p("198.19.16.0/24")}},
		{"the node's pod CIDR on its bridge", []netip.Prefix{p("198.19.16.0/24")}, []netip.Prefix{p("198.19.16.1/20")}, []netip.Prefix{p("198.19.16.0/24")}},
		{"point-to-point pod links: only the gateway address", []netip.Prefix{p("198.19.16.0/20")}, []netip.Prefix{p("198.19.0.11/24"), p("198.19.16.1/32")}, []netip.Prefix{p("198.19.16.1/32")}},
		{"no detector", nil, []netip.Prefix{p("198.19.16.1/24")}, nil},
		{"links unknown", []netip.Prefix{p("198.19.16.0/20")}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := narrowPods(tc.pods, tc.links); !slices.Equal(got, tc.want) {
				t.Errorf("narrowPods = %v, want %v", got, tc.want)
			}
		})
	}
}
