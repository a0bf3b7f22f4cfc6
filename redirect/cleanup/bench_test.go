package cleanup

import (
	"fmt"
	"strings"
	"testing"

	"kproxy.dev/kproxy/sync/mode"
)

// bigSave renders an iptables-mode nat table for n services with two
// endpoints each, like a large cluster's node.
func bigSave(n int) string {
	var decl, rules strings.Builder
	decl.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n")
	rules.WriteString("-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n")
	for i := 0; i < n; i++ {
		svc := fmt.Sprintf("KUBE-SVC-%016d", i)
		fmt.Fprintf(&decl, ":%s - [0:0]\n", svc)
		fmt.Fprintf(&rules, "-A KUBE-SERVICES -d 198.18.%d.%d/32 -p tcp -m comment --comment \"ns/svc%d:http cluster IP\" -m tcp --dport 80 -j %s\n", i/250, i%250, i, svc)
		for e := 0; e < 2; e++ {
			sep := fmt.Sprintf("KUBE-SEP-%014d%02d", i, e)
			fmt.Fprintf(&decl, ":%s - [0:0]\n", sep)
			fmt.Fprintf(&rules, "-A %s -m comment --comment \"ns/svc%d:http\" -j %s\n", svc, i, sep)
			fmt.Fprintf(&rules, "-A %s -p tcp -m tcp -j DNAT --to-destination 198.19.%d.%d:8080\n", sep, i/125, (i%125)*2+e)
		}
	}
	return decl.String() + rules.String() + "COMMIT\n"
}

func BenchmarkPlan(b *testing.B) {
	for _, n := range []int{100, 10000} {
		save := bigSave(n)
		b.Run(fmt.Sprintf("services=%d/keep=none", n), func(b *testing.B) {
			b.SetBytes(int64(len(save)))
			for b.Loop() {
				if _, err := Plan(save, keeping("")); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("services=%d/keep=iptables", n), func(b *testing.B) {
			b.SetBytes(int64(len(save)))
			for b.Loop() {
				if _, err := Plan(save, keeping(mode.IPTables)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
