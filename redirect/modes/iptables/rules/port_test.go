package rules

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/servicemap"
)

// lines flattens a port's rules to "<table> <chain> <rule>" lines, shared
// rules first.
func lines(pr PortRules) []string {
	var out []string
	for _, r := range pr.Shared {
		out = append(out, string(r.Table)+" "+r.Chain+" "+r.Rule)
	}
	for _, c := range pr.Chains {
		for _, r := range c.Rules {
			out = append(out, string(c.Table)+" "+c.Name+" "+r)
		}
	}
	return out
}

// TestForPortBehaviour checks kube-proxy's decisions one at a time, by the
// rules that must and must not appear. Chain names: the port is
// default/web:http over TCP, whose hash is CDGGSHYLG3RE2FKL.
func TestForPortBehaviour(t *testing.T) {
	const (
		svc = "KUBE-SVC-CDGGSHYLG3RE2FKL"
		svl = "KUBE-SVL-CDGGSHYLG3RE2FKL"
		ext = "KUBE-EXT-CDGGSHYLG3RE2FKL"
		fw  = "KUBE-FW-CDGGSHYLG3RE2FKL"
	)
	sep := func(endpoint string) string {
		return EndpointChain(testkit.PortName("default", "web", "http", "TCP"), netip.MustParseAddrPort(endpoint))
	}
	web := func(opts ...testkit.PortOpt) *servicemap.ServicePort {
		return testkit.Port("default", "web", 80, "198.18.0.10", opts...)
	}
	tests := []struct {
		name   string
		cfg    Config
		sp     *servicemap.ServicePort
		chains []string // exactly the port's chains, in order
		has    []string // lines (or their prefixes ending in "...") that must appear
		lacks  []string // substrings no line may contain
	}{
		{
			name:   "cluster IP spreads evenly over three endpoints",
			sp:     web(testkit.ThreeEndpoints()),
			chains: []string{sep("198.19.1.11:8080"), sep("198.19.1.12:8080"), sep("198.19.1.13:8080"), svc},
			has: []string{
				"nat KUBE-SERVICES -d 198.18.0.10/32 -p tcp -m comment --comment \"default/web:http cluster IP\" -m tcp --dport 80 -j " + svc,
				"nat " + svc + " -m comment --comment \"default/web:http -> 198.19.1.11:8080\" -m statistic --mode random --probability 0.33333333349 -j " + sep("198.19.1.11:8080"),
				"nat " + svc + " -m comment --comment \"default/web:http -> 198.19.1.12:8080\" -m statistic --mode random --probability 0.50000000000 -j " + sep("198.19.1.12:8080"),
				"nat " + svc + " -m comment --comment \"default/web:http -> 198.19.1.13:8080\" -j " + sep("198.19.1.13:8080"),
				"nat " + sep("198.19.1.12:8080") + " -s 198.19.1.12/32 -m comment --comment \"default/web:http\" -j KUBE-MARK-MASQ",
				"nat " + sep("198.19.1.12:8080") + " -p tcp -m comment --comment \"default/web:http\" -m tcp -j DNAT --to-destination 198.19.1.12:8080",
			},
			// Without --cluster-cidr or --masquerade-all nothing is
			// masqueraded at the cluster IP.
			lacks: []string{"cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ", ext, "filter"},
		},
		{
			name: "masquerade-all marks every cluster IP connection",
			cfg:  testkit.With(v4Config(), func(c *Config) { c.MasqueradeAll = true }),
			sp:   web(testkit.ThreeEndpoints()),
			has:  []string{"nat " + svc + " -d 198.18.0.10/32 -p tcp -m comment --comment \"default/web:http cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ"},
		},
		{
			name: "cluster CIDR marks only off-cluster sources",
			cfg:  testkit.With(v4Config(), func(c *Config) { c.ClusterCIDRs = testkit.Prefixes("198.19.1.7/24") }),
			sp:   web(testkit.ThreeEndpoints()),
			has:  []string{"nat " + svc + " ! -s 198.19.1.0/24 -d 198.18.0.10/32 -p tcp -m comment --comment \"default/web:http cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ"},
		},
		{
			name: "affinity checks recent clients before balancing",
			sp:   web(testkit.Affinity(90*time.Second), testkit.Endpoints(testkit.EP("198.19.1.11:8080"))),
			has: []string{
				"nat " + svc + " -m comment --comment \"default/web:http -> 198.19.1.11:8080\" -m recent --rcheck --seconds 90 --reap --name " + sep("198.19.1.11:8080") + " --mask 255.255.255.255 --rsource -j " + sep("198.19.1.11:8080"),
				"nat " + sep("198.19.1.11:8080") + " -p tcp -m comment --comment \"default/web:http\" -m recent --set --name " + sep("198.19.1.11:8080") + " --mask 255.255.255.255 --rsource -m tcp -j DNAT --to-destination 198.19.1.11:8080",
			},
		},
		{
			name:   "internal policy Local keeps cluster IP traffic on this node",
			sp:     web(testkit.InternalLocal(), testkit.Endpoints(testkit.EP("198.19.1.11:8080"), testkit.EP("198.19.1.12:8080", testkit.Local))),
			chains: []string{sep("198.19.1.12:8080"), svl},
			has:    []string{"nat KUBE-SERVICES -d 198.18.0.10/32 -p tcp -m comment --comment \"default/web:http cluster IP\" -m tcp --dport 80 -j " + svl},
			lacks:  []string{svc, "198.19.1.11"},
		},
		{
			name:   "internal policy Local without local endpoints drops",
			sp:     web(testkit.InternalLocal(), testkit.Endpoints(testkit.EP("198.19.1.11:8080"))),
			chains: []string{},
			has:    []string{"filter KUBE-SERVICES -d 198.18.0.10/32 -p tcp -m comment --comment \"default/web:http has no local endpoints\" -m tcp --dport 80 -j DROP"},
			lacks:  []string{"nat"},
		},
		{
			name:   "no endpoints rejects on every address",
			sp:     web(testkit.NodePort(30080), testkit.ExternalIPs("198.18.100.1"), testkit.LoadBalancerIPs("198.18.200.1"), testkit.SourceRanges("203.0.113.0/24")),
			chains: []string{},
			has: []string{
				"filter KUBE-SERVICES -d 198.18.0.10/32 -p tcp -m comment --comment \"default/web:http has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable",
				"filter KUBE-EXTERNAL-SERVICES -d 198.18.100.1/32 ...",
				"filter KUBE-EXTERNAL-SERVICES -d 198.18.200.1/32 ...",
				"filter KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment \"default/web:http has no endpoints\" -m addrtype --dst-type LOCAL -m tcp --dport 30080 -j REJECT --reject-with icmp-port-unreachable",
			},
			// Without endpoints the firewall has nothing to protect.
			lacks: []string{"nat", "KUBE-PROXY-FIREWALL"},
		},
		{
			name:   "external policy Local without local endpoints drops outside traffic but serves the node's own",
			sp:     web(testkit.NodePort(30080), testkit.ExternalLocal(0), testkit.Endpoints(testkit.EP("198.19.1.11:8080"))),
			chains: []string{sep("198.19.1.11:8080"), svc, ext},
			has: []string{
				"filter KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment \"default/web:http has no local endpoints\" -m addrtype --dst-type LOCAL -m tcp --dport 30080 -j DROP",
				"nat KUBE-NODEPORTS -p tcp -m comment --comment \"default/web:http\" -m tcp --dport 30080 -j " + ext,
				"nat " + ext + " -m comment --comment \"route LOCAL traffic for default/web:http external destinations\" -m addrtype --src-type LOCAL -j " + svc,
			},
			lacks: []string{ext + " -j ", svl},
		},
		{
			name:   "external policy Local with a local endpoint",
			sp:     web(testkit.NodePort(30080), testkit.ExternalLocal(31000), testkit.Endpoints(testkit.EP("198.19.1.11:8080"), testkit.EP("198.19.1.12:8080", testkit.Local))),
			chains: []string{sep("198.19.1.11:8080"), sep("198.19.1.12:8080"), svc, svl, ext},
			has: []string{
				"nat " + ext + " -j " + svl,
				"nat " + svl + " -m comment --comment \"default/web:http -> 198.19.1.12:8080\" -j " + sep("198.19.1.12:8080"),
				"filter KUBE-NODEPORTS -p tcp -m comment --comment \"default/web:http health check node port\" -m tcp --dport 31000 -j ACCEPT",
			},
			lacks: []string{"DROP", "masquerade traffic for"},
		},
		{
			name:   "source ranges send LoadBalancer traffic through the firewall chain",
			sp:     web(testkit.LoadBalancerIPs("198.18.200.1"), testkit.SourceRanges("203.0.113.0/24"), testkit.Endpoints(testkit.EP("198.19.1.11:8080"))),
			chains: []string{sep("198.19.1.11:8080"), svc, ext, fw},
			has: []string{
				"nat KUBE-SERVICES -d 198.18.200.1/32 -p tcp -m comment --comment \"default/web:http loadbalancer IP\" -m tcp --dport 80 -j " + fw,
				"nat " + fw + " -s 203.0.113.0/24 -m comment --comment \"default/web:http loadbalancer IP\" -j " + ext,
				"nat " + fw + " -m comment --comment \"other traffic to default/web:http will be dropped by KUBE-PROXY-FIREWALL\"",
				"filter KUBE-PROXY-FIREWALL -d 198.18.200.1/32 -p tcp -m comment --comment \"default/web:http traffic not accepted by " + fw + "\" -m tcp --dport 80 -j DROP",
			},
			// The node's IP is outside the range: the VIP is no allowed source.
			lacks: []string{"-s 198.18.200.1/32"},
		},
		{
			name:   "a zero-length source range allows everyone",
			sp:     web(testkit.LoadBalancerIPs("198.18.200.1"), testkit.SourceRanges("203.0.113.0/24", "0.0.0.0/0"), testkit.Endpoints(testkit.EP("198.19.1.11:8080"))),
			chains: []string{sep("198.19.1.11:8080"), svc, ext},
			lacks:  []string{fw, "KUBE-PROXY-FIREWALL"},
		},
		{
			name:   "terminating endpoints serve only when none is ready",
			sp:     web(testkit.Endpoints(testkit.EP("198.19.1.11:8080", testkit.Terminating), testkit.EP("198.19.1.12:8080", testkit.Gone))),
			chains: []string{sep("198.19.1.11:8080"), svc},
			lacks:  []string{"198.19.1.12", "filter"},
		},
		{
			name:   "ready endpoints win over terminating ones",
			sp:     web(testkit.Endpoints(testkit.EP("198.19.1.11:8080", testkit.Terminating), testkit.EP("198.19.1.12:8080"))),
			chains: []string{sep("198.19.1.12:8080"), svc},
		},
		{
			name:   "zone hints narrow the cluster endpoints",
			sp:     web(testkit.Endpoints(testkit.EP("198.19.1.11:8080", testkit.ZoneHints("zone-b")), testkit.EP("198.19.1.12:8080", testkit.ZoneHints("zone-a")))),
			chains: []string{sep("198.19.1.12:8080"), svc},
		},
		{
			name: "endpoints are balanced in the order of their text, as kube-proxy sorts them",
			sp:   web(testkit.Endpoints(testkit.EP("198.19.1.9:8080"), testkit.EP("198.19.1.10:8080"))),
			has: []string{
				"nat " + svc + " -m comment --comment \"default/web:http -> 198.19.1.10:8080\" -m statistic --mode random --probability 0.50000000000 -j " + sep("198.19.1.10:8080"),
				"nat " + svc + " -m comment --comment \"default/web:http -> 198.19.1.9:8080\" -j " + sep("198.19.1.9:8080"),
			},
		},
		{
			name:   "endpoints of the other family are ignored",
			sp:     web(testkit.Endpoints(testkit.EP("[fd00:19:1::11]:8080"), testkit.EP("198.19.1.11:8080"))),
			chains: []string{sep("198.19.1.11:8080"), svc},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if cfg.Family == "" {
				cfg = v4Config()
			}
			pr, err := mustBuilder(t, cfg).ForPort(tt.sp)
			if err != nil {
				t.Fatal(err)
			}
			got := lines(pr)
			if tt.chains != nil {
				var names []string
				for _, c := range pr.Chains {
					names = append(names, c.Name)
				}
				if !slices.Equal(names, tt.chains) && !(len(names) == 0 && len(tt.chains) == 0) {
					t.Errorf("chains %v, want %v", names, tt.chains)
				}
			}
			for _, want := range tt.has {
				prefix, isPrefix := strings.CutSuffix(want, "...")
				if !slices.ContainsFunc(got, func(l string) bool { return l == want || isPrefix && strings.HasPrefix(l, prefix) }) {
					t.Errorf("missing rule\n  %s\nin\n  %s", want, strings.Join(got, "\n  "))
				}
			}
			for _, bad := range tt.lacks {
				for _, l := range got {
					if strings.Contains(l, bad) {
						t.Errorf("rule %q contains %q", l, bad)
					}
				}
			}
		})
	}
}

// TestPortChainsAreSelfContained checks, for every scenario, what a
// restore of a port's chains relies on: each per-port chain a rule jumps
// to is one of the port's own chains, listed before the chain jumping to
// it; no chain is empty; and every chain is reached from somewhere.
func TestPortChainsAreSelfContained(t *testing.T) {
	for _, sc := range scenarios() {
		b := mustBuilder(t, sc.Config)
		for _, pr := range mustPorts(t, b, sc.Ports...) {
			pos := map[string]int{}
			for i, c := range pr.Chains {
				pos[c.Name] = i
				if len(c.Rules) == 0 {
					t.Errorf("%s %s: chain %s has no rules", sc.Name, pr.Name, c.Name)
				}
			}
			reached := map[string]bool{}
			check := func(from string, at int, rule string) {
				_, target, ok := strings.Cut(rule, "-j ")
				target, _, _ = strings.Cut(target, " ")
				if !ok || !IsPortChain(target) {
					return
				}
				reached[target] = true
				i, own := pos[target]
				switch {
				case !own:
					t.Errorf("%s %s: %s jumps to %s, which the port does not create", sc.Name, pr.Name, from, target)
				case at >= 0 && i >= at:
					t.Errorf("%s %s: %s jumps to %s, listed after it", sc.Name, pr.Name, from, target)
				}
			}
			for _, r := range pr.Shared {
				check(r.Chain, -1, r.Rule)
			}
			for i, c := range pr.Chains {
				for _, r := range c.Rules {
					check(c.Name, i, r)
				}
			}
			for _, c := range pr.Chains {
				if !reached[c.Name] {
					t.Errorf("%s %s: nothing jumps to %s", sc.Name, pr.Name, c.Name)
				}
			}
		}
	}
}

// TestForPortLeavesItsInputAlone: snapshot ports are shared and immutable;
// building rules (which sorts endpoints as text) must not reorder them.
func TestForPortLeavesItsInputAlone(t *testing.T) {
	sp := testkit.Port("default", "web", 80, "198.18.0.10", testkit.NodePort(30080), testkit.ExternalLocal(0),
		testkit.Endpoints(testkit.EP("198.19.1.9:8080", testkit.Local), testkit.EP("198.19.1.10:8080"), testkit.EP("198.19.1.11:8080", testkit.Local)))
	before := slices.Clone(sp.Endpoints)
	pr, err := mustBuilder(t, v4Config()).ForPort(sp)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(sp.Endpoints, before, func(a, b servicemap.Endpoint) bool { return a.AddrPort() == b.AddrPort() }) {
		t.Errorf("endpoints reordered: %v, were %v", sp.Endpoints, before)
	}
	// A caller appending to one chain's rules must not overwrite the next.
	first := pr.Chains[0]
	next := slices.Clone(pr.Chains[1].Rules)
	_ = append(first.Rules, "appended")
	if !slices.Equal(pr.Chains[1].Rules, next) {
		t.Error("appending to one chain's rules changed the next chain's")
	}
}
