package desired

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/bench/testkit/catalogue"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestGolden dumps every scenario's desired state and compares it, as text,
// with testdata/<scenario>.golden (KPROXY_UPDATE_GOLDEN=1 rewrites them).
func TestGolden(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			testkit.Golden(t, filepath.Join("testdata", sc.Name+".golden"), Dump(mustBuild(t, sc.Config, sc.Ports...)))
		})
	}
}

// catalogueConfig is the IPVS mode's configuration for the shared catalogue
// in family fam: kube-proxy's defaults (rr, --random-fully) on testkit's
// node, whose addresses are its local ones, with the pod range as
// --cluster-cidr. Change it here when Config changes.
func catalogueConfig(fam ipfamily.Family, snap *servicemap.Snapshot) Config {
	cfg := nodeConfig(fam)
	cfg.ClusterCIDRs = []netip.Prefix{testkit.PodCIDR(fam)}
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
	catalogue.RenderEach(t, func(t *testing.T, snap *servicemap.Snapshot, fam ipfamily.Family) string {
		st, err := Build(catalogueConfig(fam, snap), snap)
		if err != nil {
			return fmt.Sprintf("# family %s\nerror: %v\n", fam, err)
		}
		return Dump(st)
	})
}
