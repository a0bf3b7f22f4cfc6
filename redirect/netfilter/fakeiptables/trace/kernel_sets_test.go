package trace

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// kernelSetCase is one set match checked against the kernel: a packet from
// 198.19.0.2 to 198.19.0.1:80 (both on lo), optionally from source port
// 40000, through filter INPUT.
type kernelSetCase struct {
	name       string
	set        IPSet
	match      string
	proto      string
	sourcePort uint16
}

func kernelSetCases() []kernelSetCase {
	ip := netip.MustParseAddr
	v4 := func(typ string, members ...SetMember) IPSet {
		return IPSet{Type: typ, Family: ipfamily.IPv4, Members: members}
	}
	ipPort := func(addr, proto string, port uint16) SetMember {
		return SetMember{Addr: ip(addr), Protocol: proto, Port: port}
	}
	ports := func(ps ...uint16) IPSet {
		s := IPSet{Type: SetBitmapPort}
		for _, p := range ps {
			s.Members = append(s.Members, SetMember{Port: p})
		}
		return s
	}
	withNet := func(prefix string) IPSet {
		return v4(SetHashIPPortNet, SetMember{Addr: ip("198.19.0.1"), Protocol: "tcp", Port: 80, Net: netip.MustParsePrefix(prefix)})
	}
	return []kernelSetCase{
		{"hash:ip dst", v4(SetHashIP, SetMember{Addr: ip("198.19.0.1")}), "--match-set S dst", "tcp", 0},
		{"hash:ip src", v4(SetHashIP, SetMember{Addr: ip("198.19.0.1")}), "--match-set S src", "tcp", 0},
		{"hash:ip with extra flags", v4(SetHashIP, SetMember{Addr: ip("198.19.0.1")}), "--match-set S dst,src,src", "udp", 0},
		{"hash:ip,port dst,dst", v4(SetHashIPPort, ipPort("198.19.0.1", "tcp", 80)), "--match-set S dst,dst", "tcp", 0},
		{"hash:ip,port of another protocol", v4(SetHashIPPort, ipPort("198.19.0.1", "udp", 80)), "--match-set S dst,dst", "tcp", 0},
		{"hash:ip,port with one flag", v4(SetHashIPPort, ipPort("198.19.0.1", "udp", 80)), "--match-set S dst", "udp", 0},
		{"hash:ip,port with one flag, negated", v4(SetHashIPPort, ipPort("198.19.0.1", "udp", 80)), "! --match-set S dst", "udp", 0},
		{"hash:ip,port src,dst", v4(SetHashIPPort, ipPort("198.19.0.2", "tcp", 80)), "--match-set S src,dst", "tcp", 0},
		{"hash:ip,port dst,src", v4(SetHashIPPort, ipPort("198.19.0.1", "udp", 40000)), "--match-set S dst,src", "udp", 40000},
		{"hash:ip,port,ip dst,dst,src", v4(SetHashIPPortIP, SetMember{Addr: ip("198.19.0.1"), Protocol: "tcp", Port: 80, Addr2: ip("198.19.0.2")}),
			"--match-set S dst,dst,src", "tcp", 0},
		{"hash:ip,port,net holding the source", withNet("198.19.0.0/24"), "--match-set S dst,dst,src", "tcp", 0},
		{"hash:ip,port,net not holding the source", withNet("198.19.0.128/25"), "--match-set S dst,dst,src", "tcp", 0},
		{"bitmap:port, UDP", ports(80), "--match-set S dst", "udp", 0},
		{"bitmap:port, TCP", ports(80), "--match-set S dst", "tcp", 0},
		{"bitmap:port by source port", ports(40000), "--match-set S src", "tcp", 40000},
		{"bitmap:port, another port", ports(81), "--match-set S dst", "tcp", 0},
	}
}

// TestSetMatchAgreesWithTheKernel sends each case's packet in a throwaway
// namespace past a counting rule and checks that the kernel's count says
// what the tracer says of the same rule, set and packet. (SCTP is left
// out: this host has no SCTP.)
func TestSetMatchAgreesWithTheKernel(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	if _, err := exec.LookPath("ipset"); err != nil {
		t.Skip("needs ipset")
	}
	for _, a := range []string{"198.19.0.1/32", "198.19.0.2/32"} {
		lab.Run(t, "ip", "addr", "add", a, "dev", "lo")
	}
	n := Node{LocalAddresses: []netip.Addr{netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.0.2")}}
	rule := func(match string) string { return "-s 198.19.0.2/32 -d 198.19.0.1/32 -m set " + match }
	for _, tc := range kernelSetCases() {
		t.Run(tc.name, func(t *testing.T) {
			lab.Run(t, "iptables-nft", "-F", "INPUT")
			lab.Run(t, "ipset", "destroy")
			restoreSet(t, "S", tc.set)
			lab.Run(t, "iptables-nft", append([]string{"-A", "INPUT"}, strings.Fields(rule(tc.match))...)...)
			sendOnce(t, tc.proto, tc.sourcePort)
			kernelMatched := countOf(t, lab.Run(t, "iptables-nft-save", "-c", "-t", "filter")) > 0

			n.Sets = map[string]IPSet{"S": tc.set}
			p := Packet{Source: netip.MustParseAddr("198.19.0.2"), Destination: netip.MustParseAddr("198.19.0.1"),
				DestinationPort: 80, SourcePort: tc.sourcePort, Protocol: tc.proto, Entry: Local, OutInterface: "lo"}
			res, err := Run(dump("ACCEPT", "", "-A INPUT "+rule(tc.match)+" -j DROP\n"), p, n)
			if err != nil {
				t.Fatal(err)
			}
			if traced := res.Verdict == Dropped; traced != kernelMatched {
				t.Errorf("the kernel matched: %v; the tracer: %v\n%s", kernelMatched, traced, res)
			}
		})
	}
}

// restoreSet creates set name in the kernel with ipset restore.
func restoreSet(t *testing.T, name string, s IPSet) {
	t.Helper()
	var b strings.Builder
	switch s.Type {
	case SetBitmapPort:
		fmt.Fprintf(&b, "create %s %s range 0-65535\n", name, s.Type)
	default:
		fmt.Fprintf(&b, "create %s %s family inet\n", name, s.Type)
	}
	for _, m := range s.Members {
		fmt.Fprintf(&b, "add %s %s\n", name, ipsetMember(s.Type, m))
	}
	cmd := exec.Command("ipset", "restore")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ipset restore:\n%s: %v\n%s", b.String(), err, out)
	}
}

// ipsetMember writes a member as ipset's add command takes it.
func ipsetMember(typ string, m SetMember) string {
	switch typ {
	case SetBitmapPort:
		return strconv.Itoa(int(m.Port))
	case SetHashIP:
		return m.Addr.String()
	}
	s := fmt.Sprintf("%s,%s:%d", m.Addr, m.Protocol, m.Port)
	switch typ {
	case SetHashIPPortIP:
		s += "," + m.Addr2.String()
	case SetHashIPPortNet:
		s += "," + m.Net.String()
	}
	return s
}

// sendOnce sends one packet from 198.19.0.2 (port sourcePort, 0: any) to
// 198.19.0.1:80: a UDP datagram, or a TCP SYN that nothing listens for.
func sendOnce(t *testing.T, proto string, sourcePort uint16) {
	t.Helper()
	src := netip.AddrPortFrom(netip.MustParseAddr("198.19.0.2"), sourcePort)
	dst := "198.19.0.1:80"
	if proto == "udp" {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(src))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.WriteToUDPAddrPort([]byte("x"), netip.MustParseAddrPort(dst)); err != nil {
			t.Fatal(err)
		}
		return
	}
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(src), Timeout: 2 * time.Second}
	if c, err := d.Dial("tcp", dst); err == nil {
		c.Close()
		t.Fatal("something listens on 198.19.0.1:80 in the test namespace")
	}
}

var counted = regexp.MustCompile(`(?m)^\[(\d+):\d+\] -A INPUT .*--match-set S `)

// countOf reads the packet count of the set rule from iptables-save -c.
func countOf(t *testing.T, save string) int {
	t.Helper()
	m := counted.FindStringSubmatch(save)
	if m == nil {
		t.Fatalf("no counted set rule in\n%s", save)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
