package ownedtest

import (
	"slices"
	"testing"

	"kproxy.dev/kproxy/redirect/cleanup/owned"
)

func TestCreated(t *testing.T) {
	text := `# family IPv4
# sets (empty ones left out)
KUBE-CLUSTER-IP hash:ip,port
  198.18.0.11,tcp:443
# iptables
*nat
:KUBE-SERVICES - [0:0]
-A KUBE-SERVICES -m set --match-set KUBE-LOOP-BACK dst,dst,src -j KUBE-MARK-MASQ
-A PREROUTING -j KUBE-SERVICES
COMMIT
*filter
:KUBE-FORWARD - [0:0]
COMMIT
`
	chains, sets := Created(text)
	if want := []owned.Chain{{Table: "nat", Name: "KUBE-SERVICES"}, {Table: "filter", Name: "KUBE-FORWARD"}}; !slices.Equal(chains, want) {
		t.Errorf("chains = %v, want %v", chains, want)
	}
	if want := []string{"KUBE-CLUSTER-IP", "KUBE-LOOP-BACK"}; !slices.Equal(sets, want) {
		t.Errorf("sets = %v, want %v", sets, want)
	}
}
