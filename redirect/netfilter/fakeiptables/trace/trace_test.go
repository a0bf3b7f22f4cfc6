package trace

import (
	"fmt"
	"math"
	"net/netip"
	"os"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
)

// The node of testdata/kube-proxy.save and testdata/userspace.save.
var (
	nodeIP = netip.MustParseAddr("198.19.0.1")
	podGW  = netip.MustParseAddr("198.19.129.1")
	node   = Node{
		LocalAddresses: []netip.Addr{nodeIP, podGW},
		Interfaces:     map[string][]netip.Addr{"eth0": {nodeIP}, "cni0": {podGW}},
	}
)

// pkt builds a TCP packet from src to dst ("addr:port").
func pkt(entry Entry, src, dst string, mods ...func(*Packet)) Packet {
	d := netip.MustParseAddrPort(dst)
	p := Packet{Source: netip.MustParseAddr(src), Destination: d.Addr(), DestinationPort: d.Port(), Protocol: "tcp", Entry: entry}
	if entry == Forwarded {
		p.InInterface, p.OutInterface = "eth0", "cni0"
	}
	for _, m := range mods {
		m(&p)
	}
	return p
}

func udp(p *Packet) { p.Protocol = "udp" }

func fromPod(p *Packet) { p.InInterface = "cni0" }

// want is one expected path: verdict, destination ("" for any), probability,
// masquerade.
type want struct {
	verdict Verdict
	dest    string
	prob    float64
	masq    bool
}

const third = 0.33333333349

func checkPaths(t *testing.T, res Result, wantVerdict Verdict, wants []want) {
	t.Helper()
	ok := res.Verdict == wantVerdict && len(res.Paths) == len(wants)
	for i := 0; ok && i < len(wants); i++ {
		p, w := res.Paths[i], wants[i]
		ok = p.Verdict == w.verdict && math.Abs(p.Probability-w.prob) < 1e-9 && p.Masqueraded == w.masq &&
			(w.dest == "" || p.Destination.String() == w.dest)
	}
	if !ok {
		t.Errorf("got %s\nwant %s: %+v", res, wantVerdict, wants)
	}
}

func loadFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type traceCase struct {
	name    string
	pkt     Packet
	verdict Verdict
	paths   []want
	check   func(t *testing.T, r Result)
}

func kubeProxyCases() []traceCase {
	rest := (1 - third) / 2
	return []traceCase{
		{
			name:    "cluster IP from outside the cluster: three endpoints, masqueraded",
			pkt:     pkt(Forwarded, "198.19.0.2", "198.18.0.10:80"),
			verdict: Accepted, paths: []want{
				{Accepted, "198.19.129.11:8080", third, true},
				{Accepted, "198.19.129.12:8080", rest, true},
				{Accepted, "198.19.130.21:8080", rest, true},
			},
		},
		{
			name:    "cluster IP from a pod: not masqueraded",
			pkt:     pkt(Forwarded, "198.19.129.13", "198.18.0.10:80", fromPod),
			verdict: Accepted, paths: []want{
				{Accepted, "198.19.129.11:8080", third, false},
				{Accepted, "198.19.129.12:8080", rest, false},
				{Accepted, "198.19.130.21:8080", rest, false},
			},
		},
		{
			name:    "cluster IP from an endpoint itself: only its own hairpin is masqueraded",
			pkt:     pkt(Forwarded, "198.19.129.11", "198.18.0.10:80", fromPod),
			verdict: Accepted, paths: []want{
				{Accepted, "198.19.129.11:8080", third, true},
				{Accepted, "198.19.129.12:8080", rest, false},
				{Accepted, "198.19.130.21:8080", rest, false},
			},
		},
		{
			name:    "cluster IP from the node",
			pkt:     pkt(Local, "198.19.0.1", "198.18.0.10:80"),
			verdict: Accepted, paths: []want{
				{Accepted, "198.19.129.11:8080", third, true},
				{Accepted, "198.19.129.12:8080", rest, true},
				{Accepted, "198.19.130.21:8080", rest, true},
			},
		},
		{
			name:    "NodePort from outside: masqueraded to every endpoint",
			pkt:     pkt(Forwarded, "198.19.0.2", "198.19.0.1:30080"),
			verdict: Accepted, paths: []want{
				{Accepted, "198.19.129.11:8080", third, true},
				{Accepted, "198.19.129.12:8080", rest, true},
				{Accepted, "198.19.130.21:8080", rest, true},
			},
		},
		{
			name:    "session affinity: checked, then set on the chosen endpoint",
			pkt:     pkt(Forwarded, "198.19.129.13", "198.18.0.20:80", fromPod),
			verdict: Accepted, paths: []want{
				{Accepted, "198.19.129.11:8080", 0.5, false},
				{Accepted, "198.19.129.12:8080", 0.5, false},
			},
			check: func(t *testing.T, r Result) {
				for i, p := range r.Paths {
					set := fmt.Sprintf("KUBE-SEP-STICKY%d", i+1)
					if strings.Join(p.AffinityChecked, ",") != "KUBE-SEP-STICKY1,KUBE-SEP-STICKY2" || strings.Join(p.AffinitySet, ",") != set {
						t.Errorf("path %d checked %v and set %v, want both lists checked and %s set", i, p.AffinityChecked, p.AffinitySet, set)
					}
				}
			},
		},
		{
			name:    "cluster IP without endpoints from a pod is rejected",
			pkt:     pkt(Forwarded, "198.19.129.13", "198.18.0.30:80", fromPod),
			verdict: Rejected, paths: []want{{Rejected, "198.18.0.30:80", 1, false}},
		},
		{
			name:    "cluster IP without endpoints from the node is rejected",
			pkt:     pkt(Local, "198.19.0.1", "198.18.0.30:80"),
			verdict: Rejected, paths: []want{{Rejected, "198.18.0.30:80", 1, false}},
		},
		{
			name:    "NodePort without endpoints is rejected",
			pkt:     pkt(Forwarded, "198.19.0.2", "198.19.0.1:30070"),
			verdict: Rejected, paths: []want{{Rejected, "198.19.0.1:30070", 1, false}},
		},
		{
			name:    "Local policy NodePort from outside: only the local endpoint, source kept",
			pkt:     pkt(Forwarded, "198.19.0.2", "198.19.0.1:30090"),
			verdict: Accepted, paths: []want{{Accepted, "198.19.129.12:8080", 1, false}},
		},
		{
			name:    "Local policy NodePort from the node: every endpoint, masqueraded",
			pkt:     pkt(Local, "198.19.0.1", "198.19.0.1:30090"),
			verdict: Accepted, paths: []want{
				{Accepted, "198.19.129.12:8080", 0.5, true},
				{Accepted, "198.19.130.21:8080", 0.5, true},
			},
		},
		{
			name:    "Local policy NodePort without local endpoints is dropped",
			pkt:     pkt(Forwarded, "198.19.0.2", "198.19.0.1:30091"),
			verdict: Dropped, paths: []want{{Dropped, "198.19.0.1:30091", 1, false}},
		},
		{
			name:    "LoadBalancer IP from an allowed source",
			pkt:     pkt(Forwarded, "198.19.0.2", "198.18.9.9:80"),
			verdict: Accepted, paths: []want{{Accepted, "198.19.130.21:8080", 1, true}},
		},
		{
			name:    "LoadBalancer IP from outside its source ranges is dropped",
			pkt:     pkt(Forwarded, "203.0.113.5", "198.18.9.9:80"),
			verdict: Dropped, paths: []want{{Dropped, "198.18.9.9:80", 1, false}},
		},
		{
			name:    "no service: passes untouched",
			pkt:     pkt(Forwarded, "198.19.0.2", "198.18.0.99:80"),
			verdict: Accepted, paths: []want{{Accepted, "198.18.0.99:80", 1, false}},
			check: func(t *testing.T, r Result) {
				if p := r.Paths[0]; p.Translated || p.Delivered {
					t.Errorf("path %+v: want neither translated nor delivered", p)
				}
			},
		},
	}
}

func TestTraceKubeProxyDump(t *testing.T) {
	rules, err := Load(loadFile(t, "kube-proxy.save"), "IPv4")
	if err != nil {
		t.Fatal(err)
	}
	var golden strings.Builder
	for _, tc := range kubeProxyCases() {
		t.Run(tc.name, func(t *testing.T) {
			res, err := rules.Run(tc.pkt, node)
			if err != nil {
				t.Fatal(err)
			}
			checkPaths(t, res, tc.verdict, tc.paths)
			if tc.check != nil {
				tc.check(t, res)
			}
			fmt.Fprintf(&golden, "== %s\n%s\n", tc.name, res)
		})
	}
	testkit.Golden(t, "testdata/kube-proxy.traces", golden.String())
}

func TestTraceUserspacePortals(t *testing.T) {
	dump := loadFile(t, "userspace.save")
	cases := []traceCase{
		{
			name:    "cluster IP from another host: redirected to the relay on the incoming interface",
			pkt:     pkt(Forwarded, "198.19.0.2", "198.18.0.10:80"),
			verdict: Accepted, paths: []want{{Accepted, "198.19.0.1:40000", 1, false}},
			check: func(t *testing.T, r Result) {
				if p := r.Paths[0]; !p.Redirected || !p.Delivered {
					t.Errorf("path %+v: want redirected and delivered", p)
				}
			},
		},
		{
			name:    "cluster IP from the node: DNATed to the node's address",
			pkt:     pkt(Local, "198.19.0.1", "198.18.0.10:80"),
			verdict: Accepted, paths: []want{{Accepted, "198.19.0.1:40000", 1, false}},
		},
		{
			name:    "NodePort from the node",
			pkt:     pkt(Local, "198.19.0.1", "198.19.0.1:30080"),
			verdict: Accepted, paths: []want{{Accepted, "198.19.0.1:40000", 1, false}},
		},
		{
			name:    "straight to the proxy port: refused",
			pkt:     pkt(Forwarded, "198.19.0.2", "198.19.0.1:40000"),
			verdict: Rejected, paths: []want{{Rejected, "198.19.0.1:40000", 1, false}},
		},
		{
			name:    "UDP to a service without endpoints: redirected, then refused by its original destination",
			pkt:     pkt(Forwarded, "198.19.0.2", "198.18.0.30:53", udp),
			verdict: Rejected, paths: []want{{Rejected, "198.19.0.1:40001", 1, false}},
		},
		{
			name:    "UDP from the node to a service without endpoints: DNATed, then refused",
			pkt:     pkt(Local, "198.19.0.1", "198.18.0.30:53", udp),
			verdict: Rejected, paths: []want{{Rejected, "198.19.0.1:40001", 1, false}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(dump, tc.pkt, node)
			if err != nil {
				t.Fatal(err)
			}
			checkPaths(t, res, tc.verdict, tc.paths)
			if tc.check != nil {
				tc.check(t, res)
			}
		})
	}
}
