package rulespec

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/ipfamily"
)

func TestParseReadsEveryPart(t *testing.T) {
	words, err := restore.SplitRule(`! -s 10.1.2.3/8 -d 198.18.0.10/32 -p tcp ! -i eth+ -o lo -m comment --comment "a b" -m tcp ! --dport 80:90 -m conntrack ! --ctstate DNAT --ctorigdst 198.18.0.1 -j DNAT --to-destination 198.19.1.11:8080`)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse(words, Context{Family: ipfamily.IPv4, Table: "nat"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Source == nil || !r.Source.Negated || r.Source.Prefix != netip.MustParsePrefix("10.0.0.0/8") {
		t.Errorf("source %+v, want ! 10.0.0.0/8 (masked as iptables-save prints it)", r.Source)
	}
	if r.Destination == nil || r.Destination.Negated || r.Destination.Prefix != netip.MustParsePrefix("198.18.0.10/32") {
		t.Errorf("destination %+v", r.Destination)
	}
	if r.Protocol.Name != "tcp" || !r.InInterface.Negated || r.InInterface.Name != "eth+" || r.OutInterface.Name != "lo" {
		t.Errorf("protocol %+v in %+v out %+v", r.Protocol, r.InInterface, r.OutInterface)
	}
	if len(r.Matches) != 3 || r.Matches[0].Name != "comment" || r.Matches[1].Name != "tcp" || r.Matches[2].Name != "conntrack" {
		t.Fatalf("matches %+v", r.Matches)
	}
	if o, ok := FindOption(r.Matches[1].Options, "--dport"); !ok || !o.Negated || o.Arg != "80:90" {
		t.Errorf("--dport %+v", o)
	}
	if o, ok := FindOption(r.Matches[2].Options, "--ctstate"); !ok || !o.Negated || o.Arg != "DNAT" {
		t.Errorf("--ctstate %+v", o)
	}
	if r.Target.Name != "DNAT" || r.Target.IsChain() || r.Target.Goto || r.Target.Options[0].Arg != "198.19.1.11:8080" {
		t.Errorf("target %+v", r.Target)
	}
}

func TestParseTargets(t *testing.T) {
	cases := []struct {
		line    string
		fam     ipfamily.Family
		target  string
		isChain bool
		isGoto  bool
	}{
		{"-j KUBE-SVC-X", ipfamily.IPv4, "KUBE-SVC-X", true, false},
		{"-g KUBE-SVC-X", ipfamily.IPv4, "KUBE-SVC-X", true, true},
		{"-p tcp", ipfamily.IPv4, "", false, false},
		{"-j MARK --set-xmark 0x4000/0x4000", ipfamily.IPv4, "MARK", false, false},
		{"-j MASQUERADE --random-fully", ipfamily.IPv4, "MASQUERADE", false, false},
		{"-p tcp -j REDIRECT --to-ports 40000", ipfamily.IPv4, "REDIRECT", false, false},
		{"-p tcp -j DNAT --to-destination [fd00:19:1::11]:8080", ipfamily.IPv6, "DNAT", false, false},
		{"-j REJECT --reject-with icmp6-port-unreachable", ipfamily.IPv6, "REJECT", false, false},
	}
	for _, tc := range cases {
		r, err := Parse(strings.Fields(tc.line), Context{Family: tc.fam, Table: "nat"})
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.line, err)
			continue
		}
		if r.Target.Name != tc.target || r.Target.IsChain() != tc.isChain || r.Target.Goto != tc.isGoto {
			t.Errorf("Parse(%q) target %+v", tc.line, r.Target)
		}
	}
}

func TestParseRefusals(t *testing.T) {
	cases := []struct {
		line, table string
		fam         ipfamily.Family
		want        string
		bare        bool
	}{
		{"-m foo --bar", "filter", ipfamily.IPv4, "Couldn't load match `foo'", false},
		{"-p tcp -m tcp --foo 1", "filter", ipfamily.IPv4, `unknown option "--foo"`, false},
		{"-m tcp --dport 80", "filter", ipfamily.IPv4, "TCP match requires '-p tcp'", false},
		{"! -p tcp -m tcp --dport 80", "filter", ipfamily.IPv4, "TCP match requires '-p tcp'", false},
		{"-p udp -m udp --dport http", "filter", ipfamily.IPv4, "invalid port/service `http' specified", false},
		{"-s fd00::1", "filter", ipfamily.IPv4, "host/network `fd00::1' not found", false},
		{"-d 10.0.0.1", "filter", ipfamily.IPv6, "host/network `10.0.0.1' not found", false},
		{"-s 10.0.0.0/33", "filter", ipfamily.IPv4, "invalid mask `33' specified", false},
		{"-j ACCEPT extra", "filter", ipfamily.IPv4, "Bad argument `extra'", true},
		{"-j ACCEPT --reject-with tcp-reset", "filter", ipfamily.IPv4, `unknown option "--reject-with"`, false},
		{"-j REJECT --reject-with icmp-port-unreachable", "filter", ipfamily.IPv6, `Bad reject type "icmp-port-unreachable"`, false},
		{"-j DROP", "nat", ipfamily.IPv4, "the use of DROP is therefore inhibited", false},
		{"-j DNAT", "nat", ipfamily.IPv4, `DNAT: option "--to-destination" must be specified`, false},
		{"-j DNAT --to-destination 10.0.0.1-10.0.0.9", "nat", ipfamily.IPv4, "ranges are not modelled", false},
		{"-j MARK", "nat", ipfamily.IPv4, "MARK: exactly one of", false},
		{"-j MARK --set-xmark 0x4000/0xzz", "nat", ipfamily.IPv4, `bad MARK value "0x4000/0xzz"`, false},
		{"-m statistic --mode random", "nat", ipfamily.IPv4, "--mode random needs --probability", false},
		{"-m statistic --mode random --probability 1.5", "nat", ipfamily.IPv4, "--probability must be between 0 and 1", false},
		{"-m recent --name X --rsource", "nat", ipfamily.IPv4, "you must specify one of", false},
		{"-m conntrack --ctstate NEW,BOGUS", "nat", ipfamily.IPv4, `Bad ctstate "BOGUS"`, false},
		{"-m addrtype --dst-type LOCALE", "nat", ipfamily.IPv4, `Bad address type "LOCALE"`, false},
		{"-m comment ! --comment x", "nat", ipfamily.IPv4, `option "--comment" cannot be inverted`, false},
		{"-p tcp -m tcp --dport", "nat", ipfamily.IPv4, `option "--dport" requires an argument`, false},
		{"-g ACCEPT", "nat", ipfamily.IPv4, "goto 'ACCEPT' is not a chain", false},
		{"-s 10.0.0.1 -s 10.0.0.2", "nat", ipfamily.IPv4, "multiple -s flags not allowed", false},
		{"-p tcp --dport 80", "nat", ipfamily.IPv4, `write "-m tcp --dport"`, false},
		{"-j ACCEPT !", "nat", ipfamily.IPv4, "Bad argument `!'", true},
	}
	for _, tc := range cases {
		_, err := Parse(strings.Fields(tc.line), Context{Family: tc.fam, Table: tc.table})
		var se *Error
		if !errors.As(err, &se) {
			t.Errorf("Parse(%q) = %v, want a *rulespec.Error", tc.line, err)
			continue
		}
		if !strings.Contains(se.Msg, tc.want) || se.Bare != tc.bare {
			t.Errorf("Parse(%q) = %q (bare %v), want %q (bare %v)", tc.line, se.Msg, se.Bare, tc.want, tc.bare)
		}
	}
}

func TestTargetAllowedIn(t *testing.T) {
	cases := []struct {
		target, table string
		want          bool
	}{
		{"DNAT", "nat", true}, {"DNAT", "filter", false}, {"MASQUERADE", "filter", false},
		{"REJECT", "filter", true}, {"REJECT", "nat", false}, {"MARK", "nat", true}, {"KUBE-SVC-X", "filter", true},
	}
	for _, tc := range cases {
		if got := TargetAllowedIn(tc.target, tc.table); got != tc.want {
			t.Errorf("TargetAllowedIn(%s, %s) = %v, want %v", tc.target, tc.table, got, tc.want)
		}
	}
}

func TestValues(t *testing.T) {
	if v, m, err := ParseMark("0x4000"); err != nil || v != 0x4000 || m != 0xffffffff {
		t.Errorf("ParseMark(0x4000) = %#x/%#x, %v", v, m, err)
	}
	if lo, hi, err := ParsePortRange("30000:32767"); err != nil || lo != 30000 || hi != 32767 {
		t.Errorf("ParsePortRange = %d:%d, %v", lo, hi, err)
	}
	if _, _, err := ParsePortRange("90:80"); err == nil {
		t.Error("a reversed port range was accepted")
	}
	if a, p, err := ParseNATAddr("[fd00::1]:80", ipfamily.IPv6); err != nil || a != netip.MustParseAddr("fd00::1") || p != 80 {
		t.Errorf("ParseNATAddr([fd00::1]:80) = %v %d %v", a, p, err)
	}
	if a, p, err := ParseNATAddr("fd00::1", ipfamily.IPv6); err != nil || a != netip.MustParseAddr("fd00::1") || p != 0 {
		t.Errorf("ParseNATAddr(fd00::1) = %v %d %v", a, p, err)
	}
	if a, p, err := ParseNATAddr("10.0.0.1", ipfamily.IPv4); err != nil || a != netip.MustParseAddr("10.0.0.1") || p != 0 {
		t.Errorf("ParseNATAddr(10.0.0.1) = %v %d %v", a, p, err)
	}
	if p, err := ParsePrefix("10.1.2.3/255.255.0.0", ipfamily.IPv4); err != nil || p != netip.MustParsePrefix("10.1.0.0/16") {
		t.Errorf("ParsePrefix with a dotted mask = %v, %v", p, err)
	}
	if _, err := ParsePrefix("10.0.0.0/255.0.255.0", ipfamily.IPv4); err == nil {
		t.Error("a non-contiguous mask was accepted")
	}
	if !InterfaceMatches("eth+", "eth0") || InterfaceMatches("eth+", "veth0") || !InterfaceMatches("lo", "lo") || InterfaceMatches("lo", "lo0") {
		t.Error("InterfaceMatches gets wildcards wrong")
	}
}

// The IPVS mode's matches, in the text iptables-legacy-save 1.8.9 printed
// for them (set, physdev, MARK's save forms: checked in a network
// namespace; ipvs: from libxt_ipvs's save function, as this kernel has no
// IPVS to load the match).
func TestParseIPVSModeVocabulary(t *testing.T) {
	cases := []struct {
		line      string
		fam       ipfamily.Family
		match     string
		option    string
		wantArg   string
		wantNeg   bool
		wantError string
	}{
		{line: `-m comment --comment "x y" -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT`, match: "set", option: "--match-set", wantArg: "KUBE-CLUSTER-IP dst,dst"},
		{line: `-m set ! --match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ`, match: "set", option: "--match-set", wantArg: "KUBE-CLUSTER-IP src,dst", wantNeg: true},
		{line: `-p tcp -m set --match-set KUBE-NODE-PORT-TCP dst -j RETURN`, match: "set", option: "--match-set", wantArg: "KUBE-NODE-PORT-TCP dst"},
		{line: `-m set --match-set KUBE-6-LOOP-BACK dst,dst,src -j MASQUERADE`, fam: ipfamily.IPv6, match: "set", option: "--match-set", wantArg: "KUBE-6-LOOP-BACK dst,dst,src"},
		{line: `-m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT`, match: "physdev", option: "--physdev-is-in", wantNeg: true},
		{line: `-s 198.18.0.5/32 -m ipvs --vproto 6 --vaddr 198.18.0.5/32 --vport 443 -j DROP`, match: "ipvs", option: "--vaddr", wantArg: "198.18.0.5/32"},
		{line: `-m ipvs --vproto 132 --vaddr fd00:18::5/128 --vport 80 -j DROP`, fam: ipfamily.IPv6, match: "ipvs", option: "--vproto", wantArg: "132"},
		{line: `-m set --match-set KUBE-CLUSTER-IP dst,tcp -j ACCEPT`, wantError: "'src' or 'dst'"},
		{line: `-m set --match-set KUBE-CLUSTER-IP src,src,src,src,src,src,src -j ACCEPT`, wantError: "more src/dst options than 6"},
		{line: `-m set --match-set KUBE-CLUSTER-IP`, wantError: `option "--match-set" requires an argument`},
		{line: `-m set -j ACCEPT`, wantError: "You must specify `--match-set'"},
		{line: `-m physdev -j ACCEPT`, wantError: "PHYSDEV: at least one option"},
		{line: `-m ipvs -j ACCEPT`, wantError: "IPVS: at least one option"},
		{line: `-m ipvs --vproto tcp -j DROP`, wantError: "write its number"},
		{line: `-m ipvs --vaddr fd00::1 -j DROP`, wantError: "host/network `fd00::1' not found"},
		{line: `-m ipvs --vport 80:90 -j DROP`, wantError: "ranges are not modelled"},
		{line: `-m comment ! --match-set X dst -j ACCEPT`, wantError: `unknown option "--match-set"`},
	}
	for _, tc := range cases {
		fam := tc.fam
		if fam == "" {
			fam = ipfamily.IPv4
		}
		words, err := restore.SplitRule(tc.line)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Parse(words, Context{Family: fam, Table: "filter"})
		if tc.wantError != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantError) {
				t.Errorf("Parse(%q) = %v, want an error containing %q", tc.line, err, tc.wantError)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.line, err)
			continue
		}
		var found bool
		for _, m := range r.Matches {
			if m.Name != tc.match {
				continue
			}
			o, ok := FindOption(m.Options, tc.option)
			if !ok || o.Arg != tc.wantArg || o.Negated != tc.wantNeg {
				t.Errorf("Parse(%q): -m %s %s = %+v, want arg %q negated %v", tc.line, tc.match, tc.option, o, tc.wantArg, tc.wantNeg)
			}
			found = true
		}
		if !found {
			t.Errorf("Parse(%q): no -m %s", tc.line, tc.match)
		}
	}
}
