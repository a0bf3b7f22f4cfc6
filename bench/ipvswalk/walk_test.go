package ipvswalk

import (
	"math"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables/trace"
	"kproxy.dev/kproxy/sync/servicemap"
)

// landing is one expected way a packet ends. at is the real server for a
// landing through IPVS, else the packet's destination; by is part of the
// rule that dropped or rejected it.
type landing struct {
	verdict trace.Verdict
	ipvs    bool
	at      string
	prob    float64
	masq    bool
	by      string
}

func accepted(rs string, prob float64, masq bool) landing {
	return landing{verdict: trace.Accepted, ipvs: true, at: rs, prob: prob, masq: masq}
}

type walkCase struct {
	name     string
	pkt      trace.Packet
	verdict  trace.Verdict
	landings []landing
}

type scenario struct {
	name  string
	cfg   desired.Config
	ports []*servicemap.ServicePort
	cases []walkCase
}

func TestWalk(t *testing.T) {
	const third = 1.0 / 3
	web := func(opts ...testkit.PortOpt) *servicemap.ServicePort {
		return svc("web", "198.18.0.10:80", append([]testkit.PortOpt{testkit.NodePort(30080),
			eps("198.19.1.11:8080", "198.19.1.12:8080", "local 198.19.1.13:8080")}, opts...)...)
	}
	everyWebEndpoint := func(masq bool) []landing {
		return []landing{accepted("198.19.1.11:8080", third, masq), accepted("198.19.1.12:8080", third, masq), accepted("198.19.1.13:8080", third, masq)}
	}
	for _, sc := range []scenario{
		{
			name: "pod CIDR tells pods apart",
			cfg:  configV4(),
			ports: []*servicemap.ServicePort{
				web(),
				svc("empty", "198.18.0.30:80"),
				svc("dns", "198.18.0.12:53", testkit.Protocol(v1.ProtocolUDP), eps("198.19.1.11:5353")),
			},
			cases: []walkCase{
				{name: "cluster IP from a pod: every endpoint, source kept",
					pkt: packet("198.19.1.20", "198.18.0.10:80", fromPod), verdict: trace.Accepted, landings: everyWebEndpoint(false)},
				{name: "cluster IP from outside the pod CIDR: masqueraded",
					pkt: packet("198.19.0.2", "198.18.0.10:80"), verdict: trace.Accepted, landings: everyWebEndpoint(true)},
				{name: "cluster IP from the node: masqueraded",
					pkt: packet("198.19.0.1", "198.18.0.10:80", fromNode), verdict: trace.Accepted, landings: everyWebEndpoint(true)},
				{name: "cluster IP from a local endpoint: only the way back to itself is masqueraded",
					pkt: packet("198.19.1.13", "198.18.0.10:80", fromPod), verdict: trace.Accepted, landings: []landing{
						accepted("198.19.1.11:8080", third, false), accepted("198.19.1.12:8080", third, false), accepted("198.19.1.13:8080", third, true)}},
				{name: "a cluster IP on a port that is no service port: rejected",
					pkt: packet("198.19.1.20", "198.18.0.10:81", fromPod), verdict: trace.Rejected, landings: []landing{
						{verdict: trace.Rejected, at: "198.18.0.10:81", prob: 1, by: "-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-IPVS-IPS dst -j REJECT"}}},
				{name: "NodePort on the node's IP from outside: every endpoint, masqueraded",
					pkt: packet("198.19.0.2", "198.19.0.1:30080"), verdict: trace.Accepted, landings: everyWebEndpoint(true)},
				{name: "NodePort on loopback from the node: no virtual server, as kube-proxy (IPVS will not route a loopback source off the node)",
					pkt: packet("127.0.0.1", "127.0.0.1:30080", fromNode), verdict: trace.Accepted, landings: []landing{
						{verdict: trace.Accepted, at: "127.0.0.1:30080", prob: 1}}},
				{name: "a service without endpoints: refused by IPVS",
					pkt: packet("198.19.1.20", "198.18.0.30:80", fromPod), verdict: trace.Rejected, landings: []landing{
						{verdict: trace.Rejected, ipvs: true, at: "198.18.0.30:80", prob: 1, by: "ipvs: tcp 198.18.0.30:80 rr has no real server"}}},
				{name: "UDP cluster IP",
					pkt: packet("198.19.1.20", "198.18.0.12:53", fromPod, overUDP), verdict: trace.Accepted, landings: []landing{
						accepted("198.19.1.11:5353", 1, false)}},
				{name: "TCP to a UDP service's port: rejected",
					pkt: packet("198.19.1.20", "198.18.0.12:53", fromPod), verdict: trace.Rejected, landings: []landing{
						{verdict: trace.Rejected, at: "198.18.0.12:53", prob: 1, by: "KUBE-IPVS-FILTER"}}},
				{name: "an address no service has: routed on untouched",
					pkt: packet("198.19.0.2", "198.18.0.99:80"), verdict: trace.Accepted, landings: []landing{
						{verdict: trace.Accepted, at: "198.18.0.99:80", prob: 1}}},
			},
		},
		{
			name:  "no pod CIDR",
			cfg:   configV4(func(c *desired.Config) { c.ClusterCIDRs = nil }),
			ports: []*servicemap.ServicePort{web()},
			cases: []walkCase{
				{name: "from the node, the VIP as source: masqueraded",
					pkt: packet("198.18.0.10", "198.18.0.10:80", fromNode), verdict: trace.Accepted, landings: everyWebEndpoint(true)},
				{name: "from a pod: source kept",
					pkt: packet("198.19.1.20", "198.18.0.10:80", fromPod), verdict: trace.Accepted, landings: everyWebEndpoint(false)},
			},
		},
		{
			name:  "masquerade-all",
			cfg:   configV4(func(c *desired.Config) { c.MasqueradeAll = true }),
			ports: []*servicemap.ServicePort{web()},
			cases: []walkCase{
				{name: "from a pod: masqueraded",
					pkt: packet("198.19.1.20", "198.18.0.10:80", fromPod), verdict: trace.Accepted, landings: everyWebEndpoint(true)},
			},
		},
		{
			name: "externalTrafficPolicy Local",
			cfg:  configV4(),
			ports: []*servicemap.ServicePort{
				svc("local", "198.18.0.20:80", testkit.NodePort(30090), testkit.ExternalLocal(32090), eps("198.19.1.11:8080", "local 198.19.1.13:8080")),
				svc("elsewhere", "198.18.0.21:80", testkit.NodePort(30091), testkit.ExternalLocal(32091), eps("198.19.1.11:8080")),
			},
			cases: []walkCase{
				{name: "NodePort from outside: only the local endpoint, source kept",
					pkt: packet("198.19.0.2", "198.19.0.1:30090"), verdict: trace.Accepted, landings: []landing{
						accepted("198.19.1.13:8080", 1, false)}},
				{name: "the cluster IP still reaches every endpoint",
					pkt: packet("198.19.1.20", "198.18.0.20:80", fromPod), verdict: trace.Accepted, landings: []landing{
						accepted("198.19.1.11:8080", 0.5, false), accepted("198.19.1.13:8080", 0.5, false)}},
				{name: "NodePort without a local endpoint: refused by IPVS",
					pkt: packet("198.19.0.2", "198.19.0.1:30091"), verdict: trace.Rejected, landings: []landing{
						{verdict: trace.Rejected, ipvs: true, at: "198.19.0.1:30091", prob: 1, by: "has no real server"}}},
				{name: "the health check node port reaches the node",
					pkt: packet("198.19.0.2", "198.19.0.1:32090"), verdict: trace.Accepted, landings: []landing{
						{verdict: trace.Accepted, at: "198.19.0.1:32090", prob: 1}}},
			},
		},
		{
			name: "LoadBalancer source ranges",
			cfg:  configV4(),
			ports: []*servicemap.ServicePort{
				// The node's address is in a range: the node may reach the VIP.
				svc("api", "198.18.0.16:443", lb("198.18.200.2", "203.0.113.0/25", "198.19.0.0/24"), eps("198.19.1.11:8443")),
				// It is not: the node is kept out.
				svc("private", "198.18.0.17:443", lb("198.18.200.3", "203.0.113.0/25"), eps("198.19.1.12:8443")),
			},
			cases: []walkCase{
				{name: "from inside a range: admitted, masqueraded",
					pkt: packet("203.0.113.5", "198.18.200.2:443"), verdict: trace.Accepted, landings: []landing{
						accepted("198.19.1.11:8443", 1, true)}},
				{name: "from outside every range: dropped",
					pkt: packet("198.51.100.7", "198.18.200.2:443"), verdict: trace.Dropped, landings: []landing{
						{verdict: trace.Dropped, at: "198.18.200.2:443", prob: 1, by: "filter: -A KUBE-SOURCE-RANGES-FIREWALL -j DROP"}}},
				{name: "the cluster IP is not filtered",
					pkt: packet("198.51.100.7", "198.18.0.16:443"), verdict: trace.Accepted, landings: []landing{
						accepted("198.19.1.11:8443", 1, true)}},
				{name: "from the node when a range holds it: admitted",
					pkt: packet("198.18.200.2", "198.18.200.2:443", fromNode), verdict: trace.Accepted, landings: []landing{
						accepted("198.19.1.11:8443", 1, true)}},
				{name: "from the node when no range holds it: dropped after IPVS",
					pkt: packet("198.18.200.3", "198.18.200.3:443", fromNode), verdict: trace.Dropped, landings: []landing{
						{verdict: trace.Dropped, ipvs: true, at: "198.19.1.12:8443", prob: 1, by: "filter: -A KUBE-IPVS-OUT-FILTER -s 198.18.200.3/32 -m ipvs"}}},
			},
		},
		{
			name: "SCTP",
			cfg:  configV4(),
			ports: []*servicemap.ServicePort{
				svc("sig", "198.18.0.13:3868", testkit.Protocol(v1.ProtocolSCTP), testkit.NodePort(30868), testkit.ExternalLocal(0),
					eps("198.19.1.11:3868", "local 198.19.1.12:3868")),
				svc("sig-any", "198.18.0.14:3869", testkit.Protocol(v1.ProtocolSCTP), testkit.NodePort(30869), eps("198.19.1.11:3869")),
			},
			cases: []walkCase{
				{name: "cluster IP",
					pkt: packet("198.19.1.20", "198.18.0.13:3868", fromPod, overSCTP), verdict: trace.Accepted, landings: []landing{
						accepted("198.19.1.11:3868", 0.5, false), accepted("198.19.1.12:3868", 0.5, false)}},
				{name: "Local policy NodePort: the local endpoint, source kept",
					pkt: packet("198.19.0.2", "198.19.0.1:30868", overSCTP), verdict: trace.Accepted, landings: []landing{
						accepted("198.19.1.12:3868", 1, false)}},
				{name: "Cluster policy NodePort: masqueraded",
					pkt: packet("198.19.0.2", "198.19.0.1:30869", overSCTP), verdict: trace.Accepted, landings: []landing{
						accepted("198.19.1.11:3869", 1, true)}},
			},
		},
		{
			name: "IPv6",
			cfg:  configV6(),
			ports: []*servicemap.ServicePort{
				svc("web6", "[fd00:18::10]:80", testkit.NodePort(30081), eps("[fd00:19:1::11]:8080", "local [fd00:19:1::12]:8080")),
			},
			cases: []walkCase{
				{name: "cluster IP from a pod: source kept",
					pkt: packet("fd00:19:1::20", "[fd00:18::10]:80", fromPod), verdict: trace.Accepted, landings: []landing{
						accepted("[fd00:19:1::11]:8080", 0.5, false), accepted("[fd00:19:1::12]:8080", 0.5, false)}},
				{name: "cluster IP from outside the pod CIDR: masqueraded",
					pkt: packet("fd00:19::2", "[fd00:18::10]:80"), verdict: trace.Accepted, landings: []landing{
						accepted("[fd00:19:1::11]:8080", 0.5, true), accepted("[fd00:19:1::12]:8080", 0.5, true)}},
				{name: "NodePort on the node's IP",
					pkt: packet("fd00:19::2", "[fd00:19::1]:30081"), verdict: trace.Accepted, landings: []landing{
						accepted("[fd00:19:1::11]:8080", 0.5, true), accepted("[fd00:19:1::12]:8080", 0.5, true)}},
				{name: "a cluster IP on a port that is no service port: rejected",
					pkt: packet("fd00:19:1::20", "[fd00:18::10]:81", fromPod), verdict: trace.Rejected, landings: []landing{
						{verdict: trace.Rejected, at: "[fd00:18::10]:81", prob: 1, by: "--match-set KUBE-6-IPVS-IPS dst -j REJECT --reject-with icmp6-port-unreachable"}}},
			},
		},
	} {
		st := build(t, sc.cfg, sc.ports...)
		w, err := New(st, sc.cfg.LocalAddrs)
		if err != nil {
			t.Fatalf("%s: %v", sc.name, err)
		}
		for _, tc := range sc.cases {
			t.Run(sc.name+"/"+tc.name, func(t *testing.T) {
				res, err := w.Walk(tc.pkt)
				if err != nil {
					t.Fatal(err)
				}
				checkLandings(t, res, tc.verdict, tc.landings)
			})
		}
	}
}

func checkLandings(t *testing.T, res Result, verdict trace.Verdict, wants []landing) {
	t.Helper()
	ok := res.Verdict == verdict && len(res.Landings) == len(wants)
	for i := 0; ok && i < len(wants); i++ {
		l, w := res.Landings[i], wants[i]
		at := l.Destination
		if l.Service != nil && l.Verdict != trace.Rejected {
			at = l.RealServer.AddrPort()
		}
		ok = l.Verdict == w.verdict && (l.Service != nil) == w.ipvs && at.String() == w.at &&
			math.Abs(l.Probability-w.prob) < 1e-9 && l.Masqueraded == w.masq &&
			strings.Contains(l.By, w.by) && (w.by == "") == (l.By == "")
	}
	if !ok {
		t.Errorf("got %s\nwant %s: %+v", res, verdict, wants)
	}
}
