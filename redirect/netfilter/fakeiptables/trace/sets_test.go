package trace

import (
	"net/netip"
	"strings"
	"testing"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// TestSetMatch checks "-m set" against one set named S, through a filter
// INPUT rule that drops what it matches: Dropped means the set matched.
func TestSetMatch(t *testing.T) {
	ip := netip.MustParseAddr
	nodeHTTP := pkt(Forwarded, "198.19.0.2", "198.19.0.1:80")
	withProto := func(proto string) func(*Packet) { return func(p *Packet) { p.Protocol = proto } }
	withSourcePort := func(p *Packet) { p.SourcePort = 40000 }
	v4 := func(typ string, members ...SetMember) IPSet {
		return IPSet{Type: typ, Family: ipfamily.IPv4, Members: members}
	}
	ipPort := func(addr, proto string, port uint16) SetMember {
		return SetMember{Addr: ip(addr), Protocol: proto, Port: port}
	}
	cases := []struct {
		name string
		set  IPSet
		// match is the text after "-m set", nat optional nat rules.
		match, nat  string
		pkt         Packet
		matched     bool
		wantErrPart string
	}{
		{name: "hash:ip by destination", set: v4(SetHashIP, SetMember{Addr: ip("198.19.0.1")}),
			match: "--match-set S dst", pkt: nodeHTTP, matched: true},
		{name: "hash:ip by source", set: v4(SetHashIP, SetMember{Addr: ip("198.19.0.1")}),
			match: "--match-set S src", pkt: nodeHTTP, matched: false},
		{name: "hash:ip: flags beyond the set's dimensions are ignored", set: v4(SetHashIP, SetMember{Addr: ip("198.19.0.1")}),
			match: "--match-set S dst,src,src", pkt: nodeHTTP, matched: true},
		{name: "hash:ip,port dst,dst", set: v4(SetHashIPPort, ipPort("198.19.0.1", "tcp", 80)),
			match: "--match-set S dst,dst", pkt: nodeHTTP, matched: true},
		{name: "hash:ip,port: another port", set: v4(SetHashIPPort, ipPort("198.19.0.1", "tcp", 81)),
			match: "--match-set S dst,dst", pkt: nodeHTTP, matched: false},
		{name: "hash:ip,port: the member's protocol must be the packet's", set: v4(SetHashIPPort, ipPort("198.19.0.1", "udp", 80)),
			match: "--match-set S dst,dst", pkt: nodeHTTP, matched: false},
		{name: "hash:ip,port holds SCTP ports", set: v4(SetHashIPPort, ipPort("198.19.0.1", "sctp", 80)),
			match: "--match-set S dst,dst", pkt: pkt(Forwarded, "198.19.0.2", "198.19.0.1:80", withProto("sctp")), matched: true},
		{name: "hash:ip,port src,dst: the source address with the destination port", set: v4(SetHashIPPort, ipPort("198.19.0.2", "tcp", 80)),
			match: "--match-set S src,dst", pkt: nodeHTTP, matched: true},
		{name: "hash:ip,port dst,src: the source port", set: v4(SetHashIPPort, ipPort("198.19.0.1", "tcp", 40000)),
			match: "--match-set S dst,src", pkt: pkt(Forwarded, "198.19.0.2", "198.19.0.1:80", withSourcePort), matched: true},
		{name: "fewer flags than dimensions never match", set: v4(SetHashIPPort, ipPort("198.19.0.1", "tcp", 80)),
			match: "--match-set S dst", pkt: nodeHTTP, matched: false},
		{name: "negated, fewer flags than dimensions: matches", set: v4(SetHashIPPort, ipPort("198.19.0.1", "tcp", 80)),
			match: "! --match-set S dst", pkt: nodeHTTP, matched: true},
		{name: "negated member", set: v4(SetHashIPPort, ipPort("198.19.0.1", "tcp", 80)),
			match: "! --match-set S dst,dst", pkt: nodeHTTP, matched: false},
		{name: "hash:ip,port,ip dst,dst,src", set: v4(SetHashIPPortIP, SetMember{Addr: ip("198.19.0.1"), Protocol: "tcp", Port: 80, Addr2: ip("198.19.0.2")}),
			match: "--match-set S dst,dst,src", pkt: nodeHTTP, matched: true},
		{name: "hash:ip,port,ip: another third address", set: v4(SetHashIPPortIP, SetMember{Addr: ip("198.19.0.1"), Protocol: "tcp", Port: 80, Addr2: ip("198.19.0.3")}),
			match: "--match-set S dst,dst,src", pkt: nodeHTTP, matched: false},
		{name: "hash:ip,port,net: the source in the net", set: v4(SetHashIPPortNet, SetMember{Addr: ip("198.19.0.1"), Protocol: "tcp", Port: 80, Net: netip.MustParsePrefix("198.19.0.0/24")}),
			match: "--match-set S dst,dst,src", pkt: nodeHTTP, matched: true},
		{name: "hash:ip,port,net: the source outside the net", set: v4(SetHashIPPortNet, SetMember{Addr: ip("198.19.0.1"), Protocol: "tcp", Port: 80, Net: netip.MustParsePrefix("203.0.113.0/25")}),
			match: "--match-set S dst,dst,src", pkt: nodeHTTP, matched: false},
		{name: "bitmap:port, TCP", set: IPSet{Type: SetBitmapPort, Members: []SetMember{{Port: 80}}},
			match: "--match-set S dst", pkt: nodeHTTP, matched: true},
		{name: "bitmap:port, UDP", set: IPSet{Type: SetBitmapPort, Members: []SetMember{{Port: 80}}},
			match: "--match-set S dst", pkt: pkt(Forwarded, "198.19.0.2", "198.19.0.1:80", udp), matched: true},
		{name: "bitmap:port does not see SCTP ports", set: IPSet{Type: SetBitmapPort, Members: []SetMember{{Port: 80}}},
			match: "--match-set S dst", pkt: pkt(Forwarded, "198.19.0.2", "198.19.0.1:80", withProto("sctp")), matched: false},
		{name: "bitmap:port by source port", set: IPSet{Type: SetBitmapPort, Members: []SetMember{{Port: 40000}}},
			match: "--match-set S src", pkt: pkt(Forwarded, "198.19.0.2", "198.19.0.1:80", withSourcePort), matched: true},
		{name: "the set sees the destination DNAT wrote", set: v4(SetHashIPPort, ipPort("198.19.0.1", "tcp", 8080)),
			nat:   "-A PREROUTING -d 198.18.0.5/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 198.19.0.1:8080\n",
			match: "--match-set S dst,dst", pkt: pkt(Forwarded, "198.19.0.2", "198.18.0.5:80"), matched: true},
		{name: "a set of the other family never matches", set: IPSet{Type: SetHashIP, Family: ipfamily.IPv6, Members: []SetMember{{Addr: ip("fd00:19::1")}}},
			match: "--match-set S dst", pkt: nodeHTTP, matched: false},
		{name: "a source port flag without the packet's source port", set: IPSet{Type: SetBitmapPort, Members: []SetMember{{Port: 40000}}},
			match: "--match-set S src", pkt: nodeHTTP, wantErrPart: "needs Packet.SourcePort"},
		{name: "a set the node does not have", set: v4(SetHashIP),
			match: "--match-set OTHER dst", pkt: nodeHTTP, wantErrPart: "set OTHER is not in Node.Sets"},
		{name: "an option not modelled", set: v4(SetHashIP),
			match: "--match-set S dst --return-nomatch", pkt: nodeHTTP, wantErrPart: "--return-nomatch"},
		{name: "a hash:ip,port member without a protocol", set: v4(SetHashIPPort, SetMember{Addr: ip("198.19.0.1"), Port: 80}),
			match: "--match-set S dst,dst", pkt: nodeHTTP, wantErrPart: "Protocol does not fit"},
		{name: "a bitmap:port member with a protocol", set: IPSet{Type: SetBitmapPort, Members: []SetMember{{Protocol: "tcp", Port: 80}}},
			match: "--match-set S dst", pkt: nodeHTTP, wantErrPart: "Protocol does not fit"},
		{name: "a member of the other family", set: v4(SetHashIP, SetMember{Addr: ip("fd00:19::1")}),
			match: "--match-set S dst", pkt: nodeHTTP, wantErrPart: "Addr does not fit"},
		{name: "a hash set without a family", set: IPSet{Type: SetHashIP},
			match: "--match-set S dst", pkt: nodeHTTP, wantErrPart: "needs a Family"},
		{name: "a type not modelled", set: IPSet{Type: "hash:net,iface", Family: ipfamily.IPv4},
			match: "--match-set S dst", pkt: nodeHTTP, wantErrPart: `type "hash:net,iface" is not modelled`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := dump("ACCEPT", tc.nat, "-A INPUT -m set "+tc.match+" -j DROP\n")
			n := node
			n.Sets = map[string]IPSet{"S": tc.set}
			res, err := Run(d, tc.pkt, n)
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
			if tc.matched {
				verdict = Dropped
			}
			checkPaths(t, res, verdict, []want{{verdict, "", 1, false}})
		})
	}
}
