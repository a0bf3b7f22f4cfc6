package userspace

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/balancer"
	"kproxy.dev/kproxy/lb/lbmetrics"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/localroute/fakeroutes"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestProgrammedRelaysAndCounters: /services' view of REDIRECT-portal
// relays, the counters of a refused client, and the per-service metrics.
func TestProgrammedRelaysAndCounters(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	reg := prometheus.NewRegistry()
	m, err := New(context.Background(), Config{
		Features: features(), NodeName: "node-a", Registerer: reg, Opener: &fakeOpener{held: map[string]bool{}},
		ServiceMetrics: true,
		LocalAddresses: func() ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.19.0.1")}, nil
		},
		Applier: func(ipfamily.Family) (Applier, error) { return &recordingApplier{}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tr := servicemap.NewTracker("node-a", nil)
	tr.OnServiceUpdate(service("web", "198.18.0.10", v1.ProtocolTCP, 30080))
	tr.OnEndpointSliceUpdate(slice("web", v1.ProtocolTCP, "198.19.1.11"))
	tr.OnSynced()
	sync := func() {
		t.Helper()
		snap, changes := tr.Snapshot()
		if err := m.Sync(context.Background(), snap, changes); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	name := keyOf("web", v1.ProtocolTCP, balancer.Internal).Port
	got := m.Programmed()(name)
	var relays []string
	for _, r := range got.Relays {
		relays = append(relays, fmt.Sprintf("%s %s %s %d", r.Family, r.Class, r.Portal, r.ProxyPort))
	}
	internal := m.relays[keyOf("web", v1.ProtocolTCP, balancer.Internal)]
	external := m.relays[keyOf("web", v1.ProtocolTCP, balancer.External)]
	want := fmt.Sprintf("[IPv4 internal redirect %d IPv4 external redirect %d]", internal.port, external.port)
	if fmt.Sprint(relays) != want {
		t.Errorf("relays %v, want %s", relays, want)
	}
	if got.Counters == nil || got.Counters.Connections != 0 || len(got.Counters.Refused) != 0 {
		t.Errorf("counters before any client: %+v", got.Counters)
	}

	// A client straight to the proxy port, not through a portal, is
	// refused: counted for the port.
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", internal.port))
	if err == nil {
		_, _ = c.Read(make([]byte, 1))
		c.Close()
	}
	lab.Eventually(t, "the refusal to be counted", func() (bool, string) {
		got := m.Programmed()(name).Counters
		return got.Refused[lbmetrics.ReasonDirect] == 1, fmt.Sprintf("%+v", got)
	})
	wantMetric := `
# HELP kproxy_userspace_service_rejected_total [ALPHA] Clients refused, per service port and reason (reasons seen only).
# TYPE kproxy_userspace_service_rejected_total counter
kproxy_userspace_service_rejected_total{protocol="tcp",reason="direct",service="ns/web:p"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantMetric), "kproxy_userspace_service_rejected_total"); err != nil {
		t.Error(err)
	}

	tr.OnServiceDelete(types.NamespacedName{Namespace: "ns", Name: "web"})
	sync()
	if got := m.Programmed()(name); len(got.Relays) != 0 || got.Counters != nil || got.Note == "" {
		t.Errorf("after the service's removal: %+v", got)
	}
	if n, err := testutil.GatherAndCount(reg, "kproxy_userspace_service_rejected_total", "kproxy_userspace_service_active"); err != nil || n != 0 {
		t.Errorf("%d per-service series left after the service's removal (%v)", n, err)
	}
}

// TestProgrammedSteeredCounters: under socket-lookup portals every service
// port shares the relay sockets, yet each is counted apart: its own
// connections, flows, bytes and refusals, nothing of its neighbours'. (A
// port without endpoints is dropped by the program, before any relay.)
func TestProgrammedSteeredCounters(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	// The service addresses are local (the program looks sockets up only
	// for local traffic); so are the endpoints: one serving TCP and UDP,
	// one serving nothing.
	lab.Run(t, "ip", "route", "add", "local", "198.18.0.0/24", "dev", "lo")
	lab.Run(t, "ip", "route", "add", "local", "198.19.1.0/24", "dev", "lo")
	endpoint := "198.19.1.11:8080"
	ln, err := net.Listen("tcp4", endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello"))
			c.Close()
		}
	}()
	pc, err := net.ListenPacket("udp4", endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 100)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()

	nodeIP := netip.MustParseAddr("198.19.0.1")
	m, err := New(context.Background(), Config{
		Features: kernel.Features{SKLookup: kernel.Support{Present: true}}, Portals: contract.PortalsSKLookup,
		NodeName: "node-a", Registerer: prometheus.NewRegistry(), Routes: fakeroutes.New(nodeIP), ServiceMetrics: true,
		LocalAddresses: func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("127.0.0.1"), nodeIP}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tr := servicemap.NewTracker("node-a", nil)
	for _, s := range []struct {
		name, ip  string
		protocol  v1.Protocol
		endpoints []string
	}{
		{"web", "198.18.0.10", v1.ProtocolTCP, []string{"198.19.1.11"}},
		{"idle", "198.18.0.11", v1.ProtocolTCP, []string{"198.19.1.11"}},
		{"down", "198.18.0.12", v1.ProtocolTCP, []string{"198.19.1.12"}},
		{"dns", "198.18.0.13", v1.ProtocolUDP, []string{"198.19.1.11"}},
	} {
		tr.OnServiceUpdate(service(s.name, s.ip, s.protocol, 0))
		tr.OnEndpointSliceUpdate(slice(s.name, s.protocol, s.endpoints...))
	}
	tr.OnSynced()
	snap, changes := tr.Snapshot()
	if err := m.Sync(context.Background(), snap, changes); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		c, err := net.Dial("tcp4", "198.18.0.10:80")
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if got, err := io.ReadAll(c); string(got) != "hello" {
			t.Fatalf("demo/web through its cluster IP: %q, %v", got, err)
		}
		c.Close()
	}
	if c, err := net.Dial("tcp4", "198.18.0.12:80"); err == nil {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Read(make([]byte, 1)) // reset: the endpoint refused
		c.Close()
	}
	u, err := net.Dial("udp4", "198.18.0.13:80")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	_ = u.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := u.Write([]byte("query")); err != nil {
		t.Fatal(err)
	}
	if n, err := u.Read(make([]byte, 100)); n != len("query") {
		t.Fatalf("ns/dns through its cluster IP: %d bytes, %v", n, err)
	}

	for _, want := range []struct {
		name     string
		protocol v1.Protocol
		counters mode.RelayCounters
	}{
		{"web", v1.ProtocolTCP, mode.RelayCounters{Connections: 2, BytesToClient: 10}},
		{"idle", v1.ProtocolTCP, mode.RelayCounters{}},
		{"down", v1.ProtocolTCP, mode.RelayCounters{DialFailures: 1, Refused: map[string]uint64{lbmetrics.ReasonDialFailed: 1}}},
		{"dns", v1.ProtocolUDP, mode.RelayCounters{Flows: 1, Active: 1, BytesToEndpoint: 5, BytesToClient: 5}},
	} {
		name := keyOf(want.name, want.protocol, balancer.Internal).Port
		lab.Eventually(t, want.name+"'s counters", func() (bool, string) {
			got := m.Programmed()(name)
			if got.Note != "" || len(got.Relays) == 0 || got.Relays[0].Portal != string(contract.PortalsSKLookup) {
				return false, fmt.Sprintf("%+v", got)
			}
			return got.Counters != nil && reflect.DeepEqual(*got.Counters, want.counters), fmt.Sprintf("%+v", got.Counters)
		})
	}
}
