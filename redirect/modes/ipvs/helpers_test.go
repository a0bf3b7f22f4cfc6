package ipvs

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/fakeipvs"
	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
	"kproxy.dev/kproxy/sync/sysctl/fakesysctl"
)

// newFakeSysctls is a fresh network namespace's sysctls the mode writes.
func newFakeSysctls() *fakesysctl.Sysctls {
	return fakesysctl.New(map[string]string{
		"net/ipv4/ip_forward": "0", "net/ipv4/vs/conntrack": "0",
		"net/ipv4/vs/expire_nodest_conn": "0", "net/ipv4/vs/expire_quiescent_template": "0",
	})
}

// rig is an IPv4 Mode over fresh fakes, without a background drain.
type rig struct {
	ipvs    *fakeipvs.IPVS
	link    *fakeipvs.Link
	sets    *fakeipvs.IPSets
	ipt     *fakeiptables.Fake
	sysctls *fakesysctl.Sysctls
	clock   *clocktesting.FakeClock
	reg     *prometheus.Registry
	m       *Mode

	mu  sync.Mutex
	log []string // "Op target" of every IPVS, link and ipset call
}

func newRig(t testing.TB, drainInterval time.Duration) *rig {
	t.Helper()
	g := &rig{ipvs: &fakeipvs.IPVS{}, link: &fakeipvs.Link{}, sets: &fakeipvs.IPSets{},
		ipt: fakeiptables.New(ipfamily.IPv4), sysctls: newFakeSysctls(), reg: prometheus.NewRegistry(),
		clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	g.setHook(nil)
	tables, err := NewTables(ipfamily.IPv4, kernel.NFT, g.ipt)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{
		Families: []FamilyConfig{{Desired: baseConfig(), IPVS: g.ipvs, Link: g.link, IPSets: g.sets, Tables: tables}},
		NodeName: "node-a",
		LocalAddresses: func() ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("fd00:19::1")}, nil
		},
		Sysctls: g.sysctls, DrainInterval: drainInterval, DrainTimeout: time.Minute, Clock: g.clock,
		Registry: g.reg, Logger: klog.Background(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	g.m = m
	return g
}

func baseConfig() desired.Config {
	return desired.Config{Family: ipfamily.IPv4, MasqueradeBit: 14,
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.19.128.0/17")}}
}

// setHook installs fail on every IPVS fake, recording each call first.
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

func (g *rig) resetLog() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.log = nil
}

func (g *rig) ops() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.log)
}

// writes are the logged operations that change the kernel (not Get*).
func (g *rig) writes() []string {
	return slices.DeleteFunc(g.ops(), func(op string) bool { return strings.HasPrefix(op, "Get") })
}

func (g *rig) sync(ports ...*servicemap.ServicePort) error {
	return g.m.Sync(context.Background(), snapshot(ports...), &servicemap.ChangeSet{})
}

func (g *rig) mustSync(t testing.TB, ports ...*servicemap.ServicePort) {
	t.Helper()
	if err := g.sync(ports...); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// expectKernel checks that the fakes hold exactly the state Build wants
// for ports, with the rig's node addresses.
func (g *rig) expectKernel(t testing.TB, ports ...*servicemap.ServicePort) {
	t.Helper()
	cfg := baseConfig()
	cfg.LocalAddrs = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.19.0.1")}
	cfg.Topology = servicemap.Topology{NodeName: "node-a"}
	st, err := desired.Build(cfg, snapshot(ports...))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fakeipvs.Dump(g.ipvs, g.link, g.sets), fakeipvs.ExpectedDump(st); got != want {
		t.Errorf("IPVS state differs from the desired state\n--- got\n%s--- want\n%s", got, want)
	}
	for _, table := range st.Tables {
		for _, c := range table.Chains {
			var want []string
			for _, r := range c.Rules {
				want = append(want, "-A "+c.Name+" "+r)
			}
			if got := g.ipt.Rules(table.Name, c.Name); !slices.Equal(got, want) {
				t.Errorf("%s/%s:\n%s\nwant:\n%s", table.Name, c.Name, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}
	}
}

// value reads a gauge or counter from the registry; labels are name,
// value pairs the metric must carry.
func (g *rig) value(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	families, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			match := true
			for i := 0; i+1 < len(labels); i += 2 {
				match = match && have[labels[i]] == labels[i+1]
			}
			if !match {
				continue
			}
			if m.Gauge != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}

func snapshot(ports ...*servicemap.ServicePort) *servicemap.Snapshot {
	return testkit.Snapshot(ports...)
}

// svc is a service port "default/<name>:p" with a cluster IP and ready
// endpoints on other nodes.
func svc(name string, proto v1.Protocol, clusterIP string, port uint16, eps ...string) *servicemap.ServicePort {
	sp := testkit.Port("default", name, port, clusterIP, testkit.Named("p"), testkit.Protocol(proto))
	for _, e := range eps {
		sp.Endpoints = append(sp.Endpoints, testkit.EP(e))
	}
	return sp
}

func mustAddr(s string) netip.Addr         { return netip.MustParseAddr(s) }
func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
