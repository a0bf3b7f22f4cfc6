package trace

import (
	"net/netip"
	"strings"
	"testing"
)

// dump wraps chain declarations and rules into a nat and a filter table;
// each table gets its built-in chains with the given filter policies.
func dump(filterPolicy, nat, filter string) string {
	return "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n" + nat +
		"COMMIT\n*filter\n:INPUT " + filterPolicy + " [0:0]\n:FORWARD " + filterPolicy + " [0:0]\n:OUTPUT " + filterPolicy + " [0:0]\n" + filter + "COMMIT\n"
}

func TestTraceSemantics(t *testing.T) {
	toNode := pkt(Forwarded, "198.19.0.2", "198.19.0.1:80")
	cases := []struct {
		name        string
		dump        string
		pkt         Packet
		node        Node
		verdict     Verdict
		paths       []want
		check       func(t *testing.T, r Result)
		wantErrPart string
	}{
		{
			name:    "a jump comes back to the next rule",
			dump:    dump("ACCEPT", "", ":A - [0:0]\n-A INPUT -j A\n-A INPUT -j DROP\n"),
			pkt:     toNode,
			verdict: Dropped, paths: []want{{Dropped, "198.19.0.1:80", 1, false}},
		},
		{
			name:    "a goto returns past the chain that went",
			dump:    dump("ACCEPT", "", ":A - [0:0]\n:B - [0:0]\n-A INPUT -j A\n-A INPUT -j REJECT\n-A A -g B\n-A A -j DROP\n-A B -j RETURN\n"),
			pkt:     toNode,
			verdict: Rejected, paths: []want{{Rejected, "198.19.0.1:80", 1, false}},
		},
		{
			name:    "RETURN from a built-in chain applies its policy",
			dump:    dump("DROP", "", "-A INPUT -j RETURN\n-A INPUT -j ACCEPT\n"),
			pkt:     toNode,
			verdict: Dropped, paths: []want{{Dropped, "198.19.0.1:80", 1, false}},
			check: func(t *testing.T, r Result) {
				if rules := r.Paths[0].Rules; rules[len(rules)-1] != "filter: INPUT policy DROP" {
					t.Errorf("the policy is not in the path's rules: %q", rules)
				}
			},
		},
		{
			name:    "ACCEPT in a user chain ends the table",
			dump:    dump("ACCEPT", "", ":A - [0:0]\n-A INPUT -j A\n-A INPUT -j DROP\n-A A -j ACCEPT\n"),
			pkt:     toNode,
			verdict: Accepted, paths: []want{{Accepted, "198.19.0.1:80", 1, false}},
		},
		{
			name:    "a random rule splits: mixed verdicts",
			dump:    dump("ACCEPT", "", "-A INPUT -m statistic --mode random --probability 0.25000000000 -j DROP\n-A INPUT -m statistic --mode random ! --probability 0.50000000000 -j REJECT\n"),
			pkt:     toNode,
			verdict: Mixed, paths: []want{{Dropped, "", 0.25, false}, {Rejected, "", 0.375, false}, {Accepted, "", 0.375, false}},
		},
		{
			name: "MARK forms",
			dump: dump("ACCEPT", "", "-A INPUT -j MARK --set-mark 0xff00/0xf000\n-A INPUT -j MARK --or-mark 0x1\n-A INPUT -j MARK --xor-mark 0x3\n"+
				"-A INPUT -j MARK --and-mark 0xfffffff6\n-A INPUT -j MARK --set-xmark 0x10/0x10\n-A INPUT -m mark ! --mark 0xff16 -j DROP\n-A INPUT -m mark --mark 0x16/0xff -j REJECT\n"),
			pkt:     pkt(Forwarded, "198.19.0.2", "198.19.0.1:80", func(p *Packet) { p.Mark = 0x0f04 }),
			verdict: Rejected, paths: []want{{Rejected, "", 1, false}},
			// 0x0f04 --set-mark 0xff00/0xf000 -> 0xff04, --or-mark 1 -> 0xff05,
			// --xor-mark 3 -> 0xff06, --and-mark ~9 -> 0xff06, --set-xmark 0x10/0x10 -> 0xff16.
			check: func(t *testing.T, r Result) {
				if r.Paths[0].Mark != 0xff16 {
					t.Errorf("mark %#x, want 0xff16", r.Paths[0].Mark)
				}
			},
		},
		{
			name:    "addrtype --limit-iface-in: LOCAL only on the incoming interface",
			dump:    dump("ACCEPT", "", "-A INPUT -m addrtype --dst-type LOCAL --limit-iface-in -j REJECT\n"),
			pkt:     pkt(Forwarded, "198.19.0.2", "198.19.129.1:80"),
			node:    node,
			verdict: Accepted, paths: []want{{Accepted, "198.19.129.1:80", 1, false}},
		},
		{
			name:    "REDIRECT from the node goes to loopback",
			dump:    dump("ACCEPT", "-A OUTPUT -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 8080\n", ""),
			pkt:     pkt(Local, "198.19.0.1", "198.18.0.5:80"),
			verdict: Accepted, paths: []want{{Accepted, "127.0.0.1:8080", 1, false}},
			check: func(t *testing.T, r Result) {
				if p := r.Paths[0]; !p.Delivered || !p.Redirected {
					t.Errorf("path %+v: want delivered and redirected", p)
				}
			},
		},
		{
			name:    "SNAT in POSTROUTING",
			dump:    dump("ACCEPT", "-A POSTROUTING -o eth1 -j SNAT --to-source 198.19.0.9\n", ""),
			pkt:     pkt(Forwarded, "198.19.0.2", "198.19.3.3:80", func(p *Packet) { p.OutInterface = "eth1" }),
			verdict: Accepted, paths: []want{{Accepted, "198.19.3.3:80", 1, false}},
			check: func(t *testing.T, r Result) {
				if r.Paths[0].SNAT != netip.MustParseAddr("198.19.0.9") {
					t.Errorf("SNAT = %v", r.Paths[0].SNAT)
				}
			},
		},
		{
			name:    "DNAT keeps the port when it names none; conntrack sees the original",
			dump:    dump("ACCEPT", "-A PREROUTING -d 198.18.0.5/32 -j DNAT --to-destination 198.19.0.1\n", "-A INPUT -m conntrack --ctstate DNAT --ctorigdst 198.18.0.5 --ctorigdstport 80 -j REJECT\n"),
			pkt:     pkt(Forwarded, "198.19.0.2", "198.18.0.5:80"),
			verdict: Rejected, paths: []want{{Rejected, "198.19.0.1:80", 1, false}},
		},
		{
			name:    "IPv6 DNAT",
			dump:    dump("ACCEPT", "-A OUTPUT -d fd00:18::5/128 -p tcp -m tcp --dport 80 -j DNAT --to-destination [fd00:19:1::11]:8080\n", ""),
			pkt:     pkt(Local, "fd00:19::1", "[fd00:18::5]:80", func(p *Packet) { p.OutInterface = "eth0" }),
			verdict: Accepted, paths: []want{{Accepted, "[fd00:19:1::11]:8080", 1, false}},
		},
		{
			name:        "a loop of jumps",
			dump:        dump("ACCEPT", "", ":A - [0:0]\n:B - [0:0]\n-A A -j B\n-A B -g A\n"),
			pkt:         toNode,
			wantErrPart: "rule loop A -> B -> A",
		},
		{
			name:        "an unknown target",
			dump:        dump("ACCEPT", "", "-A INPUT -j LOG\n"),
			pkt:         toNode,
			wantErrPart: `unknown target or undeclared chain "LOG"`,
		},
		{
			name:        "an unknown match",
			dump:        dump("ACCEPT", "", "-A INPUT -m owner --uid-owner 0 -j ACCEPT\n"),
			pkt:         toNode,
			wantErrPart: "Couldn't load match `owner'",
		},
		{
			// The IPVS mode's sets parse, but without Node.Sets the
			// tracer does not know their members.
			name:        "a match that parses but is not traced",
			dump:        dump("ACCEPT", "", "-A INPUT -m set --match-set KUBE-X dst -j ACCEPT\n"),
			pkt:         toNode,
			wantErrPart: `match "set" is not modelled`,
		},
		{
			name:        "rules in the mangle table",
			dump:        "*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j MARK --set-xmark 0x1/0x1\nCOMMIT\n",
			pkt:         toNode,
			wantErrPart: "table mangle has rules",
		},
		{
			name:        "an input interface the packet does not name",
			dump:        dump("ACCEPT", "-A PREROUTING -i eth0 -j RETURN\n", ""),
			pkt:         pkt(Forwarded, "198.19.0.2", "198.19.0.1:80", func(p *Packet) { p.InInterface = "" }),
			wantErrPart: "Packet.InInterface is not set",
		},
		{
			name:        "DNAT reached from POSTROUTING",
			dump:        dump("ACCEPT", ":A - [0:0]\n-A POSTROUTING -j A\n-A A -j DNAT --to-destination 198.19.0.3\n", ""),
			pkt:         pkt(Forwarded, "198.19.0.2", "198.19.3.3:80"),
			wantErrPart: "DNAT reached from nat POSTROUTING",
		},
		{
			name:        "a source port rule without a source port",
			dump:        dump("ACCEPT", "", "-A INPUT -p tcp -m tcp --sport 1024:65535 -j ACCEPT\n"),
			pkt:         toNode,
			wantErrPart: "--sport needs Packet.SourcePort",
		},
		{
			name:        "an address type other than LOCAL",
			dump:        dump("ACCEPT", "", "-A INPUT -m addrtype --dst-type BROADCAST -j DROP\n"),
			pkt:         toNode,
			wantErrPart: "address type BROADCAST is not modelled",
		},
		{
			name:        "a packet of the other family",
			dump:        dump("ACCEPT", "", ""),
			pkt:         pkt(Forwarded, "198.19.0.2", "[fd00::1]:80"),
			wantErrPart: "not of the dump's family",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.node
			if n.LocalAddresses == nil {
				n.LocalAddresses = []netip.Addr{nodeIP, netip.MustParseAddr("fd00:19::1")}
			}
			res, err := Run(tc.dump, tc.pkt, n)
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

func TestResultDestinations(t *testing.T) {
	a, b := netip.MustParseAddrPort("198.19.1.1:80"), netip.MustParseAddrPort("198.19.1.2:80")
	r := Result{Paths: []Path{
		{Verdict: Accepted, Destination: a, Probability: 0.25},
		{Verdict: Dropped, Destination: b, Probability: 0.25},
		{Verdict: Accepted, Destination: a, Probability: 0.5},
	}}
	got := r.Destinations()
	if len(got) != 1 || got[a] != 0.75 {
		t.Errorf("Destinations = %v, want only %s with 0.75", got, a)
	}
}
