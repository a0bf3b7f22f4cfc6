package iptables

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
)

func natChain(name string, rs ...string) rules.Chain {
	return rules.Chain{Table: rules.NAT, Name: name, Rules: rs}
}

func TestPortDiff(t *testing.T) {
	sepA := natChain("KUBE-SEP-A", "-j DNAT --to-destination 198.19.1.11:80")
	sepB := natChain("KUBE-SEP-B", "-j DNAT --to-destination 198.19.1.12:80")
	svcA := natChain("KUBE-SVC-X", "-j KUBE-SEP-A")
	svcAB := natChain("KUBE-SVC-X", "-m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-A", "-j KUBE-SEP-B")
	dispatch := rules.SharedRule{Table: rules.NAT, Chain: "KUBE-SERVICES", Rule: "-d 198.18.0.1/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-X"}
	reject := rules.SharedRule{Table: rules.Filter, Chain: "KUBE-SERVICES", Rule: "-d 198.18.0.1/32 -p tcp -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable"}
	hasTail := map[sharedKey]bool{{rules.NAT, "KUBE-SERVICES"}: true}

	oneEP := &rules.PortRules{Chains: []rules.Chain{sepA, svcA}, Shared: []rules.SharedRule{dispatch}}
	twoEP := &rules.PortRules{Chains: []rules.Chain{sepA, sepB, svcAB}, Shared: []rules.SharedRule{dispatch}}
	noEP := &rules.PortRules{Shared: []rules.SharedRule{reject}}

	tests := []struct {
		name     string
		old, new *rules.PortRules
		want     string
	}{
		{
			name: "new port: every chain, shared rule inserted above the tail",
			new:  oneEP,
			want: `*nat
:KUBE-SEP-A - [0:0]
:KUBE-SVC-X - [0:0]
-A KUBE-SEP-A -j DNAT --to-destination 198.19.1.11:80
-A KUBE-SVC-X -j KUBE-SEP-A
-I KUBE-SERVICES 1 -d 198.18.0.1/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-X
COMMIT
`,
		},
		{
			name: "endpoint added: unchanged chains are left alone, shared chains untouched",
			old:  oneEP, new: twoEP,
			want: `*nat
:KUBE-SEP-B - [0:0]
:KUBE-SVC-X - [0:0]
-A KUBE-SEP-B -j DNAT --to-destination 198.19.1.12:80
-A KUBE-SVC-X -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-A
-A KUBE-SVC-X -j KUBE-SEP-B
COMMIT
`,
		},
		{
			name: "endpoint removed: its chain flushed and deleted after the rewrite",
			old:  twoEP, new: oneEP,
			want: `*nat
:KUBE-SVC-X - [0:0]
:KUBE-SEP-B - [0:0]
-A KUBE-SVC-X -j KUBE-SEP-A
-X KUBE-SEP-B
COMMIT
`,
		},
		{
			name: "last endpoint gone: dispatch replaced by a reject, chains deleted jumper first",
			old:  oneEP, new: noEP,
			want: `*nat
:KUBE-SVC-X - [0:0]
:KUBE-SEP-A - [0:0]
-D KUBE-SERVICES -d 198.18.0.1/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-X
-X KUBE-SVC-X
-X KUBE-SEP-A
COMMIT
*filter
-A KUBE-SERVICES -d 198.18.0.1/32 -p tcp -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable
COMMIT
`,
		},
		{
			name: "port removed",
			old:  noEP,
			want: `*filter
-D KUBE-SERVICES -d 198.18.0.1/32 -p tcp -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable
COMMIT
`,
		},
		{
			name: "nothing changed: empty payload",
			old:  twoEP, new: twoEP,
			want: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPayload()
			portDiff(p, tt.old, tt.new, hasTail)
			if diff := cmp.Diff(tt.want, string(p.Bytes())); diff != "" {
				t.Errorf("payload (-want +got):\n%s", diff)
			}
			if got := p.Empty(); got != (tt.want == "") {
				t.Errorf("Empty() = %v", got)
			}
		})
	}
}

func TestWriteSharedSortsPortRulesAboveTail(t *testing.T) {
	p := newPayload()
	sr := sharedRules{}
	sr.add(rules.SharedRule{Table: rules.NAT, Chain: "KUBE-SERVICES", Rule: "-d 198.18.0.2/32 -j KUBE-SVC-B"})
	sr.add(rules.SharedRule{Table: rules.NAT, Chain: "KUBE-SERVICES", Rule: "-d 198.18.0.1/32 -j KUBE-SVC-A"})
	writeShared(p, []rules.SharedChain{
		{Table: rules.NAT, Name: "KUBE-SERVICES", Tail: []string{"-m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"}},
		{Table: rules.NAT, Name: "KUBE-NODEPORTS"},
	}, sr)
	want := strings.Join([]string{
		"*nat",
		":KUBE-SERVICES - [0:0]",
		":KUBE-NODEPORTS - [0:0]",
		"-A KUBE-SERVICES -d 198.18.0.1/32 -j KUBE-SVC-A",
		"-A KUBE-SERVICES -d 198.18.0.2/32 -j KUBE-SVC-B",
		"-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS",
		"COMMIT", "",
	}, "\n")
	if diff := cmp.Diff(want, string(p.Bytes())); diff != "" {
		t.Errorf("payload (-want +got):\n%s", diff)
	}
}
