package desired

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

// TestGolden dumps every scenario's desired state and compares it, as text,
// with testdata/<scenario>.golden (KPROXY_UPDATE_GOLDEN=1 rewrites them).
func TestGolden(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			testkit.Golden(t, filepath.Join("testdata", sc.name+".golden"), Dump(mustBuild(t, sc.cfg, sc.ports...)))
		})
	}
}

// catalogueConfig is the IPVS mode's configuration for the shared catalogue
// in family fam: kube-proxy's defaults (rr, --random-fully) on testkit's
// node, whose addresses are its local ones, with the pod range as
// --cluster-cidr. Change it here when Config changes.
func catalogueConfig(fam kernel.Family, snap *servicemap.Snapshot) Config {
	cfg, pods := v4Config(), "198.19.1.0/24"
	if fam == kernel.IPv6 {
		cfg, pods = v6Config(), "fd00:19:1::/64"
	}
	cfg.ClusterCIDRs = testkit.Prefixes(pods)
	cfg.RandomFully = true
	cfg.Topology = servicemap.TopologyOf(testkit.NodeName, snap)
	return cfg
}

// TestCatalogue dumps, per family, the desired state (virtual servers,
// kube-ipvs0 addresses, ipsets and the iptables payload) of every scenario
// of the shared catalogue into testdata/scenarios/<name>.golden; the
// iptables and userspace modes render the same scenarios beside it. A
// state Build refuses is recorded with its error.
func TestCatalogue(t *testing.T) {
	for _, sc := range catalogue.All() {
		t.Run(sc.Name, func(t *testing.T) {
			snap := sc.Snapshot()
			var sb strings.Builder
			fmt.Fprintf(&sb, "# %s\n", sc.Doc)
			for _, fam := range catalogue.Families(snap) {
				sb.WriteString("\n")
				st, err := Build(catalogueConfig(fam, snap), snap)
				if err != nil {
					fmt.Fprintf(&sb, "# family %s\nerror: %v\n", fam, err)
					continue
				}
				sb.WriteString(Dump(st))
			}
			testkit.Golden(t, filepath.Join("testdata", "scenarios", sc.Name+".golden"), sb.String())
		})
	}
}
