package userspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/balancer"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/userspace/portal"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// recordingApplier keeps the last ruleset of its family and can fail like
// iptables-restore does.
type recordingApplier struct {
	mu     sync.Mutex
	last   *portal.Ruleset
	fail   error
	broken string // what Intact reports
	fulls  int    // full applies
}

func (a *recordingApplier) Apply(_ context.Context, rs *portal.Ruleset, full bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail != nil {
		return a.fail
	}
	a.last = rs
	if full {
		a.fulls++
		a.broken = ""
	}
	return nil
}

// Intact reports the problem the test set, as the kernel check would.
func (a *recordingApplier) Intact(context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.broken, nil
}

func (a *recordingApplier) rules() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		return ""
	}
	var b strings.Builder
	for _, t := range a.last.Tables() {
		for _, r := range t.Rules {
			b.WriteString(r.String() + "\n")
		}
	}
	return b.String()
}

// fakeOpener claims ports in memory; ports in taken are held by "someone
// else", as EADDRINUSE from a real bind.
type fakeOpener struct {
	mu    sync.Mutex
	taken map[uint16]bool
	held  map[string]bool
}

type closer func() error

func (c closer) Close() error { return c() }

func (o *fakeOpener) Open(c portal.Claim) (io.Closer, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.taken[c.Port] {
		return nil, fmt.Errorf("bind %s:%d: %w", c.Addr, c.Port, syscall.EADDRINUSE)
	}
	key := fmt.Sprintf("%s/%s/%d", c.Family, c.Protocol, c.Port)
	o.held[key] = true
	return closer(func() error {
		o.mu.Lock()
		defer o.mu.Unlock()
		delete(o.held, key)
		return nil
	}), nil
}

func features() kernel.Features {
	ipt := kernel.IPTables{Usable: true, DNAT: true, Redirect: true}
	return kernel.Features{
		IPv4:    kernel.FamilyIPTables{NFT: ipt},
		IPv6:    kernel.FamilyIPTables{NFT: ipt},
		Backend: kernel.NFT,
		SCTP:    kernel.Support{Present: false, Detail: "EPROTONOSUPPORT"},
	}
}

func service(name, ip string, proto v1.Protocol, nodePort int32) *v1.Service {
	typ := v1.ServiceTypeClusterIP
	if nodePort != 0 {
		typ = v1.ServiceTypeNodePort
	}
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: v1.ServiceSpec{Type: typ, ClusterIP: ip, ClusterIPs: []string{ip},
			Ports: []v1.ServicePort{{Name: "p", Port: 80, Protocol: proto, NodePort: nodePort}}},
	}
}

func slice(svc string, proto v1.Protocol, ips ...string) *discovery.EndpointSlice {
	name, port := "p", int32(8080)
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: "ns",
			Labels: map[string]string{discovery.LabelServiceName: svc}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: []string{ip}})
	}
	return s
}

// TestSyncProgramsRelaysPortalsAndClaims drives the mode with real snapshots,
// real relays on the namespace's wildcard address and fake kernel parts.
func TestSyncProgramsRelaysPortalsAndClaims(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	v4, v6 := &recordingApplier{}, &recordingApplier{}
	opener := &fakeOpener{taken: map[uint16]bool{30099: true}, held: map[string]bool{}}
	reg := prometheus.NewRegistry()
	m, err := New(context.Background(), Config{
		Features: features(), NodeName: "node-a", Registerer: reg, Opener: opener,
		LocalAddresses: func() ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.19.0.1")}, nil
		},
		Applier: func(f ipfamily.Family) (Applier, error) {
			if f == ipfamily.IPv6 {
				return v6, nil
			}
			return v4, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	tr := servicemap.NewTracker("node-a", nil)
	tr.OnServiceUpdate(service("web", "198.18.0.10", v1.ProtocolTCP, 30080))
	tr.OnServiceUpdate(service("dns", "198.18.0.53", v1.ProtocolUDP, 0))
	tr.OnServiceUpdate(service("sig", "198.18.0.70", v1.ProtocolSCTP, 0))
	tr.OnServiceUpdate(service("clash", "198.18.0.80", v1.ProtocolTCP, 30099))
	tr.OnEndpointSliceUpdate(slice("web", v1.ProtocolTCP, "198.19.1.11"))
	tr.OnSynced()
	sync := func() error {
		snap, changes := tr.Snapshot()
		return m.Sync(context.Background(), snap, changes)
	}
	if err := sync(); err != nil {
		t.Fatalf("first sync: %v", err)
	}

	web := m.relays[keyOf("web", v1.ProtocolTCP, balancer.Internal)]
	webExternal := m.relays[keyOf("web", v1.ProtocolTCP, balancer.External)]
	dns := m.relays[keyOf("dns", v1.ProtocolUDP, balancer.Internal)]
	if web == nil || webExternal == nil || dns == nil {
		t.Fatalf("relays = %v; want internal and external for ns/web, internal for ns/dns", m.relays)
	}
	if len(m.relays) != 5 { // web ×2, dns, clash ×2; no SCTP relay on this kernel
		t.Errorf("%d relays, want 5: %v", len(m.relays), m.relays)
	}
	rules := v4.rules()
	for _, want := range []string{
		fmt.Sprintf("-d 198.18.0.10/32 -p tcp -m comment --comment \"ns/web:p\" -m tcp --dport 80 -j REDIRECT --to-ports %d", web.port),
		fmt.Sprintf("--dport 80 -j DNAT --to-destination 198.19.0.1:%d", web.port),
		fmt.Sprintf("-m tcp --dport 30080 -j REDIRECT --to-ports %d", webExternal.port),
		fmt.Sprintf("-d 198.18.0.53/32 -p udp -m comment --comment \"ns/dns:p\" -m udp --dport 80 -j REDIRECT --to-ports %d", dns.port),
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("IPv4 portals lack %q:\n%s", want, rules)
		}
	}
	if strings.Contains(rules, "198.18.0.70") {
		t.Errorf("an SCTP port this kernel cannot serve got portal rules:\n%s", rules)
	}
	if got := testutil.ToFloat64(m.metrics.SCTPUnservedServicePorts); got != 1 {
		t.Errorf("kproxy_userspace_sctp_unserved_service_ports = %v, want 1", got)
	}
	if v6.rules() != "" {
		t.Errorf("IPv6 portals were written on a node without an IPv6 address:\n%s", v6.rules())
	}
	if !opener.held["IPv4/TCP/30080"] || opener.held["IPv4/TCP/30099"] {
		t.Errorf("claims = %v; want 30080 held and 30099 (taken by someone else) not", opener.held)
	}

	// The relay holds its proxy port.
	if ln, err := net.Listen("tcp", fmt.Sprintf(":%d", web.port)); err == nil {
		ln.Close()
		t.Fatalf("nothing listens on the web relay's proxy port %d", web.port)
	}

	// Removing a service closes its relays and drops its portals and claims.
	tr.OnServiceDelete(types.NamespacedName{Namespace: "ns", Name: "web"})
	if err := sync(); err != nil {
		t.Fatalf("sync after delete: %v", err)
	}
	if _, ok := m.relays[keyOf("web", v1.ProtocolTCP, balancer.Internal)]; ok {
		t.Error("the deleted service's relay is still registered")
	}
	if ln, err := net.Listen("tcp", fmt.Sprintf(":%d", web.port)); err != nil {
		t.Errorf("the deleted service's proxy port %d is still held: %v", web.port, err)
	} else {
		ln.Close()
	}
	if strings.Contains(v4.rules(), "ns/web:p") || opener.held["IPv4/TCP/30080"] {
		t.Errorf("the deleted service left portals or claims:\n%s\nclaims %v", v4.rules(), opener.held)
	}

	// A failed apply fails the sync and names the failure.
	v4.fail = &restore.Error{Command: "iptables-nft-restore", Line: 7, Rule: "-A KUBE-PORTALS-HOST ...", Message: "bad rule"}
	tr.OnServiceUpdate(service("web", "198.18.0.10", v1.ProtocolTCP, 0))
	err = sync()
	var re *restore.Error
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "IPv4 portals") {
		t.Fatalf("sync with a failing restore = %v, want the RestoreError wrapped with the family", err)
	}
}

func keyOf(name string, proto v1.Protocol, class balancer.Class) balancer.Key {
	return balancer.Key{Port: servicemap.ServicePortName{
		NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}, Port: "p", Protocol: proto},
		Class: class, Family: ipfamily.IPv4}
}
