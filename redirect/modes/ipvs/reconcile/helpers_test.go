package reconcile

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/fakeipvs"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// rig is a reconciler over fresh fakes with a fake clock.
type rig struct {
	ipvs  *fakeipvs.IPVS
	link  *fakeipvs.Link
	sets  *fakeipvs.IPSets
	clock *clocktesting.FakeClock
	r     *Reconciler
	// log records every operation in order, "Op target".
	mu  sync.Mutex
	log []string
}

func newRig(t testing.TB, exclude ...string) *rig {
	t.Helper()
	g := &rig{ipvs: &fakeipvs.IPVS{}, link: &fakeipvs.Link{}, sets: &fakeipvs.IPSets{},
		clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	g.setHook(nil)
	opts := Options{IPVS: g.ipvs, Link: g.link, IPSets: g.sets, Family: ipfamily.IPv4,
		Clock: g.clock, DrainTimeout: time.Minute}
	for _, c := range exclude {
		opts.ExcludeCIDRs = append(opts.ExcludeCIDRs, netip.MustParsePrefix(c))
	}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	g.r = r
	return g
}

// setHook installs fail on every fake, recording each operation first.
func (g *rig) setHook(fail fakeipvs.Hook) {
	h := func(op, target string) error {
		g.mu.Lock()
		g.log = append(g.log, strings.TrimSpace(op+" "+target))
		g.mu.Unlock()
		if fail != nil {
			return fail(op, target)
		}
		return nil
	}
	g.ipvs.Hook, g.link.Hook, g.sets.Hook = h, h, h
}

func (g *rig) resetCounts() {
	g.ipvs.Reset()
	g.link.Reset()
	g.sets.Reset()
	g.mu.Lock()
	g.log = nil
	g.mu.Unlock()
}

func (g *rig) ops() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.log...)
}

func (g *rig) dump() string { return fakeipvs.Dump(g.ipvs, g.link, g.sets) }

func (g *rig) sync(t testing.TB, st *desired.State) Result {
	t.Helper()
	res, err := g.r.Sync(context.Background(), st, false)
	if err != nil {
		t.Fatalf("Sync: %v", err)
	}
	return res
}

func (g *rig) expectMatches(t testing.TB, st *desired.State) {
	t.Helper()
	if got, want := g.dump(), fakeipvs.ExpectedDump(st); got != want {
		t.Errorf("kernel state differs from the desired state\n--- got\n%s--- want\n%s", got, want)
	}
}

func cfg() desired.Config {
	return desired.Config{
		Family: ipfamily.IPv4, MasqueradeBit: 14,
		LocalAddrs: []netip.Addr{netip.MustParseAddr("198.19.0.1")},
		NodeIPs:    []netip.Addr{netip.MustParseAddr("198.19.0.1")},
		Topology:   servicemap.Topology{NodeName: "node-a"},
	}
}

// svc is a service port "default/<name>:p" with a cluster IP and ready
// endpoints on other nodes.
func svc(name string, proto v1.Protocol, clusterIP string, port uint16, eps ...string) *servicemap.ServicePort {
	sp := &servicemap.ServicePort{
		Name: servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: name},
			Port: "p", Protocol: proto},
		ClusterIPs: []netip.Addr{netip.MustParseAddr(clusterIP)},
		Port:       port,
	}
	for _, e := range eps {
		ap := netip.MustParseAddrPort(e)
		sp.Endpoints = append(sp.Endpoints, servicemap.Endpoint{Addr: ap.Addr(), Port: ap.Port(), Ready: true, Serving: true})
	}
	return sp
}

func build(t testing.TB, c desired.Config, ports ...*servicemap.ServicePort) *desired.State {
	t.Helper()
	st, err := desired.Build(c, servicemap.NewSnapshot(1, nil, ports...))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// manyPorts makes n TCP ports with eps endpoints each.
func manyPorts(n, eps int) []*servicemap.ServicePort {
	out := make([]*servicemap.ServicePort, 0, n)
	for i := range n {
		var e []string
		for j := range eps {
			e = append(e, fmt.Sprintf("198.19.%d.%d:%d", 1+i/250%200, 1+i%250, 8000+j))
		}
		out = append(out, svc(fmt.Sprintf("s%05d", i), v1.ProtocolTCP, fmt.Sprintf("198.18.%d.%d", i/256, i%256), 80, e...))
	}
	return out
}
