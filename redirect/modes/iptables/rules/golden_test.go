package rules

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/bench/testkit/catalogue"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestGolden renders every scenario to a full restore payload and compares
// it, as text, with testdata/<scenario>.golden (KPROXY_UPDATE_GOLDEN=1
// rewrites them).
func TestGolden(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			b := mustBuilder(t, sc.Config)
			testkit.Golden(t, filepath.Join("testdata", sc.Name+".golden"), renderRestore(b, mustPorts(t, b, sc.Ports...)))
		})
	}
}

// catalogueConfig is the iptables mode's configuration for the shared
// catalogue in family fam: kube-proxy's defaults (localhost NodePorts,
// --random-fully) on testkit's node with the pod range as --cluster-cidr.
// Change it here when Config changes.
func catalogueConfig(fam ipfamily.Family, snap *servicemap.Snapshot) Config {
	cfg := nodeConfig(fam)
	cfg.ClusterCIDRs = []netip.Prefix{testkit.PodCIDR(fam)}
	cfg.LocalhostNodePorts, cfg.RandomFully = true, true
	cfg.Topology = servicemap.TopologyOf(testkit.NodeName, snap)
	return cfg
}

// TestCatalogue renders every scenario of the shared catalogue to this
// mode's restore payload, per family, in testdata/scenarios/<name>.golden;
// the IPVS and userspace modes render the same scenarios beside it. A
// port the model refuses is recorded with its error, as the mode logs it.
func TestCatalogue(t *testing.T) {
	catalogue.RenderEach(t, func(t *testing.T, snap *servicemap.Snapshot, fam ipfamily.Family) string {
		var sb strings.Builder
		fmt.Fprintf(&sb, "# %s restore payload\n", fam)
		b, err := New(catalogueConfig(fam, snap))
		if err != nil {
			fmt.Fprintf(&sb, "error: %v\n", err)
			return sb.String()
		}
		var ports []PortRules
		for name, sp := range snap.All() {
			pr, err := b.ForPort(sp)
			if err != nil {
				fmt.Fprintf(&sb, "error: service port %s: %v\n", name, err)
				continue
			}
			ports = append(ports, pr)
		}
		sb.WriteString(renderRestore(b, ports))
		return sb.String()
	})
}
