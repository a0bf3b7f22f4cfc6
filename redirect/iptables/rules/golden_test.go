package rules

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/bench/testkit/catalogue"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestGolden renders every scenario to a full restore payload and compares
// it, as text, with testdata/<scenario>.golden (KPROXY_UPDATE_GOLDEN=1
// rewrites them).
func TestGolden(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			b := mustBuilder(t, sc.cfg)
			testkit.Golden(t, filepath.Join("testdata", sc.name+".golden"), renderRestore(b, mustPorts(t, b, sc.ports...)))
		})
	}
}

// catalogueConfig is the iptables mode's configuration for the shared
// catalogue in family fam: kube-proxy's defaults (localhost NodePorts,
// --random-fully) on testkit's node with the pod range as --cluster-cidr.
// Change it here when Config changes.
func catalogueConfig(fam kernel.Family, snap *servicemap.Snapshot) Config {
	cfg, pods := v4Config(), "198.19.1.0/24"
	if fam == kernel.IPv6 {
		cfg, pods = v6Config(), "fd00:19:1::/64"
	}
	cfg.ClusterCIDRs = testkit.Prefixes(pods)
	cfg.LocalhostNodePorts, cfg.RandomFully = true, true
	cfg.Topology = servicemap.TopologyOf(testkit.NodeName, snap)
	return cfg
}

// TestCatalogue renders every scenario of the shared catalogue to this
// mode's restore payload, per family, in testdata/scenarios/<name>.golden;
// the IPVS and userspace modes render the same scenarios beside theirs. A
// port the model refuses is recorded with its error, as the mode logs it.
func TestCatalogue(t *testing.T) {
	for _, sc := range catalogue.All() {
		t.Run(sc.Name, func(t *testing.T) {
			snap := sc.Snapshot()
			var sb strings.Builder
			fmt.Fprintf(&sb, "# %s\n", sc.Doc)
			for _, fam := range catalogue.Families(snap) {
				fmt.Fprintf(&sb, "\n# %s restore payload\n", fam)
				b, err := New(catalogueConfig(fam, snap))
				if err != nil {
					fmt.Fprintf(&sb, "error: %v\n", err)
					continue
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
			}
			testkit.Golden(t, filepath.Join("testdata", "scenarios", sc.Name+".golden"), sb.String())
		})
	}
}
