package trace

import (
	"net/netip"
	"strings"
	"testing"
)

// ipvsNode is the tracer's test node with a VIP on a dummy interface and
// an IPVS table: 198.18.0.10:80 to two real servers weighted 1 and 3,
// 198.18.0.30:80 with none, 198.18.0.40:80 with only weight 0, and
// 198.18.0.50:80 to a real server on the node itself.
func ipvsNode() Node {
	n := node
	vips := []netip.Addr{netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("198.18.0.30"),
		netip.MustParseAddr("198.18.0.40"), netip.MustParseAddr("198.18.0.50")}
	n.LocalAddresses = append(append([]netip.Addr{}, n.LocalAddresses...), vips...)
	rs := func(addrPort string, weight int) RealServer {
		return RealServer{Address: netip.MustParseAddrPort(addrPort), Weight: weight}
	}
	vs := func(addrPort string, servers ...RealServer) VirtualServer {
		return VirtualServer{Protocol: "tcp", Address: netip.MustParseAddrPort(addrPort), Scheduler: "rr", RealServers: servers}
	}
	n.VirtualServers = []VirtualServer{
		vs("198.18.0.10:80", rs("198.19.1.11:8080", 1), rs("198.19.1.12:8080", 3)),
		vs("198.18.0.30:80"),
		vs("198.18.0.40:80", rs("198.19.1.11:8080", 0)),
		vs("198.18.0.50:80", rs("198.19.0.1:8080", 1)),
	}
	return n
}

func TestTraceIPVS(t *testing.T) {
	toVIP := pkt(Forwarded, "198.19.0.2", "198.18.0.10:80")
	fromNode := pkt(Local, "198.19.0.1", "198.18.0.10:80", func(p *Packet) { p.OutInterface = "eth0" })
	cases := []struct {
		name          string
		nat, filter   string
		pkt           Packet
		verdict       Verdict
		paths         []want
		check         func(t *testing.T, r Result)
		wantErrPart   string
		changeVirtual func(*Node)
	}{
		{
			name:    "from elsewhere: to each real server by weight, sent on, not delivered",
			pkt:     toVIP,
			verdict: Accepted, paths: []want{{Accepted, "198.19.1.11:8080", 0.25, false}, {Accepted, "198.19.1.12:8080", 0.75, false}},
			check: func(t *testing.T, r Result) {
				for _, p := range r.Paths {
					if p.Delivered || p.Translated || p.VirtualServer != netip.MustParseAddrPort("198.18.0.10:80") {
						t.Errorf("path %+v: want sent on by virtual server 198.18.0.10:80, neither delivered nor DNATed", p)
					}
				}
			},
		},
		{
			name:    "filter INPUT sees the virtual address before IPVS",
			filter:  "-A INPUT -d 198.18.0.10/32 -j REJECT\n",
			pkt:     toVIP,
			verdict: Rejected, paths: []want{{Rejected, "198.18.0.10:80", 1, false}},
		},
		{
			name:    "filter OUTPUT sees the real server after IPVS",
			filter:  "-A OUTPUT -d 198.19.1.12/32 -j DROP\n",
			pkt:     toVIP,
			verdict: Mixed, paths: []want{{Accepted, "198.19.1.11:8080", 0.25, false}, {Dropped, "198.19.1.12:8080", 0.75, false}},
		},
		{
			name:    "nat POSTROUTING masquerades the mark nat PREROUTING set; nat INPUT is skipped",
			nat:     "-A PREROUTING -j MARK --set-xmark 0x4000/0x4000\n-A INPUT -j SNAT --to-source 198.19.0.9\n-A POSTROUTING -m mark --mark 0x4000/0x4000 -j MASQUERADE\n",
			pkt:     toVIP,
			verdict: Accepted, paths: []want{{Accepted, "198.19.1.11:8080", 0.25, true}, {Accepted, "198.19.1.12:8080", 0.75, true}},
			check: func(t *testing.T, r Result) {
				for _, p := range r.Paths {
					if p.SNAT.IsValid() {
						t.Errorf("path %+v went through nat INPUT", p)
					}
				}
			},
		},
		{
			name:    "from the node: IPVS comes after nat OUTPUT and before filter OUTPUT",
			nat:     "-A OUTPUT -d 198.18.0.10/32 -j MARK --set-xmark 0x1/0x1\n",
			filter:  "-A OUTPUT -m mark --mark 0x1/0x1 -d 198.19.1.11/32 -j REJECT\n",
			pkt:     fromNode,
			verdict: Mixed, paths: []want{{Rejected, "198.19.1.11:8080", 0.25, false}, {Accepted, "198.19.1.12:8080", 0.75, false}},
		},
		{
			name:    "-m ipvs matches the virtual server after IPVS",
			filter:  "-A OUTPUT -s 198.19.0.1/32 -m ipvs --vproto 6 --vaddr 198.18.0.10/32 --vport 80 -j DROP\n",
			pkt:     fromNode,
			verdict: Dropped, paths: []want{{Dropped, "198.19.1.11:8080", 0.25, false}, {Dropped, "198.19.1.12:8080", 0.75, false}},
		},
		{
			name:    "-m ipvs: another virtual port does not match",
			filter:  "-A OUTPUT -m ipvs --vaddr 198.18.0.10/32 --vport 443 -j DROP\n",
			pkt:     fromNode,
			verdict: Accepted, paths: []want{{Accepted, "", 0.25, false}, {Accepted, "", 0.75, false}},
		},
		{
			name:    "-m ipvs: a packet IPVS did not handle never matches --vport, negated or not",
			filter:  "-A OUTPUT -m ipvs ! --vport 443 -j DROP\n",
			pkt:     pkt(Local, "198.19.0.1", "198.18.0.99:80", func(p *Packet) { p.OutInterface = "eth0" }),
			verdict: Accepted, paths: []want{{Accepted, "198.18.0.99:80", 1, false}},
		},
		{
			name:    "-m ipvs: ! --ipvs alone matches a packet IPVS did not handle",
			filter:  "-A OUTPUT -m ipvs ! --ipvs -j DROP\n",
			pkt:     pkt(Local, "198.19.0.1", "198.18.0.99:80", func(p *Packet) { p.OutInterface = "eth0" }),
			verdict: Dropped, paths: []want{{Dropped, "198.18.0.99:80", 1, false}},
		},
		{
			name:    "no real server: ICMP port unreachable",
			pkt:     pkt(Forwarded, "198.19.0.2", "198.18.0.30:80"),
			verdict: Rejected, paths: []want{{Rejected, "198.18.0.30:80", 1, false}},
			check: func(t *testing.T, r Result) {
				p := r.Paths[0]
				if !strings.Contains(p.Rules[len(p.Rules)-1], "ipvs: tcp 198.18.0.30:80 rr has no real server") {
					t.Errorf("the refusal is not the path's last rule: %q", p.Rules)
				}
				if p.VirtualServer != netip.MustParseAddrPort("198.18.0.30:80") {
					t.Errorf("path %+v does not name the refusing virtual server", p)
				}
			},
		},
		{
			name:    "only real servers of weight 0: refused",
			pkt:     pkt(Local, "198.19.0.1", "198.18.0.40:80"),
			verdict: Rejected, paths: []want{{Rejected, "198.18.0.40:80", 1, false}},
		},
		{
			name:    "a real server on the node: delivered",
			pkt:     pkt(Forwarded, "198.19.0.2", "198.18.0.50:80"),
			verdict: Accepted, paths: []want{{Accepted, "198.19.0.1:8080", 1, false}},
			check: func(t *testing.T, r Result) {
				if !r.Paths[0].Delivered {
					t.Errorf("path %+v: want delivered", r.Paths[0])
				}
			},
		},
		{
			name:    "a loopback source cannot be sent to a real server elsewhere",
			pkt:     pkt(Local, "127.0.0.1", "198.18.0.10:80"),
			verdict: Dropped, paths: []want{{Dropped, "198.19.1.11:8080", 0.25, false}, {Dropped, "198.19.1.12:8080", 0.75, false}},
		},
		{
			name:    "another port of the virtual address: not IPVS's, delivered",
			pkt:     pkt(Forwarded, "198.19.0.2", "198.18.0.10:81"),
			verdict: Accepted, paths: []want{{Accepted, "198.18.0.10:81", 1, false}},
			check: func(t *testing.T, r Result) {
				if p := r.Paths[0]; !p.Delivered || p.VirtualServer.IsValid() {
					t.Errorf("path %+v: want delivered without IPVS", p)
				}
			},
		},
		{
			name:    "another protocol: not IPVS's",
			pkt:     pkt(Forwarded, "198.19.0.2", "198.18.0.10:80", udp),
			verdict: Accepted, paths: []want{{Accepted, "198.18.0.10:80", 1, false}},
		},
		{
			name:          "a virtual server listed twice",
			pkt:           toVIP,
			changeVirtual: func(n *Node) { n.VirtualServers = append(n.VirtualServers, n.VirtualServers[0]) },
			wantErrPart:   "virtual server tcp 198.18.0.10:80 rr is listed twice",
		},
		{
			name: "a real server of the other family",
			pkt:  toVIP,
			changeVirtual: func(n *Node) {
				n.VirtualServers[1].RealServers = []RealServer{{Address: netip.MustParseAddrPort("[fd00::1]:80"), Weight: 1}}
			},
			wantErrPart: "real server [fd00::1]:80 is not an IPv4 address and port",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := ipvsNode()
			if tc.changeVirtual != nil {
				tc.changeVirtual(&n)
			}
			res, err := Run(dump("ACCEPT", tc.nat, tc.filter), tc.pkt, n)
			if tc.wantErrPart != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrPart) {
					t.Fatalf("Run = %v, %v; want an error containing %q", res, err, tc.wantErrPart)
				}
				return
			}
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

func TestTracePhysdev(t *testing.T) {
	fromBridge := func(p *Packet) { p.InInterface, p.BridgePort = "cni0", "veth1" }
	cases := []struct {
		name, rule  string
		pkt         Packet
		dropped     bool
		wantErrPart string
	}{
		{name: "not through a bridge: ! --physdev-is-in holds", rule: "-m physdev ! --physdev-is-in",
			pkt: pkt(Forwarded, "198.19.0.2", "198.19.0.1:80"), dropped: true},
		{name: "through a bridge: ! --physdev-is-in fails", rule: "-m physdev ! --physdev-is-in",
			pkt: pkt(Forwarded, "198.19.129.13", "198.19.0.1:80", fromBridge), dropped: false},
		{name: "--physdev-in with a wildcard", rule: "-m physdev --physdev-in veth+",
			pkt: pkt(Forwarded, "198.19.129.13", "198.19.0.1:80", fromBridge), dropped: true},
		{name: "--physdev-in without a bridge", rule: "-m physdev --physdev-in veth+",
			pkt: pkt(Forwarded, "198.19.0.2", "198.19.0.1:80"), dropped: false},
		{name: "from the node: never through a bridge", rule: "-m physdev --physdev-is-in",
			pkt: pkt(Local, "198.19.0.1", "198.19.0.1:80"), dropped: false},
		{name: "a Local packet with a bridge port", rule: "-m physdev --physdev-is-in",
			pkt: pkt(Local, "198.19.0.1", "198.19.0.1:80", func(p *Packet) { p.BridgePort = "veth1" }), wantErrPart: "a Local packet has no BridgePort"},
		{name: "--physdev-out is not modelled", rule: "-m physdev --physdev-out veth1",
			pkt: pkt(Forwarded, "198.19.0.2", "198.19.0.1:80"), wantErrPart: "--physdev-out veth1: not modelled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(dump("ACCEPT", "", "-A INPUT "+tc.rule+" -j DROP\n"), tc.pkt, node)
			if tc.wantErrPart != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrPart) {
					t.Fatalf("Run = %v, %v; want an error containing %q", res, err, tc.wantErrPart)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			verdict := Accepted
			if tc.dropped {
				verdict = Dropped
			}
			checkPaths(t, res, verdict, []want{{verdict, "198.19.0.1:80", 1, false}})
		})
	}
}
