package nftables

import (
	"testing"

	"sigs.k8s.io/knftables"

	"kproxy.dev/kproxy/bench/testkit/catalogue"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// TestCatalogue renders every scenario of the shared catalogue with one
// full sync into a knftables fake, per family, and compares the table's
// dump with testdata/scenarios/<name>.golden (KPROXY_UPDATE_GOLDEN=1
// rewrites them).
func TestCatalogue(t *testing.T) {
	catalogue.RenderEach(t, func(t *testing.T, snap *servicemap.Snapshot, fam ipfamily.Family) string {
		fake := fakeFor(fam)
		m := newTestMode(t, nil, map[ipfamily.Family]knftables.Interface{fam: fake})
		mustSync(t, m, snap, full())
		return "# " + string(fam) + " table\n" + fake.Dump()
	})
}
