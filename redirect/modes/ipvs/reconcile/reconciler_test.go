package reconcile

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
	"kproxy.dev/kproxy/sync/servicemap"
)

func TestSyncFromEmptyReachesDesired(t *testing.T) {
	lb := svc("lb", v1.ProtocolTCP, "198.18.0.3", 443, "198.19.1.13:8443")
	lb.NodePort, lb.LoadBalancerIPs = 30443, addrs("198.18.200.1")
	lb.AffinityTimeout = 30 * time.Second
	tests := []struct {
		name  string
		ports []*servicemap.ServicePort
	}{
		{"nothing", nil},
		{"tcp and udp", []*servicemap.ServicePort{
			svc("web", v1.ProtocolTCP, "198.18.0.1", 80, "198.19.1.11:8080", "198.19.1.12:8080"),
			svc("dns", v1.ProtocolUDP, "198.18.0.2", 53, "198.19.1.11:53"),
		}},
		{"loadbalancer with nodeport and affinity", []*servicemap.ServicePort{lb}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t)
			st := build(t, cfg(), tt.ports...)
			g.sync(t, st)
			g.expectMatches(t, st)
			g.resetCounts()
			g.sync(t, st)
			if ops := g.ops(); len(ops) != 0 {
				t.Errorf("a second sync of the same state made operations: %v", ops)
			}
		})
	}
}

func TestEndpointChangeIsProportional(t *testing.T) {
	tests := []struct {
		name  string
		proto v1.Protocol
		want  []string
	}{
		// TCP: the new one is added, the old one drains at weight 0 and,
		// holding no connection, is deleted at once.
		{"tcp", v1.ProtocolTCP, []string{
			"NewDestination TCP/198.18.100.1:80 -> 198.19.1.13:8080",
			"UpdateDestination TCP/198.18.100.1:80 -> 198.19.1.11:8080",
			"GetDestinations TCP/198.18.100.1:80",
			"DelDestination TCP/198.18.100.1:80 -> 198.19.1.11:8080",
		}},
		// UDP: the old one goes at once.
		{"udp", v1.ProtocolUDP, []string{
			"NewDestination UDP/198.18.100.1:80 -> 198.19.1.13:8080",
			"DelDestination UDP/198.18.100.1:80 -> 198.19.1.11:8080",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t)
			others := manyPorts(50, 2)
			before := append(slices.Clone(others), svc("web", tt.proto, "198.18.100.1", 80, "198.19.1.11:8080", "198.19.1.12:8080"))
			after := append(slices.Clone(others), svc("web", tt.proto, "198.18.100.1", 80, "198.19.1.12:8080", "198.19.1.13:8080"))
			g.sync(t, build(t, cfg(), before...))
			g.resetCounts()
			g.sync(t, build(t, cfg(), after...))
			if got := g.ops(); !slices.Equal(got, tt.want) {
				t.Errorf("operations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestGracefulTermination(t *testing.T) {
	g := newRig(t)
	key := desired.Key{Addr: mustAddr("198.18.0.1"), Protocol: v1.ProtocolTCP, Port: 80}
	old := mustAddrPort("198.19.1.11:8080")
	g.sync(t, build(t, cfg(), svc("web", v1.ProtocolTCP, "198.18.0.1", 80, "198.19.1.11:8080", "198.19.1.12:8080")))
	if err := g.ipvs.SetConnections(key, old, 3, 1); err != nil {
		t.Fatal(err)
	}
	after := build(t, cfg(), svc("web", v1.ProtocolTCP, "198.18.0.1", 80, "198.19.1.12:8080"))
	res := g.sync(t, after)
	if res.Draining != 1 || len(res.RemovedRealServers) != 0 {
		t.Fatalf("after removal: %+v, want one draining, none removed", res)
	}
	if !strings.Contains(g.dump(), "-> 198.19.1.11:8080 weight 0 connections 3/1") {
		t.Errorf("retired real server is not at weight 0 with its connections:\n%s", g.dump())
	}

	// Connections remain and the bound has not passed: it stays.
	g.clock.Step(30 * time.Second)
	if res, err := g.r.Drain(); err != nil || res.Draining != 1 {
		t.Fatalf("Drain before the bound = %+v, %v; want it still draining", res, err)
	}
	// The bound passes: it goes though connections remain.
	g.clock.Step(31 * time.Second)
	res, err := g.r.Drain()
	if err != nil || res.Draining != 0 || !slices.Equal(res.RemovedRealServers, []RealServerRef{{key, old}}) {
		t.Fatalf("Drain after the bound = %+v, %v; want %s removed", res, err, old)
	}
	g.expectMatches(t, after)
}

func TestDrainedRealServerGoesWhenIdleAndComesBackWhenWanted(t *testing.T) {
	g := newRig(t)
	key := desired.Key{Addr: mustAddr("198.18.0.1"), Protocol: v1.ProtocolTCP, Port: 80}
	both := build(t, cfg(), svc("web", v1.ProtocolTCP, "198.18.0.1", 80, "198.19.1.11:8080", "198.19.1.12:8080"))
	one := build(t, cfg(), svc("web", v1.ProtocolTCP, "198.18.0.1", 80, "198.19.1.12:8080"))
	g.sync(t, both)
	_ = g.ipvs.SetConnections(key, mustAddrPort("198.19.1.11:8080"), 1, 0)
	g.sync(t, one)
	// Wanted again while draining: back to weight 1, no longer draining.
	if res := g.sync(t, both); res.Draining != 0 {
		t.Errorf("revived real server still draining: %+v", res)
	}
	_ = g.ipvs.SetConnections(key, mustAddrPort("198.19.1.11:8080"), 0, 0)
	g.expectMatches(t, both)
	// Removed again, idle: deleted by the same sync's drain.
	if res := g.sync(t, one); res.Draining != 0 || len(res.RemovedRealServers) != 1 {
		t.Errorf("idle retired real server: %+v, want it removed at once", res)
	}
	g.expectMatches(t, one)
}

func TestForeignVirtualServersAreLeftAlone(t *testing.T) {
	g := newRig(t, "198.18.250.0/24")
	excluded := desired.VirtualServer{Key: desired.Key{Addr: mustAddr("198.18.250.1"), Protocol: v1.ProtocolTCP, Port: 80}, Scheduler: "wrr"}
	ipv6 := desired.VirtualServer{Key: desired.Key{Addr: mustAddr("fd00:18::1"), Protocol: v1.ProtocolTCP, Port: 80}, Scheduler: "rr"}
	stale := desired.VirtualServer{Key: desired.Key{Addr: mustAddr("198.18.0.9"), Protocol: v1.ProtocolUDP, Port: 53}, Scheduler: "rr"}
	g.ipvs.Add(excluded, desired.RealServer{Addr: mustAddr("198.19.9.9"), Port: 80, Weight: 5})
	g.ipvs.Add(ipv6)
	g.ipvs.Add(stale)
	res := g.sync(t, build(t, cfg()))
	if !slices.Equal(res.RemovedVirtualServers, []desired.Key{stale.Key}) {
		t.Errorf("removed %v, want only %s", res.RemovedVirtualServers, stale.Key)
	}
	dump := g.dump()
	for _, keep := range []string{"TCP 198.18.250.1:80 wrr\n  -> 198.19.9.9:80 weight 5", "TCP [fd00:18::1]:80 rr"} {
		if !strings.Contains(dump, keep) {
			t.Errorf("foreign virtual server %q was changed:\n%s", keep, dump)
		}
	}
}

func TestFailureStopsOneServiceAndIsRetried(t *testing.T) {
	g := newRig(t)
	st := build(t, cfg(),
		svc("a", v1.ProtocolTCP, "198.18.0.1", 80, "198.19.1.11:8080"),
		svc("b", v1.ProtocolTCP, "198.18.0.2", 80, "198.19.1.12:8080"))
	g.setHook(func(op, target string) error {
		if op == "NewDestination" && strings.HasPrefix(target, "TCP/198.18.0.1:80") {
			return syscall.ENOMEM
		}
		return nil
	})
	_, err := g.r.Sync(context.Background(), st, false)
	if err == nil || !strings.Contains(err.Error(), "TCP/198.18.0.1:80") || !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("Sync error = %v, want ENOMEM naming TCP/198.18.0.1:80", err)
	}
	addrs, _ := g.link.Addrs()
	if slices.Contains(addrs, mustAddr("198.18.0.1")) || !slices.Contains(addrs, mustAddr("198.18.0.2")) {
		t.Errorf("bound addresses %v: the failed service's address must not be bound, the other's must", addrs)
	}
	g.setHook(nil)
	g.resetCounts()
	g.sync(t, st)
	g.expectMatches(t, st)
	if !slices.Contains(g.ops(), "GetServices") {
		t.Errorf("the retry did not re-read the kernel: %v", g.ops())
	}
}

func TestRemovalUnbindsBeforeDeleting(t *testing.T) {
	g := newRig(t)
	g.sync(t, build(t, cfg(), svc("a", v1.ProtocolTCP, "198.18.0.1", 80, "198.19.1.11:8080")))
	g.resetCounts()
	g.sync(t, build(t, cfg()))
	ops := g.ops()
	unbind, del := slices.Index(ops, "DelAddr 198.18.0.1"), slices.Index(ops, "DelService TCP/198.18.0.1:80")
	if unbind < 0 || del < 0 || unbind > del {
		t.Errorf("want the address unbound before the service is deleted, got %v", ops)
	}
}

func TestKernelRefusalsAreReported(t *testing.T) {
	tests := []struct {
		name string
		c    func(*desired.Config)
		want string
	}{
		{"unknown scheduler", func(c *desired.Config) { c.Scheduler = "nope" }, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t)
			c := cfg()
			tt.c(&c)
			_, err := g.r.Sync(context.Background(), build(t, c, svc("a", v1.ProtocolTCP, "198.18.0.1", 80)), false)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "creating IPVS service TCP/198.18.0.1:80") {
				t.Errorf("Sync error = %v, want %q naming the service", err, tt.want)
			}
		})
	}
}

func TestCleanup(t *testing.T) {
	g := newRig(t, "198.18.250.0/24")
	excluded := desired.VirtualServer{Key: desired.Key{Addr: mustAddr("198.18.250.1"), Protocol: v1.ProtocolTCP, Port: 80}, Scheduler: "rr"}
	g.ipvs.Add(excluded)
	g.sync(t, build(t, cfg(), svc("a", v1.ProtocolTCP, "198.18.0.1", 80, "198.19.1.11:8080")))

	g.sets.SetReferenced(desired.SetClusterIP, true)
	err := g.r.Cleanup()
	if err == nil || !strings.Contains(err.Error(), "ipset KUBE-CLUSTER-IP") {
		t.Errorf("Cleanup with a set in use = %v, want it to name KUBE-CLUSTER-IP", err)
	}
	g.sets.SetReferenced(desired.SetClusterIP, false)
	if err := g.r.Cleanup(); err != nil {
		t.Fatalf("second Cleanup: %v", err)
	}
	if names := g.sets.Names(); len(names) != 0 {
		t.Errorf("sets left: %v", names)
	}
	if g.link.Exists() {
		t.Errorf("%s left", handles.DummyLink)
	}
	if want := "# virtual servers\nTCP 198.18.250.1:80 rr\n"; !strings.HasPrefix(g.dump(), want) {
		t.Errorf("after cleanup:\n%s\nwant only the excluded service", g.dump())
	}
}
