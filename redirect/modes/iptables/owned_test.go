package iptables

import (
	"testing"

	"kproxy.dev/kproxy/redirect/cleanup/owned"
	"kproxy.dev/kproxy/redirect/cleanup/owned/ownedtest"
	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
)

// TestOwnedCoversGoldenOutput: every chain the rule model's golden payloads
// declare is one cleanup removes, but kubelet's KUBE-FIREWALL, which the
// mode fills (localhost NodePorts) and must leave to kubelet.
func TestOwnedCoversGoldenOutput(t *testing.T) {
	ownedtest.CheckGolden(t, "rules/testdata", Owned(), owned.Chain{Table: string(rules.Filter), Name: rules.KubeletFirewall})
}
